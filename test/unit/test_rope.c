/*
 * test_rope.c: the RoPE variants and per-layer positions of config.json
 * against the independent float64 module test/tools/rope_ref.py.
 *
 * usage: test_rope CASES_DIR
 *   CASES_DIR   written by rope_ref.py --cases-dir CASES_DIR at test time:
 *               NAME.json (a config.json) and NAME.expect (rope_ref.py's
 *               numbers for it: each layer's RoPE and window, each RoPE's
 *               attention factor, the sequence length past which its long
 *               set applies, and both sets' inverse frequencies)
 *
 * Each case is parsed by model_config_parse, its RoPE configurations go
 * through rope_freqs_build, and everything is compared with the expectation
 * (frequencies to 1e-12 relative); rope_fill is checked to use the set it
 * is given, with the expected factor, at the same position.
 */
#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "model/rope.h"
#include "tap.h"

#define MAX_LINE (1 << 16)

/* The text of a file, or NULL. */
static char *
ReadText(const char *path)
{
	char	   *text = NULL;
	cbllm_err	err;

	if (cbllm_read_file(path, &text, NULL, &err) != CBLLM_OK)
	{
		TAP_DIAG("%s", err.msg);
		return NULL;
	}
	return text;
}

/* Compare each layer's RoPE index and window with the "layers" line. */
static bool
CheckLayers(const cbllm_model_config *cfg, char *line, const char *name)
{
	char	   *save = NULL,
			   *tok = strtok_r(line + strlen("layers"), " \n", &save);
	int			l = 0,
				common = -1;	/* the window every layer has; 0 when they differ or none */
	bool		ok = true;

	for (; tok != NULL; tok = strtok_r(NULL, " \n", &save), l++)
	{
		int			r,
					w;

		if (sscanf(tok, "%d:%d", &r, &w) != 2 || l >= cfg->n_layers ||
			cfg->layer_rope[l] != r || cfg->layer_window[l] != w)
		{
			TAP_DIAG("%s: layer %d is rope %d window %d, expected %s", name, l,
					 l < cfg->n_layers ? cfg->layer_rope[l] : -1,
					 l < cfg->n_layers ? cfg->layer_window[l] : -1, tok);
			ok = false;
		}
		common = common < 0 || common == w ? w : 0;
	}
	if (ok && model_kv_drop_window(cfg) != (common > 0 ? common : 0))
	{
		TAP_DIAG("%s: KV blocks dropped behind %d, expected %d", name, model_kv_drop_window(cfg),
				 common > 0 ? common : 0);
		ok = false;
	}
	return ok && l == cfg->n_layers;
}

/* Largest relative difference of the "invN" line's numbers from inv (half). */
static double
InvError(char *line, const double *inv, int half)
{
	char	   *p = strchr(line, ' ');
	double		worst = 0;
	int			i = 0;

	for (; p != NULL && i < half; i++)
	{
		char	   *end;
		double		want = strtod(p, &end);

		if (end == p)
			break;
		p = end;
		worst = fmax(worst, fabs(inv[i] - want) / fabs(want));
	}
	return i == half ? worst : INFINITY;
}

