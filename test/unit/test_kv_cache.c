/*
 * test_kv_cache.c: unit tests of the paged KV cache's host memory: parameter
 * checks, the geometry, the layout of K and V (every (layer, block, slot) has
 * its own memory), and that the block manager's allocation never touches
 * it.  The block pool and the prefix cache are tested in
 * test_block_manager.c.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kv/block_manager.h"
#include "kv/kv_cache.h"
#include "tap.h"

/* Create a cache; NULL (with a failed check) when creation fails. */
static kv_cache *
NewCache(int n_blocks, int block_size, int n_layers, int n_kv_heads, int head_dim)
{
	kv_cache_params p = {n_blocks, block_size, n_layers, n_kv_heads, head_dim, false, CBLLM_F32, NULL, NULL};
	kv_cache   *kv = NULL;
	cbllm_err	err = {{0}};

	if (kv_cache_create(&p, &kv, &err) != CBLLM_OK)
	{
		TAP_OK(false, "kv_cache_create(%d, %d, %d, %d, %d): %s", n_blocks, block_size,
			   n_layers, n_kv_heads, head_dim, err.msg);
		return NULL;
	}
	return kv;
}

/* Invalid parameters fail as CBLLM_ERR_INVALID with a message, creating nothing. */
static void
TestInvalidParams(void)
{
	struct
	{
		const char *what;
		kv_cache_params p;
	}			cases[] = {
		{"0 blocks", {0, 16, 2, 2, 8, false, CBLLM_F32, NULL, NULL}},
		{"-3 blocks", {-3, 16, 2, 2, 8, false, CBLLM_F32, NULL, NULL}},
		{"block_size 0", {4, 0, 2, 2, 8, false, CBLLM_F32, NULL, NULL}},
		{"block_size -16", {4, -16, 2, 2, 8, false, CBLLM_F32, NULL, NULL}},
		{"block_size 2048 (above 1024)", {4, 2048, 2, 2, 8, false, CBLLM_F32, NULL, NULL}},
		{"0 layers", {4, 16, 0, 2, 8, false, CBLLM_F32, NULL, NULL}},
		{"0 KV heads", {4, 16, 2, 0, 8, false, CBLLM_F32, NULL, NULL}},
		{"head_dim 0", {4, 16, 2, 2, 0, false, CBLLM_F32, NULL, NULL}},
		{"-1 layers", {4, 16, -1, 2, 8, false, CBLLM_F32, NULL, NULL}},
		{"-2 KV heads and head_dim -4 (a positive product)", {4, 16, 2, -2, -4, false, CBLLM_F32, NULL, NULL}},
	};

	for (int i = 0; i < (int) (sizeof(cases) / sizeof(cases[0])); i++)
	{
		kv_cache   *kv = NULL;
		cbllm_err	err = {{0}};
		int			rc = kv_cache_create(&cases[i].p, &kv, &err);

		TAP_OK(rc == CBLLM_ERR_INVALID && kv == NULL && err.msg[0] != '\0',
			   "kv_cache_create with %s fails as invalid (%s): %s", cases[i].what,
			   cbllm_status_name(rc), err.msg);
		if (rc == CBLLM_OK)
			kv_cache_free(kv);
	}
	kv_cache_free(NULL);		/* a no-op; a crash here fails the plan */
}

/* A new pool: fields, block_bytes; with no_data only the geometry. */
static void
TestCreate(void)
{
	kv_cache   *kv = NewCache(5, 16, 3, 2, 8);
	kv_cache   *geometry = NULL;
	kv_cache_params p = {5, 16, 3, 2, 8, true, CBLLM_F32, NULL, NULL};

	TAP_OK(kv_cache_block_bytes(16, 3, 2, 8, CBLLM_F32) == (size_t) 2 * 16 * 3 * 2 * 8 * 4,
		   "block_bytes of (16 positions, 3 layers, 2 heads, dim 8) is K + V in f32: 6144");
	TAP_OK(kv_cache_block_bytes(16, 3, 2, 8, CBLLM_F16) == (size_t) 2 * 16 * 3 * 2 * 8 * 2,
		   "in f16 or bf16 it is half: 3072");
	if (kv == NULL)
		return;
	TAP_OK(kv->n_blocks == 5 && kv->block_size == 16 && kv->n_layers == 3 &&
		   kv->n_kv_heads == 2 && kv->head_dim == 8 && kv->block_floats == 16 * 2 * 8,
		   "the pool records its geometry; a block holds 256 floats per layer");
	TAP_OK(kv->k != NULL && kv->v != NULL, "the pool has K and V memory");
	TAP_OK(kv_cache_create(&p, &geometry, NULL) == CBLLM_OK && geometry->k == NULL &&
		   geometry->v == NULL && geometry->block_floats == kv->block_floats,
		   "with no_data the pool has the same geometry and no K or V memory");
	kv_cache_free(geometry);
	kv_cache_free(kv);
}

/* One (pointer, length) span of K or V memory. */
typedef struct span
{
	const float *p;
	int			n;
	int			kind;			/* 0: K, 1: V */
} span;

