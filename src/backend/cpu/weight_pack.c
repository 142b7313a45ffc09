/*
 * weight_pack.c: K-quant, MXFP4 and float rows into and out of the CPU's packed
 * layouts (weight_pack.h says where each part goes).  Plain C over the
 * format's own description (kquant_layout.h), so each layout is defined once
 * for every kernel set; the AVX-512 products that read them are
 * kernels_quant_packed.inc and kernels_float_packed.inc.
 */
#include <string.h>

#include "backend/cpu/weight_pack.h"
#include "dtype/dtype_quant.h"
#include "dtype/kquant_layout.h"

#define VEC 64					/* bytes of a vector */

/* What packing needs to know of a type beyond its kquant_layout. */
typedef struct pack_shape
{
	const kquant_layout *l;
	int			scale_bytes;	/* the packed sub-block scales (and mins) of a block */
	int			hbits;			/* code bits past the low four */
	int			header;			/* bytes of a record's header */
} pack_shape;

/* The shape of dt's packed records; false when dt has none. */
static bool
Shape(cbllm_dtype dt, pack_shape *s)
{
	const kquant_layout *l = cbllm_kquant_layout(dt);
	int			bits = 0;

	if (l == NULL || (dt != CBLLM_Q4_K && dt != CBLLM_Q5_K && dt != CBLLM_Q6_K))
		return false;
	for (int p = 0; p < 2; p++)
		bits += l->parts[p].plane != KQ_PLANE_NONE ? l->parts[p].bits : 0;
	s->l = l;
	s->scale_bytes = l->scales == KQ_SCALES_INT8 ? 16 : 12;
	s->hbits = bits - 4;
	s->header = VEC * (s->scale_bytes / 4) + 32 * (l->dmin_off >= 0 ? 2 : 1);
	return true;
}

/* Bytes of an element of dt when its matrices pack as panels (the float types); 0 otherwise. */
static int
PanelElem(cbllm_dtype dt)
{
	return dt == CBLLM_F32 ? 4 : dt == CBLLM_F16 || dt == CBLLM_BF16 ? 2 : 0;
}

bool
weight_pack_supported(cbllm_dtype dt)
{
	pack_shape	s;

	return PanelElem(dt) > 0 || Shape(dt, &s) || dt == CBLLM_MXFP4;
}

bool
weight_pack_fits(const cbllm_weight *w)
{
	int64_t		span = PanelElem(w->dtype) > 0 ? 1 : w->dtype == CBLLM_MXFP4 ? 32 : 256;

	return weight_pack_supported(w->dtype) && w->data != NULL && w->cols > 0 &&
		w->cols % span == 0 && w->rows >= WEIGHT_PACK_ROWS;
}

/*
 * MXFP4 (weight_pack.h): the record of blocks [b, b + m) of the 16 rows at
 * src into rec, or back (to_rec false; rows then receives them).
 */
static void
MoveMxRecord(uint8_t *rec, uint8_t *rows, int64_t row_bytes, int64_t b, int m, int lane0, int lanes,
			 bool to_rec)
{
	uint8_t    *exps = rec,
			   *nib = rec + WEIGHT_PACK_ROWS * m;

	for (int j = 0; j < m; j++)
		for (int r = lane0; r < lane0 + lanes; r++)
		{
			uint8_t    *blk = rows + (r - lane0) * row_bytes + (b + j) * CBLLM_MXFP4_BYTES;

			if (to_rec)
				exps[WEIGHT_PACK_ROWS * j + r] = blk[0];
			else
				blk[0] = exps[WEIGHT_PACK_ROWS * j + r];
			for (int v = 0; v < 4; v++)
				for (int i = 0; i < 4; i++)
				{
					uint8_t    *at = nib + VEC * (4 * j + v) + 4 * r + i;

					if (to_rec)
						*at = blk[1 + 4 * v + i];
					else
						blk[1 + 4 * v + i] = *at;
				}
		}
}

/* The 16 MXFP4 rows at src (or lane lane's alone, back into row: to_rec false), a record per 8 blocks. */
static void
MoveMx(uint8_t *grp, uint8_t *rows, int64_t row_bytes, int64_t cols, int lane0, int lanes, bool to_rec)
{
	int64_t		nb = cols / 32;

	for (int64_t b = 0; b < nb; b += 8)
	{
		int			m = nb - b < 8 ? (int) (nb - b) : 8;

		MoveMxRecord(grp + WEIGHT_PACK_ROWS * b * CBLLM_MXFP4_BYTES, rows, row_bytes, b, m, lane0, lanes,
					 to_rec);
	}
}