/* One RoPE: its "rope K ATTN LONG_FROM" line and the two frequency lines. */
static void
CheckRope(const cbllm_model_config *cfg, int k, char *lines[3], const char *name)
{
	rope_freqs *f = malloc(sizeof(*f));
	cbllm_err	err = {{0}};
	int			kk,
				from;
	double		attn,
				e0,
				e1;
	float		cs[ROPE_MAX_HALF],
				sn[ROPE_MAX_HALF];

	if (f == NULL || sscanf(lines[0], "rope %d %lf %d", &kk, &attn, &from) != 3 || kk != k ||
		rope_freqs_build(&cfg->rope[k], cfg->head_dim, f, &err) != CBLLM_OK)
	{
		TAP_OK(false, "%s: RoPE %d builds (%s)", name, k, err.msg);
		free(f);
		return;
	}
	e0 = InvError(lines[1], f->inv_freq[0], f->half);
	e1 = InvError(lines[2], f->inv_freq[1], f->half);
	TAP_OK(e0 < 1e-12 && e1 < 1e-12,
		   "%s: RoPE %d (%s) inverse frequencies match rope_ref.py (rel err %.2g, %.2g)", name, k,
		   rope_type_name(cfg->rope[k].type), e0, e1);
	TAP_OK(fabs(f->attn - attn) < 1e-12 * attn &&
		   (from < 0 ? f->long_from == INT_MAX && rope_long_from(&cfg->rope[k]) == 0 :
			f->long_from == from && rope_long_from(&cfg->rope[k]) == from),
		   "%s: RoPE %d attention factor %.6g (want %.6g), long set past length %d (want %d)", name,
		   k, f->attn, attn, f->long_from == INT_MAX ? -1 : f->long_from, from);
	if (from > 0)
	{
		/* one position, rotated by each set as asked, whichever side of long_from it is */
		int			i = f->half - 1;
		bool		ok = true;

		for (int set = 0; set < 2; set++)
			for (int p = from - 1; p <= from; p++)
			{
				double		a = p * f->inv_freq[set][i];

				rope_fill(f, p, set, cs, sn);
				ok &= fabs(cs[i] - attn * cos(a)) < 1e-6 && fabs(sn[i] - attn * sin(a)) < 1e-6;
			}
		TAP_OK(ok && f->inv_freq[0][i] != f->inv_freq[1][i],
			   "%s: rope_fill rotates positions %d and %d by the set it is given, short or long",
			   name, from - 1, from);
	}
	free(f);
}

/* Parse case name of dir and compare it with its expectation. */
static void
RunCase(const char *dir, const char *name)
{
	char		path[PATH_MAX];
	char	   *json,
			   *expect,
			   *lines[16],
			   *save = NULL;
	int			n = 0;
	cbllm_model_config *cfg = calloc(1, sizeof(*cfg));
	cbllm_err	err = {{0}};
	int			rc;

	snprintf(path, sizeof(path), "%s/%s.json", dir, name);
	json = ReadText(path);
	snprintf(path, sizeof(path), "%s/%s.expect", dir, name);
	expect = ReadText(path);
	if (json == NULL || expect == NULL || cfg == NULL)
	{
		TAP_OK(false, "%s: case files readable", name);
		free(json), free(expect), free(cfg);
		return;
	}
	for (char *l = strtok_r(expect, "\n", &save); l != NULL && n < 16;
		 l = strtok_r(NULL, "\n", &save))
		lines[n++] = l;
	rc = model_config_parse(json, name, cfg, &err);
	TAP_OK(rc == CBLLM_OK, "%s: config.json parses %s", name, err.msg);
	if (rc == CBLLM_OK && n >= 1)
	{
		TAP_OK(CheckLayers(cfg, lines[0], name) && cfg->n_rope == (n - 1) / 3,
			   "%s: each layer's RoPE and window as rope_ref.py gives them (%d RoPE configurations), blocks dropped only when every layer has the window",
			   name, cfg->n_rope);
		for (int k = 0; k < cfg->n_rope && 1 + 3 * k + 2 < n; k++)
			CheckRope(cfg, k, &lines[1 + 3 * k], name);
	}
	free(json);
	free(expect);
	free(cfg);
}

/* Every NAME.json of the cases directory. */
int
main(int argc, char **argv)
{
	DIR		   *d;
	struct dirent *e;
	char	   *names[64];
	int			n = 0;

	if (argc != 2)
	{
		fprintf(stderr, "usage: test_rope CASES_DIR\n");
		return 2;
	}
	d = opendir(argv[1]);
	if (d == NULL)
	{
		TAP_OK(false, "cases directory %s opens", argv[1]);
		return tap_done();
	}
	while ((e = readdir(d)) != NULL && n < 64)
	{
		size_t		len = strlen(e->d_name);

		if (len > 5 && strcmp(e->d_name + len - 5, ".json") == 0)
			names[n++] = strndup(e->d_name, len - 5);
	}
	closedir(d);
	TAP_OK(n >= 10, "rope_ref.py wrote %d cases", n);
	for (int i = 0; i < n; i++)
	{
		RunCase(argv[1], names[i]);
		free(names[i]);
	}
	return tap_done();
}
