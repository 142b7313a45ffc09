/*
 * generation_config.c: a model directory's end-of-turn ids and sampling
 * defaults (generation_config.h), read from config.json and
 * generation_config.json with cJSON.
 */
#include "model/generation_config.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOKEN_ID (1 << 24)	/* as config.json's own ids are checked */

/* Add an end-of-turn id (ignoring a repeat). */
int
generation_config_add_eos(cbllm_generation_config *g, int32_t id, cbllm_err *err)
{
	if (generation_config_is_eos(g, id))
		return CBLLM_OK;
	if (g->n_eos == CBLLM_MAX_EOS_IDS)
		return cbllm_fail(err, CBLLM_ERR_INVALID, "more than %d end-of-turn token ids",
						  CBLLM_MAX_EOS_IDS);
	g->eos_ids[g->n_eos++] = id;
	return CBLLM_OK;
}

/* Remove an end-of-turn id (none: nothing to do), keeping the others' order. */
void
generation_config_remove_eos(cbllm_generation_config *g, int32_t id)
{
	int			k = 0;

	for (int i = 0; i < g->n_eos; i++)
		if (g->eos_ids[i] != id)
			g->eos_ids[k++] = g->eos_ids[i];
	g->n_eos = k;
}

/* Whether id ends a turn. */
bool
generation_config_is_eos(const cbllm_generation_config *g, int32_t id)
{
	for (int i = 0; i < g->n_eos; i++)
		if (g->eos_ids[i] == id)
			return true;
	return false;
}

/* Whether v is a token id. */
static bool
IsTokenId(const cJSON *v)
{
	return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < MAX_TOKEN_ID &&
		v->valuedouble == (int32_t) v->valuedouble;
}

/* Add the ids of "eos_token_id" of root (an id, a list of ids, null or absent). */
static int
AddEosIds(cbllm_generation_config *g, const cJSON *root, const char *name, cbllm_err *err)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "eos_token_id");
	const cJSON *item;

	if (v == NULL || cJSON_IsNull(v))
		return CBLLM_OK;
	if (IsTokenId(v))
		return generation_config_add_eos(g, (int32_t) v->valuedouble, err);
	if (!cJSON_IsArray(v))
		return cbllm_fail(err, CBLLM_ERR_FORMAT,
						  "%s: \"eos_token_id\" must be a token id or a list of them", name);
	cJSON_ArrayForEach(item, v)
	{
		if (!IsTokenId(item))
			return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: \"eos_token_id\" must list token ids", name);
		if (generation_config_add_eos(g, (int32_t) item->valuedouble, err) != CBLLM_OK)
			return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: \"eos_token_id\" lists more than %d ids",
							  name, CBLLM_MAX_EOS_IDS);
	}
	return CBLLM_OK;
}

/* Read a number field in [lo, hi] ((lo, hi] with lo_open) if present; *has says whether it was. */
static int
GetNumber(const cJSON *root, const char *key, double lo, double hi, bool lo_open,
		  bool *has, double *out, const char *name, cbllm_err *err)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);

	*has = false;
	if (v == NULL || cJSON_IsNull(v))
		return CBLLM_OK;
	if (!cJSON_IsNumber(v) || !(lo_open ? v->valuedouble > lo : v->valuedouble >= lo) ||
		!(v->valuedouble <= hi))
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: \"%s\" must be a number in %s%g, %g]", name, key,
						  lo_open ? "(" : "[", lo, hi);
	*has = true;
	*out = v->valuedouble;
	return CBLLM_OK;
}

/* Parse one JSON text into an object; messages name the file. */
static int
ParseObject(const char *text, const char *name, cJSON **out, cbllm_err *err)
{
	*out = cJSON_Parse(text);
	if (*out == NULL || !cJSON_IsObject(*out))
	{
		cJSON_Delete(*out);
		*out = NULL;
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: not a JSON object", name);
	}
	return CBLLM_OK;
}

/* Read generation_config.json's fields. */
static int
ReadGeneration(cbllm_generation_config *g, const cJSON *root, const char *name, cbllm_err *err)
{
	const cJSON *ds = cJSON_GetObjectItemCaseSensitive(root, "do_sample");
	double		top_k = 0;
	int			rc;

	if (ds != NULL && !cJSON_IsNull(ds) && !cJSON_IsBool(ds))
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: \"do_sample\" must be true or false", name);
	g->do_sample = cJSON_IsTrue(ds);
	if ((rc = AddEosIds(g, root, name, err)) ||
		(rc = GetNumber(root, "temperature", 0, 100, false, &g->has_temperature, &g->temperature,
						name, err)) ||
		(rc = GetNumber(root, "top_p", 0, 1, true, &g->has_top_p, &g->top_p, name, err)) ||
		(rc = GetNumber(root, "top_k", 0, 1 << 24, false, &g->has_top_k, &top_k, name, err)))
		return rc;
	if (g->has_top_k && top_k != (int) top_k)
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: \"top_k\" must be an integer", name);
	g->top_k = (int) top_k;
	return CBLLM_OK;
}

/* The same as generation_config_load, from texts in memory. */
int
generation_config_parse(const char *config_json, const char *config_name,
						const char *generation_json, const char *generation_name,
						cbllm_generation_config *g, cbllm_err *err)
{
	cJSON	   *root;
	int			rc = CBLLM_OK;

	memset(g, 0, sizeof(*g));
	if (config_json != NULL)
	{
		if ((rc = ParseObject(config_json, config_name, &root, err)) != CBLLM_OK)
			return rc;
		rc = AddEosIds(g, root, config_name, err);
		cJSON_Delete(root);
		if (rc != CBLLM_OK)
			return rc;
	}
	if (generation_json != NULL)
	{
		if ((rc = ParseObject(generation_json, generation_name, &root, err)) != CBLLM_OK)
			return rc;
		rc = ReadGeneration(g, root, generation_name, err);
		cJSON_Delete(root);
	}
	return rc;
}

/* Read a file of dir into *text, or leave it NULL when the file does not exist. */
static int
ReadOptional(const char *dir, const char *file, char *path, size_t size, char **text, cbllm_err *err)
{
	snprintf(path, size, "%s/%s", dir, file);
	return cbllm_read_file_if_exists(path, text, NULL, err);
}

/* Read dir's config.json and generation_config.json. */
int
generation_config_load(const char *dir, cbllm_generation_config *g, cbllm_err *err)
{
	char		cpath[4096],
				gpath[4096];
	char	   *config = NULL,
			   *generation = NULL;
	int			rc;

	memset(g, 0, sizeof(*g));
	if ((rc = ReadOptional(dir, "config.json", cpath, sizeof(cpath), &config, err)) == CBLLM_OK &&
		(rc = ReadOptional(dir, "generation_config.json", gpath, sizeof(gpath), &generation, err)) ==
		CBLLM_OK)
		rc = generation_config_parse(config, cpath, generation, gpath, g, err);
	free(config);
	free(generation);
	return rc;
}