/* The 16 rows at src (row_bytes apart, cols elements of e bytes) as a panel at dst. */
static void
PackPanel(int e, const uint8_t *src, int64_t row_bytes, int64_t cols, uint8_t *dst)
{
	for (int r = 0; r < WEIGHT_PACK_ROWS; r++)
	{
		const uint8_t *row = src + r * row_bytes;

		if (e == 4)
			for (int64_t k = 0; k < cols; k++)
				memcpy(dst + (k * WEIGHT_PACK_ROWS + r) * 4, row + k * 4, 4);
		else
			for (int64_t k = 0; k < cols; k++)
				memcpy(dst + (k * WEIGHT_PACK_ROWS + r) * 2, row + k * 2, 2);
	}
}

/* Row lane of the panel at grp (cols elements of e bytes) into row. */
static void
UnpackPanel(int e, const uint8_t *grp, int lane, int64_t cols, uint8_t *row)
{
	for (int64_t k = 0; k < cols; k++)
		memcpy(row + k * e, grp + (k * WEIGHT_PACK_ROWS + lane) * e, (size_t) e);
}

int
weight_pack_header_bytes(cbllm_dtype dt)
{
	pack_shape	s;

	return Shape(dt, &s) ? s.header : 0;
}

/* One field of a lane's header: where it is in the record and in the stored block. */
typedef struct header_part
{
	uint8_t    *rec;
	uint8_t    *blk;
	int			bytes;
} header_part;

/*
 * Lane r's scales, d and dmin between a record's header and the stored
 * block b: into the record when to_rec, else back into b.
 */
static void
MoveHeader(const pack_shape *s, uint8_t *rec, int r, uint8_t *b, bool to_rec)
{
	uint8_t    *dh = rec + VEC * (s->scale_bytes / 4);
	header_part part[6];
	int			n = 0;

	for (int j = 0; j < s->scale_bytes / 4; j++)
		part[n++] = (header_part) {rec + VEC * j + 4 * r, b + s->l->scales_off + 4 * j, 4};
	part[n++] = (header_part) {dh + 2 * r, b + s->l->d_off, 2};
	if (s->l->dmin_off >= 0)
		part[n++] = (header_part) {dh + 32 + 2 * r, b + s->l->dmin_off, 2};
	for (int i = 0; i < n; i++)
		memcpy(to_rec ? part[i].rec : part[i].blk, to_rec ? part[i].blk : part[i].rec, part[i].bytes);
}

/* The codes of the block at b (before the bias) into q, plane by plane (kquant_loc's places). */
static void
BlockCodes(const kquant_layout *l, const uint8_t *b, uint8_t q[256])
{
	memset(q, 0, 256);
	for (int p = 0, low = 0; p < 2 && l->parts[p].plane != KQ_PLANE_NONE; low += l->parts[p].bits, p++)
	{
		const kquant_part *part = &l->parts[p];
		const uint8_t *pl = b + part->offset;

		switch (part->plane)
		{
			case KQ_PLANE_NIBBLES:
			case KQ_PLANE_NIBBLES_6:
				{
					/* runs of w bytes: low nibbles the run's elements, high nibbles the next w */
					int			w = part->plane == KQ_PLANE_NIBBLES ? 32 : 64;

					for (int j = 0; j < 128 / w; j++)
						for (int i = 0; i < w; i++)
						{
							q[2 * w * j + i] |= (uint8_t) ((pl[w * j + i] & 15) << low);
							q[2 * w * j + w + i] |= (uint8_t) ((pl[w * j + i] >> 4) << low);
						}
				}
				break;
			case KQ_PLANE_CRUMBS:
				for (int h = 0; h < 2; h++)
					for (int sh = 0; sh < 4; sh++)
						for (int i = 0; i < 32; i++)
							q[128 * h + 32 * sh + i] |= (uint8_t) (((pl[32 * h + i] >> (2 * sh)) & 3) << low);
				break;
			case KQ_PLANE_BITS:
				for (int sh = 0; sh < 8; sh++)
					for (int i = 0; i < 32; i++)
						q[32 * sh + i] |= (uint8_t) (((pl[i] >> sh) & 1) << low);
				break;
			case KQ_PLANE_NONE:
				break;
		}
	}
}

/*
 * Lane r of a record's nibbles and high bits from its 256 codes q: the
 * element pairs (32m + 4k + i, 32m + 16 + 4k + i) share nibble vector
 * 4m + k, their chunk slots are 8m + 2k and 8m + 2k + 1.
 */
static void
PutLane(const pack_shape *s, const uint8_t q[256], int r, uint8_t *nib, uint8_t *high)
{
	for (int m = 0; m < 8; m++)
		for (int k = 0; k < 4; k++)
			for (int i = 0; i < 4; i++)
			{
				int			lo = q[32 * m + 4 * k + i],
							hi = q[32 * m + 16 + 4 * k + i],
							at = 4 * r + i;

				nib[VEC * (4 * m + k) + at] = (uint8_t) ((lo & 15) | (hi & 15) << 4);
				for (int h = 0; h < 2 && s->hbits > 0; h++)
				{
					int			bit = (8 * m + 2 * k + h) * s->hbits;

					high[VEC * (bit / 8) + at] |= (uint8_t) (((h ? hi : lo) >> 4) << (bit % 8));
				}
			}
}