/* qsort order of spans by address. */
static int
SpanCmp(const void *a, const void *b)
{
	const span *x = a,
			   *y = b;

	return x->p < y->p ? -1 : x->p > y->p;
}

/* The value stored in element e of (layer, block, slot) of K (kind 0) or V (kind 1). */
static float
CellValue(int kind, int layer, int block, int slot, int e)
{
	return (float) (((((kind * 7 + layer) * 11 + block) * 13 + slot) * 17 + e) + 1) *
		(kind ? -1.0f : 1.0f);
}

/* K and V of distinct (layer, block, slot) never overlap, and hold what was written. */
static void
TestLayout(void)
{
	const int	nb = 3,
				bs = 4,
				nl = 2,
				nh = 2,
				hd = 3;
	const int	row = nh * hd;
	const int64_t per = (int64_t) nl * nb * bs * row;	/* floats of K (or V) */
	kv_cache   *kv = NewCache(nb, bs, nl, nh, hd);
	span	   *sp = malloc(sizeof(span) * 2 * nl * nb * bs);
	int			n = 0;
	bool		inside = true,
				disjoint = true,
				intact = true;

	if (kv == NULL)
		return;
	for (int kind = 0; kind < 2; kind++)
		for (int l = 0; l < nl; l++)
			for (int b = 0; b < nb; b++)
				for (int s = 0; s < bs; s++)
				{
					const float *p = kind ? kv_cache_v(kv, l, b, s) : kv_cache_k(kv, l, b, s);
					const float *base = kind ? (const float *) kv->v : (const float *) kv->k;

					if (p < base || p + row > base + per)
						inside = false;
					sp[n].p = p;
					sp[n].n = row;
					sp[n].kind = kind;
					n++;
				}
	TAP_OK(inside, "every K and V row of (layer, block, slot) lies inside its %lld-float array",
		   (long long) per);
	qsort(sp, n, sizeof(span), SpanCmp);
	for (int i = 0; i + 1 < n; i++)
		if (sp[i].p + sp[i].n > sp[i + 1].p)
			disjoint = false;
	TAP_OK(disjoint, "the %d K and V rows (2 x 2 layers x 3 blocks x 4 slots) never overlap", n);

	/* write every element of every row, then read all of them back */
	for (int kind = 0; kind < 2; kind++)
		for (int l = 0; l < nl; l++)
			for (int b = 0; b < nb; b++)
				for (int s = 0; s < bs; s++)
				{
					float	   *p = kind ? kv_cache_v(kv, l, b, s) : kv_cache_k(kv, l, b, s);

					for (int e = 0; e < row; e++)
						p[e] = CellValue(kind, l, b, s, e);
				}
	for (int kind = 0; kind < 2; kind++)
		for (int l = 0; l < nl; l++)
			for (int b = 0; b < nb; b++)
				for (int s = 0; s < bs; s++)
				{
					const float *p = kind ? kv_cache_v(kv, l, b, s) : kv_cache_k(kv, l, b, s);

					for (int e = 0; e < row; e++)
						if (p[e] != CellValue(kind, l, b, s, e))
							intact = false;
				}
	TAP_OK(intact, "distinct values written to every element of K and V read back intact");

	/* allocation and release never touch the stored keys and values */
	{
		bm_params	bp = {nb, bs, 0, 0, false};
		block_manager *bm = NULL;
		int32_t		a,
					b;

		bm_create(&bp, &bm, NULL);
		a = bm_alloc(bm);
		b = bm_alloc(bm);
		bm_release(bm, a);
		bm_release(bm, b);
		bm_release(bm, a);
		bm_free(bm);
		TAP_OK(((float *) kv_cache_k(kv, 1, 2, 3))[5] == CellValue(0, 1, 2, 3, 5) &&
			   ((float *) kv_cache_v(kv, 0, 0, 0))[0] == CellValue(1, 0, 0, 0, 0),
			   "alloc and release leave the stored K and V alone");
	}
	free(sp);
	kv_cache_free(kv);
}

/*
 * Half-precision pools: f16 and bf16 elements take 2 bytes, rows step by
 * that, K and V stay disjoint and read back what was written; other types
 * are refused; names parse in any case, auto to the caller's default.
 */