/* The 256 codes of lane r of a record, inverse of PutLane. */
static void
GetLane(const pack_shape *s, const uint8_t *nib, const uint8_t *high, int r, uint8_t q[256])
{
	for (int m = 0; m < 8; m++)
		for (int k = 0; k < 4; k++)
			for (int i = 0; i < 4; i++)
			{
				int			at = 4 * r + i,
							n = nib[VEC * (4 * m + k) + at];

				for (int h = 0; h < 2; h++)
				{
					int			code = (n >> (4 * h)) & 15;

					if (s->hbits > 0)
					{
						int			bit = (8 * m + 2 * k + h) * s->hbits;

						code |= ((high[VEC * (bit / 8) + at] >> (bit % 8)) & ((1 << s->hbits) - 1)) << 4;
					}
					q[32 * m + 16 * h + 4 * k + i] = (uint8_t) code;
				}
			}
}

void
weight_pack_group(cbllm_dtype dt, const uint8_t *src, int64_t row_bytes, int64_t cols, uint8_t *dst)
{
	pack_shape	s;
	int64_t		nsb = cols / 256;

	if (PanelElem(dt) > 0)
	{
		PackPanel(PanelElem(dt), src, row_bytes, cols, dst);
		return;
	}
	if (dt == CBLLM_MXFP4)
	{
		MoveMx(dst, (uint8_t *) src, row_bytes, cols, 0, WEIGHT_PACK_ROWS, true);
		return;
	}
	if (!Shape(dt, &s))
		return;
	for (int64_t sb = 0; sb < nsb; sb++)
	{
		uint8_t    *rec = dst + sb * WEIGHT_PACK_ROWS * s.l->bytes,
				   *nib = rec + s.header;

		memset(rec, 0, (size_t) WEIGHT_PACK_ROWS * s.l->bytes);
		for (int r = 0; r < WEIGHT_PACK_ROWS; r++)
		{
			const uint8_t *b = src + r * row_bytes + sb * s.l->bytes;
			uint8_t		q[256];

			MoveHeader(&s, rec, r, (uint8_t *) b, true);
			BlockCodes(s.l, b, q);
			PutLane(&s, q, r, nib, nib + 32 * VEC);
		}
	}
}

void
weight_unpack_row(cbllm_dtype dt, const uint8_t *grp, int lane, int64_t cols, uint8_t *row)
{
	pack_shape	s;
	int64_t		nsb = cols / 256;

	if (PanelElem(dt) > 0)
	{
		UnpackPanel(PanelElem(dt), grp, lane, cols, row);
		return;
	}
	if (dt == CBLLM_MXFP4)
	{
		MoveMx((uint8_t *) grp, row, 0, cols, lane, 1, false);
		return;
	}
	if (!Shape(dt, &s))
		return;
	for (int64_t sb = 0; sb < nsb; sb++)
	{
		const uint8_t *rec = grp + sb * WEIGHT_PACK_ROWS * s.l->bytes,
				   *nib = rec + s.header;
		uint8_t    *b = row + sb * s.l->bytes,
					q[256];

		memset(b, 0, (size_t) s.l->bytes);
		MoveHeader(&s, (uint8_t *) rec, lane, b, false);
		GetLane(&s, nib, nib + 32 * VEC, lane, q);
		for (int e = 0; e < 256; e++)
			cbllm_kquant_put_code(s.l, b, e, q[e]);
	}
}

void
weight_pack_groups(const cbllm_weight *w, int64_t g0, int64_t g1, uint8_t *dst, uint8_t *tmp)
{
	int64_t		gb = WEIGHT_PACK_ROWS * (int64_t) cbllm_dtype_row_bytes(w->dtype, w->cols);
	const uint8_t *data = w->data;

	for (int64_t g = g0; g < g1; g++)
	{
		const uint8_t *src = data + g * gb;

		if (dst == data)
		{
			memcpy(tmp, src, (size_t) gb);
			src = tmp;
		}
		weight_pack_group(w->dtype, src, gb / WEIGHT_PACK_ROWS, w->cols, dst + g * gb);
	}
}

const uint8_t *
weight_row(const cbllm_weight *w, int64_t r, uint8_t *row)
{
	int64_t		rb = (int64_t) cbllm_dtype_row_bytes(w->dtype, w->cols);
	const uint8_t *data = w->data;

	if (r >= w->packed_rows)
		return data + r * rb;
	weight_unpack_row(w->dtype, data + r / WEIGHT_PACK_ROWS * WEIGHT_PACK_ROWS * rb,
					  (int) (r % WEIGHT_PACK_ROWS), w->cols, row);
	return row;
}