static void
TestHalf(void)
{
	const cbllm_dtype types[2] = {CBLLM_F16, CBLLM_BF16};
	cbllm_dtype dt = CBLLM_Q8_0;

	for (int t = 0; t < 2; t++)
	{
		kv_cache_params p = {3, 4, 2, 2, 3, false, types[t], NULL, NULL};
		kv_cache   *kv = NULL;
		bool		ok = true;

		if (kv_cache_create(&p, &kv, NULL) != CBLLM_OK)
		{
			TAP_OK(false, "kv_cache_create in %s", cbllm_dtype_name(types[t]));
			continue;
		}
		TAP_OK(kv->elem_bytes == 2 && kv->dtype == types[t] &&
			   (char *) kv_cache_k(kv, 0, 0, 1) - (char *) kv_cache_k(kv, 0, 0, 0) == 2 * 2 * 3 &&
			   (char *) kv_cache_k(kv, 1, 0, 0) - (char *) kv->k == 2 * 3 * 4 * 2 * 3,
			   "%s pool: 2-byte elements; a slot steps 12 bytes, a layer 144", cbllm_dtype_name(types[t]));
		for (int l = 0; l < 2; l++)
			for (int b = 0; b < 3; b++)
				for (int s = 0; s < 4; s++)
					for (int e = 0; e < 6; e++)
					{
						((uint16_t *) kv_cache_k(kv, l, b, s))[e] = (uint16_t) (((l * 3 + b) * 4 + s) * 6 + e);
						((uint16_t *) kv_cache_v(kv, l, b, s))[e] = (uint16_t) (50000 - (((l * 3 + b) * 4 + s) * 6 + e));
					}
		for (int l = 0; l < 2; l++)
			for (int b = 0; b < 3; b++)
				for (int s = 0; s < 4; s++)
					for (int e = 0; e < 6; e++)
						ok = ok && ((uint16_t *) kv_cache_k(kv, l, b, s))[e] == ((l * 3 + b) * 4 + s) * 6 + e &&
							((uint16_t *) kv_cache_v(kv, l, b, s))[e] == 50000 - (((l * 3 + b) * 4 + s) * 6 + e);
		TAP_OK(ok, "%s pool: every K and V element of every (layer, block, slot) reads back what was"
			   " written", cbllm_dtype_name(types[t]));
		kv_cache_free(kv);
	}
	{
		kv_cache_params p = {3, 4, 2, 2, 3, false, CBLLM_Q8_0, NULL, NULL};
		kv_cache   *kv = NULL;
		cbllm_err	err = {{0}};

		TAP_OK(kv_cache_create(&p, &kv, &err) == CBLLM_ERR_INVALID && kv == NULL &&
			   strstr(err.msg, "Q8_0") != NULL, "a Q8_0 pool is refused: %s", err.msg);
	}
	TAP_OK(kv_cache_dtype_parse("F16", CBLLM_F32, &dt) && dt == CBLLM_F16 &&
		   kv_cache_dtype_parse("bf16", CBLLM_F32, &dt) && dt == CBLLM_BF16 &&
		   kv_cache_dtype_parse("auto", CBLLM_BF16, &dt) && dt == CBLLM_BF16 &&
		   kv_cache_dtype_parse(NULL, CBLLM_F32, &dt) && dt == CBLLM_F32 &&
		   !kv_cache_dtype_parse("f8", CBLLM_F32, &dt),
		   "names: F16 and bf16 in any case, auto and NULL the default, f8 refused");
}

/*
 * Layers of their own widths (Gemma 4: 2 heads of 4 in one layer, 1 of 16 in
 * the next): each (layer, block, slot) row lies inside the arrays, none
 * overlaps another, and a row of 0 elements is refused.
 */
static void
TestLayerRows(void)
{
	const int32_t rows[3] = {8, 16, 8};
	kv_cache_params p = {3, 4, 3, 2, 4, false, CBLLM_F32, NULL, rows};
	kv_cache_params bad = p;
	const int32_t bad_rows[3] = {8, 0, 8};
	kv_cache   *kv = NULL;
	bool		inside = true,
				disjoint = true;
	int64_t		total = (int64_t) 3 * 4 * (8 + 16 + 8);
	int			n = 0;
	span		sp[3 * 3 * 4];

	TAP_OK(kv_cache_rows_block_bytes(4, 8 + 16 + 8, CBLLM_F16) == (size_t) 2 * 4 * 32 * 2,
		   "a block of layers of 8, 16 and 8 elements per position takes 2 * 4 * 32 * 2 bytes in f16");
	if (kv_cache_create(&p, &kv, NULL) != CBLLM_OK)
	{
		TAP_OK(false, "kv_cache_create with rows 8, 16, 8");
		return;
	}
	TAP_OK(kv->base[3] == total && kv->row[1] == 16,
		   "the pool of rows 8, 16 and 8 holds %lld elements of K", (long long) total);
	for (int l = 0; l < 3; l++)
		for (int b = 0; b < 3; b++)
			for (int s = 0; s < 4; s++)
			{
				const float *q = kv_cache_k(kv, l, b, s);

				if (q < (const float *) kv->k || q + rows[l] > (const float *) kv->k + total)
					inside = false;
				sp[n].p = q;
				sp[n].n = rows[l];
				sp[n].kind = 0;
				n++;
			}
	qsort(sp, n, sizeof(span), SpanCmp);
	for (int i = 0; i + 1 < n; i++)
		if (sp[i].p + sp[i].n > sp[i + 1].p)
			disjoint = false;
	TAP_OK(inside && disjoint,
		   "every row of its own layer's width lies inside K and no two overlap");
	kv_cache_free(kv);
	kv = NULL;
	bad.layer_row = bad_rows;
	TAP_OK(kv_cache_create(&bad, &kv, NULL) == CBLLM_ERR_INVALID && kv == NULL,
		   "a layer of 0 elements per position is refused");
}

int
main(void)
{
	TestInvalidParams();
	TestCreate();
	TestLayout();
	TestHalf();
	TestLayerRows();
	return tap_done();
}
