/*
 * test_json_schema.c: JSON Schema to regex (json_schema.c) through the regex
 * compiler (regex_parse.c, regex_dfa.c).  Each fixture of test/data/json_schemas (README.md
 * there) compiles, its "valid" documents match and its "invalid" and
 * "outside" ones do not; each keyword outside the subset, malformed schema
 * and schema that admits nothing is refused with its exact message; limits
 * hold against hostile schemas.  Run from the repository root.
 *
 * Two more modes serve test/json_schema_test.py, the independent check with
 * Python's jsonschema:
 *   test_json_schema --sample FILE N SEED   N random documents the regex of
 *                                           FILE's schema admits, one a line
 *   test_json_schema --match FILE           "LIST INDEX 0|1" for each
 *                                           document of FILE's lists
 */
#include <dirent.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "constrain/json_schema.h"
#include "constrain/regex.h"
#include "tap.h"

#define FIXTURE_DIR "test/data/json_schemas"
#define SAMPLE_BUDGET 400		/* bytes after which a sample heads for its end */

/* Compile schema text to an automaton; the regex's length in *re_len when asked. */
static int
Compile(const char *schema, size_t len, cbllm_dfa **d, cbllm_err *err, size_t *re_len)
{
	cbllm_buf	re = {0};
	int			rc = json_schema_to_regex(schema, len, &re, err);

	*d = NULL;
	if (re_len != NULL)
		*re_len = re.len;
	if (rc == CBLLM_OK)
		rc = regex_compile(re.data, re.len, d, err);
	cbllm_buf_free(&re);
	return rc;
}

/* A fixture file parsed, or NULL (with a message). */
static cJSON *
LoadFixture(const char *path)
{
	char	   *text;
	size_t		len;
	cbllm_err	err;
	cJSON	   *fx;

	if (cbllm_read_file(path, &text, &len, &err) != CBLLM_OK)
	{
		fprintf(stderr, "%s\n", err.msg);
		return NULL;
	}
	fx = cJSON_ParseWithLength(text, len);
	free(text);
	if (fx == NULL || !cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(fx, "schema")))
	{
		fprintf(stderr, "%s: not a fixture (an object with \"schema\")\n", path);
		cJSON_Delete(fx);
		return NULL;
	}
	return fx;
}

/*
 * Append v as JSON text, numbers exactly (%.17g reads back as the same
 * double; cJSON's own printer rounds to 15 digits).
 */
static void
PrintExact(const cJSON *v, cbllm_buf *out)
{
	const cJSON *e;
	char		s[40];

	if (cJSON_IsNumber(v))
		cbllm_buf_append(out, s, (size_t) snprintf(s, sizeof(s), "%.17g", v->valuedouble));
	else if (cJSON_IsString(v))
	{
		cbllm_buf_append(out, "\"", 1);
		for (const unsigned char *p = (const unsigned char *) v->valuestring; *p; p++)
		{
			if (*p == '"' || *p == '\\')
				cbllm_buf_append(out, "\\", 1);
			if (*p < 0x20)
				cbllm_buf_append(out, s, (size_t) snprintf(s, sizeof(s), "\\u%04x", *p));
			else
				cbllm_buf_append(out, p, 1);
		}
		cbllm_buf_append(out, "\"", 1);
	}
	else if (cJSON_IsArray(v) || cJSON_IsObject(v))
	{
		cbllm_buf_append(out, cJSON_IsArray(v) ? "[" : "{", 1);
		cJSON_ArrayForEach(e, v)
		{
			cJSON		key = {.type = cJSON_String, .valuestring = e->string};

			if (e != v->child)
				cbllm_buf_append(out, ",", 1);
			if (cJSON_IsObject(v))
			{
				PrintExact(&key, out);
				cbllm_buf_append(out, ":", 1);
			}
			PrintExact(e, out);
		}
		cbllm_buf_append(out, cJSON_IsArray(v) ? "]" : "}", 1);
	}
	else
	{
		const char *w = cJSON_IsNull(v) ? "null" : cJSON_IsTrue(v) ? "true" : "false";

		cbllm_buf_append(out, w, strlen(w));
	}
}

/* Compile a fixture's schema. */
static int
CompileFixture(const cJSON *fx, cbllm_dfa **d, cbllm_err *err, size_t *re_len)
{
	cbllm_buf	schema = {0};
	int			rc;

	PrintExact(cJSON_GetObjectItemCaseSensitive(fx, "schema"), &schema);
	rc = Compile(schema.data, schema.len, d, err, re_len);
	cbllm_buf_free(&schema);
	return rc;
}

/* Check that every document of list name matches d exactly when want. */
static void
CheckList(const char *file, const cJSON *fx, const char *name, const cbllm_dfa *d, bool want)
{
	const cJSON *list = cJSON_GetObjectItemCaseSensitive(fx, name),
			   *e;
	int			n = 0,
				bad = 0;

	if (list == NULL)
		return;
	cJSON_ArrayForEach(e, list)
	{
		n++;
		if (!cJSON_IsString(e) || dfa_match(d, e->valuestring, strlen(e->valuestring)) != want)
		{
			bad++;
			TAP_DIAG("%s: %s document %d %s: %s", file, name, n - 1, want ? "rejected" : "accepted",
					 cJSON_IsString(e) ? e->valuestring : "(not a string)");
		}
	}
	TAP_OK(bad == 0 && n > 0, "%s: %d %s documents %s", file, n, name, want ? "match" : "do not match");
}

/* Order two names (for qsort). */
static int
CmpNames(const void *a, const void *b)
{
	return strcmp(*(char *const *) a, *(char *const *) b);
}

/* The .json files of the fixture directory, sorted; their count in *n. */
static char **
FixtureNames(int *n)
{
	DIR		   *dir = opendir(FIXTURE_DIR);
	struct dirent *de;
	char	  **names = NULL;

	*n = 0;
	if (dir == NULL)
		return NULL;
	while ((de = readdir(dir)) != NULL)
	{
		size_t		len = strlen(de->d_name);

		if (len > 5 && strcmp(de->d_name + len - 5, ".json") == 0)
		{
			names = realloc(names, (size_t) (*n + 1) * sizeof(char *));
			names[(*n)++] = strdup(de->d_name);
		}
	}
	closedir(dir);
	if (names != NULL)
		qsort(names, (size_t) *n, sizeof(char *), CmpNames);
	return names;
}

/* Every fixture: compiles, its lists match as they say. */
static void
TestFixtures(void)
{
	int			n;
	char	  **names = FixtureNames(&n);

	TAP_OK(n >= 10, "%d schema fixtures in %s", n, FIXTURE_DIR);
	for (int i = 0; i < n; i++)
	{
		char	   *path = cbllm_path_join(FIXTURE_DIR, names[i]);
		cJSON	   *fx = LoadFixture(path);
		cbllm_dfa  *d = NULL;
		cbllm_err	err = {{0}};
		size_t		re_len = 0;
		int			rc = fx != NULL ? CompileFixture(fx, &d, &err, &re_len) : CBLLM_ERR_IO;

		TAP_OK(rc == CBLLM_OK, "%s: compiles (regex %zu bytes, %d states)%s%s", names[i], re_len,
			   d != NULL ? d->n_states : 0, rc == CBLLM_OK ? "" : ": ", rc == CBLLM_OK ? "" : err.msg);
		if (d != NULL)
		{
			CheckList(names[i], fx, "valid", d, true);
			CheckList(names[i], fx, "invalid", d, false);
			CheckList(names[i], fx, "outside", d, false);
		}
		dfa_free(d);
		cJSON_Delete(fx);
		free(path);
		free(names[i]);
	}
	free(names);
}

/* Each refusal: its status and exact message, and the output left alone. */
static void
TestErrors(void)
{
	static const struct
	{
		const char *schema;
		int			code;
		const char *msg;
	}			cases[] = {
		{"{\"type\":\"array\",\"uniqueItems\":true}", CBLLM_ERR_UNSUPPORTED,
		"json_schema: unsupported keyword \"uniqueItems\" at /"},
		{"{\"properties\":{\"tags\":{\"type\":\"array\",\"uniqueItems\":true}}}", CBLLM_ERR_UNSUPPORTED,
		"json_schema: unsupported keyword \"uniqueItems\" at /properties/tags"},
		{"{\"type\":\"object\",\"patternProperties\":{\"^a\":{}}}", CBLLM_ERR_UNSUPPORTED,
		"json_schema: unsupported keyword \"patternProperties\" at /"},
		{"{\"properties\":{\"a/b\":{\"propertyNames\":{}}}}", CBLLM_ERR_UNSUPPORTED,
		"json_schema: unsupported keyword \"propertyNames\" at /properties/a~1b"},
		{"{\"items\":{\"not\":{\"type\":\"null\"}}}", CBLLM_ERR_UNSUPPORTED,
		"json_schema: unsupported keyword \"not\" at /items"},
		{"{\"anyOf\":[{\"type\":\"string\"},{\"if\":{}}]}", CBLLM_ERR_UNSUPPORTED,
		"json_schema: unsupported keyword \"if\" at /anyOf/1"},
		{"{\"prefixItems\":[{\"dependentRequired\":{}}]}", CBLLM_ERR_UNSUPPORTED,
		"json_schema: unsupported keyword \"dependentRequired\" at /prefixItems/0"},
		{"{\"$defs\":{\"x~y\":{\"minProperties\":1}},\"$ref\":\"#/$defs/x~0y\"}", CBLLM_ERR_UNSUPPORTED,
		"json_schema: unsupported keyword \"minProperties\" at /$defs/x~0y"},
		{"{\"additionalProperties\":{\"contains\":{}}}", CBLLM_ERR_UNSUPPORTED,
		"json_schema: unsupported keyword \"contains\" at /additionalProperties"},
		{"{\"type\":\"integer\",\"multipleOf\":2}", CBLLM_ERR_UNSUPPORTED,
		"json_schema: unsupported keyword \"multipleOf\" at /"},
		{"{\"oneOf\":[{\"type\":\"string\"}]}", CBLLM_ERR_UNSUPPORTED,
		"json_schema: unsupported keyword \"oneOf\" at /"},
		{"{\"allOf\":[{\"type\":\"string\"},{\"maxLength\":3}]}", CBLLM_ERR_UNSUPPORTED,
		"json_schema: unsupported keyword \"allOf\" (only with a single schema) at /"},
		{"{\"properties\":{\"a\":{\"$id\":\"x\",\"type\":\"string\"}}}", CBLLM_ERR_UNSUPPORTED,
		"json_schema: unsupported keyword \"$id\" at /properties/a"},
		{"{\"type\":\"string\",\"format\":\"hostname\"}", CBLLM_ERR_UNSUPPORTED,
		"json_schema: unsupported format \"hostname\" at /"},
		{"{\"type\":\"number\",\"minimum\":0}", CBLLM_ERR_UNSUPPORTED,
		"json_schema: minimum is supported for integers only at /"},
		{"{\"type\":\"string\",\"pattern\":\"a\",\"minLength\":1}", CBLLM_ERR_UNSUPPORTED,
		"json_schema: unsupported combination of pattern and minLength at /"},
		{"{\"type\":\"string\",\"format\":\"date\",\"maxLength\":10}", CBLLM_ERR_UNSUPPORTED,
		"json_schema: unsupported combination of format and maxLength at /"},
		{"{\"type\":\"string\",\"anyOf\":[{\"maxLength\":1}]}", CBLLM_ERR_UNSUPPORTED,
		"json_schema: unsupported combination of \"anyOf\" and \"type\" at /"},
		{"{\"enum\":[1,2],\"minimum\":2}", CBLLM_ERR_UNSUPPORTED,
		"json_schema: unsupported combination of \"enum\" and \"minimum\" at /"},
		{"{\"$ref\":\"other.json#/a\"}", CBLLM_ERR_UNSUPPORTED,
		"json_schema: unsupported $ref \"other.json#/a\" (only \"#\", \"#/$defs/NAME\" and \"#/definitions/NAME\") at /"},
		{"{\"$ref\":\"#/$defs/a/properties/b\",\"$defs\":{\"a\":{}}}", CBLLM_ERR_UNSUPPORTED,
		"json_schema: unsupported $ref \"#/$defs/a/properties/b\" (only \"#\", \"#/$defs/NAME\" and \"#/definitions/NAME\") at /"},
		{"{\"properties\":{\"p\":{\"$ref\":\"#/$defs/none\"}}}", CBLLM_ERR_INVALID,
		"json_schema: $ref \"#/$defs/none\" names no schema at /properties/p"},
		{"{\"type\":\"string\",\"maxLength\":1001}", CBLLM_ERR_UNSUPPORTED,
		"json_schema: maxLength 1001 exceeds 1000 at /"},
		{"{\"type\":\"array\",\"maxItems\":5000}", CBLLM_ERR_UNSUPPORTED,
		"json_schema: maxItems 5000 exceeds 1000 at /"},
		{"{\"type\":\"integer\",\"minimum\":1e20}", CBLLM_ERR_UNSUPPORTED,
		"json_schema: minimum 1e+20 is beyond +-2^53 at /"},
		{"{\"enum\":[\"a\\u0001\"]}", CBLLM_ERR_UNSUPPORTED,
		"json_schema: the string \"a\\u0001\" holds control character U+0001, which needs a \\u escape at /"},
		{"{\"properties\":{\"a\\nb\":{\"not\":{}}}}", CBLLM_ERR_UNSUPPORTED,
		"json_schema: unsupported keyword \"not\" at /properties/a\\u000ab"},
		{"{\"const\":12345678901234567890}", CBLLM_ERR_UNSUPPORTED,
		"json_schema: the integer 1.2345678901234567e+19 is beyond 2^53 at /"},
		{"{\"type\":\"object\",\"required\":5}", CBLLM_ERR_INVALID,
		"json_schema: \"required\" must be an array of strings at /"},
		{"{\"properties\":{\"a\":{\"minItems\":-1}}}", CBLLM_ERR_INVALID,
		"json_schema: \"minItems\" must be a non-negative integer at /properties/a"},
		{"{\"properties\":{\"a\":5}}", CBLLM_ERR_INVALID,
		"json_schema: a schema must be an object or a boolean at /properties/a"},
		{"{\"type\":\"text\"}", CBLLM_ERR_INVALID, "json_schema: unknown type \"text\" at /"},
		{"{\"items\":[{}]}", CBLLM_ERR_INVALID,
		"json_schema: \"items\" must be a schema (an array of them is \"prefixItems\" in draft 2020-12) at /"},
		{"{\"anyOf\":[]}", CBLLM_ERR_INVALID, "json_schema: \"anyOf\" must be a non-empty array of schemas at /"},
		{"{\"pattern\":\"(a\"}", CBLLM_ERR_INVALID, NULL},
		{"[1]", CBLLM_ERR_INVALID, "json_schema: a schema must be an object or a boolean at /"},
		{"false", CBLLM_ERR_INVALID, "json_schema: the schema false admits no value at /"},
		{"{\"type\":\"object\",\"properties\":{\"next\":{\"$ref\":\"#\"}},\"required\":[\"next\"]}",
			CBLLM_ERR_INVALID,
		"json_schema: recursive $ref \"#\" has no finite document within depth 3 at /properties/next"},
		{"{\"type\":\"integer\",\"minimum\":5,\"exclusiveMaximum\":5}", CBLLM_ERR_INVALID,
		"json_schema: no integer lies between the bounds (5 > 4) at /"},
		{"{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", CBLLM_ERR_INVALID,
		"json_schema: minItems 3 exceeds maxItems 2 at /"},
		{"{\"type\":\"array\",\"minItems\":1,\"items\":false}", CBLLM_ERR_INVALID,
		"json_schema: minItems 1 asks more items than the schema allows at /"},
		{"{\"type\":\"array\",\"minItems\":1,\"items\":{\"anyOf\":[false]}}", CBLLM_ERR_INVALID,
		"json_schema: the schema false admits no value at /items/anyOf/0"},
		{"{\"type\":\"object\",\"required\":[\"x\"],\"additionalProperties\":false}", CBLLM_ERR_INVALID,
		"json_schema: required property \"x\" is not declared and additionalProperties is false at /"},
		{"{\"type\":\"boolean\",\"enum\":[1,\"a\"]}", CBLLM_ERR_INVALID,
		"json_schema: no value of enum has the type asked at /"},
		{"{\"type\":", CBLLM_ERR_FORMAT, "json_schema: the schema is not valid JSON (at byte 7)"},
		{"{} {}", CBLLM_ERR_FORMAT, "json_schema: the schema is not valid JSON (text after it at byte 3)"},
		{"", CBLLM_ERR_FORMAT, "json_schema: the schema is not valid JSON (at byte 0)"},
		{"{\"type\":\"string\",\"type\":\"integer\"}", CBLLM_ERR_FORMAT,
		"json_schema: the key \"type\" appears twice in an object"},
		{"{\"const\":\"a\\u0000b\"}", CBLLM_ERR_UNSUPPORTED,
		"json_schema: \\u0000 in a string (at byte 11) is not supported"},
		{"{\"const\":\"a\tb\"}", CBLLM_ERR_FORMAT,
		"json_schema: the schema is not valid JSON (a raw control character in a string at byte 11)"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
	{
		cbllm_buf	out = {0};
		cbllm_err	err = {{0}};
		int			rc = json_schema_to_regex(cases[i].schema, strlen(cases[i].schema), &out, &err);
		bool		msg_ok = cases[i].msg == NULL ? strncmp(err.msg, "json_schema: pattern", 20) == 0 :
			strcmp(err.msg, cases[i].msg) == 0;

		TAP_OK(rc == cases[i].code && msg_ok && out.len == 0, "%s refused (%s): %s", cases[i].schema,
			   cbllm_status_name(rc), err.msg);
		cbllm_buf_free(&out);
	}
}

/* The regex of schema text, or NULL; refusal's message in err. */
static char *
RegexOf(const char *schema, cbllm_err *err, int *rc)
{
	cbllm_buf	out = {0};

	*rc = json_schema_to_regex(schema, strlen(schema), &out, err);
	if (*rc != CBLLM_OK)
		cbllm_buf_free(&out);
	return out.data;
}

/* Whether schema compiles and accepts each of yes[] and rejects each of no[] (NULL-terminated). */
static bool
Admits(const char *schema, const char *const *yes, const char *const *no)
{
	cbllm_dfa  *d;
	cbllm_err	err;
	bool		ok;

	if (Compile(schema, strlen(schema), &d, &err, NULL) != CBLLM_OK)
	{
		TAP_DIAG("%s", err.msg);
		return false;
	}
	ok = true;
	for (; yes && *yes; yes++)
		if (!dfa_match(d, *yes, strlen(*yes)))
		{
			TAP_DIAG("rejected: %s", *yes);
			ok = false;
		}
	for (; no && *no; no++)
		if (dfa_match(d, *no, strlen(*no)))
		{
			TAP_DIAG("accepted: %s", *no);
			ok = false;
		}
	dfa_free(d);
	return ok;
}

/* The choices made: whitespace, dropped branches, undeclared required keys, tuples. */
static void
TestDecisions(void)
{
	TAP_OK(Admits("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"null\"}}}",
				  (const char *[]) {"{}", "{\"a\":1}", "{\"b\":null}", "{\"a\": 1, \"b\": null}", "{\"a\":1,\"b\":null}", NULL},
				  (const char *[]) {"{ }", "{\"a\":1 }", "{ \"a\":1}", "{\"a\":1,  \"b\":null}", "{\"a\" : 1}",
		"{\"b\":null,\"a\":1}", "{\"a\":1,}", "{,\"b\":null}", NULL}),
		   "one optional space after ':' and ',', nothing else; properties in order, each optional");
	TAP_OK(Admits("{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}",
				  (const char *[]) {"{}", "{\"x\":1}", "{\"x\":1, \"y\":2}", "{\"\":0,\"x\":1}", NULL},
				  (const char *[]) {"{ \"x\":1}", "{\"x\":\"1\"}", "{\"x\":1,}", NULL}),
		   "a map: any keys, values of the schema, the same whitespace rule");
	TAP_OK(Admits("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"z\",\"a\"]}",
				  (const char *[]) {"{\"a\":1,\"z\":null}", "{\"a\":1,\"z\":{\"k\":1}}", NULL},
				  (const char *[]) {"{\"a\":1}", "{\"z\":1,\"a\":1}", "{\"a\":1,\"z\":{\"k\":[1]}}", NULL}),
		   "a required key not declared comes after the declared ones, with any value one level deep");
	TAP_OK(Admits("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"integer\"},{\"type\":\"string\"}]}",
				  (const char *[]) {"[]", "[1]", "[1,\"a\"]", NULL},
				  (const char *[]) {"[1,\"a\",2]", "[\"a\"]", NULL}),
		   "a tuple without items: no item past it, cut short where minItems allows");
	TAP_OK(Admits("{\"type\":\"object\",\"properties\":{\"a\":false,\"b\":{\"anyOf\":[false,{\"type\":\"null\"}]},"
				  "\"c\":{\"type\":\"array\",\"items\":false}}}",
				  (const char *[]) {"{}", "{\"b\":null}", "{\"c\":[]}", NULL},
				  (const char *[]) {"{\"a\":1}", "{\"c\":[1]}", NULL}),
		   "branches that admit nothing are dropped where optional");
	TAP_OK(Admits("{\"type\":\"string\",\"pattern\":\"b+\"}",
				  (const char *[]) {"\"b\"", "\"abbc\"", "\"日本b\"", NULL},
				  (const char *[]) {"\"\"", "\"ac\"", "\"a\\\"b\"", NULL}),
		   "pattern searches: unanchored sides are padded; no escape inside");
	TAP_OK(Admits("{}",
				  (const char *[]) {"1", "\"s\"", "[[1]]", "{\"a\":{\"b\":1}}", "[{}]", "null", "-1.5e+3", NULL},
				  (const char *[]) {"[[[1]]]", "{\"a\":{\"b\":{}}}", "[[[]]]", "01", "\"\\u0041\"", "nul", NULL}),
		   "any value nests two levels deep; no \\u escape");
	TAP_OK(Admits("{\"type\":\"integer\",\"minimum\":-3,\"maximum\":12}",
				  (const char *[]) {"-3", "-1", "0", "9", "10", "12", NULL},
				  (const char *[]) {"-4", "-0", "13", "012", "1.0", "", NULL}),
		   "an integer range: no -0, no leading zero");
	TAP_OK(Admits("{\"type\":\"string\",\"format\":\"date\"}",
				  (const char *[]) {"\"2024-02-29\"", "\"2000-02-29\"", "\"1996-02-29\"", "\"2023-12-31\"", NULL},
				  (const char *[]) {"\"1900-02-29\"", "\"2023-02-29\"", "\"2023-06-31\"", "\"0000-01-01\"", NULL}),
		   "dates: month lengths and leap years");
}

/* Many optional properties: the pattern stays within the regex parser's nesting. */
static void
TestManyOptional(void)
{
	cbllm_buf	s = {0};
	cbllm_err	err;
	int			rc;
	char	   *re;

	cbllm_buf_append(&s, "{\"type\":\"object\",\"properties\":{", 31);
	for (int i = 0; i < 150; i++)
	{
		char		p[48];

		cbllm_buf_append(&s, p, (size_t) snprintf(p, sizeof(p), "%s\"p%d\":{\"type\":\"integer\"}", i ? "," : "", i));
	}
	cbllm_buf_append(&s, "}}", 2);
	TAP_OK(Admits(s.data, (const char *[]) {"{}", "{\"p149\":1}", "{\"p0\":1,\"p40\":2,\"p149\":3}",
		"{\"p31\":1,\"p32\":2}", "{\"p100\":1,\"p101\":2}", NULL},
				  (const char *[]) {"{\"p40\":2,\"p0\":1}", "{\"p150\":1}", "{\"p1\":1,\"p1\":1}", NULL}),
		   "150 optional properties: any selection in order");
	re = RegexOf(s.data, &err, &rc);
	TAP_OK(rc == CBLLM_OK && strlen(re) < 200000, "150 optional properties: regex of %zu bytes",
		   re ? strlen(re) : 0);
	free(re);
	cbllm_buf_free(&s);
}

/* Hostile schemas: deep nesting, exponential $refs, big repeats. */
static void
TestLimits(void)
{
	cbllm_buf	s = {0};
	cbllm_err	err;
	int			rc;
	char	   *re;

	for (int i = 0; i < 200; i++)
		cbllm_buf_append(&s, "{\"items\":", 9);
	cbllm_buf_append(&s, "{}", 2);
	for (int i = 0; i < 200; i++)
		cbllm_buf_append(&s, "}", 1);
	re = RegexOf(s.data, &err, &rc);
	TAP_OK(rc == CBLLM_ERR_UNSUPPORTED && strstr(err.msg, "nests deeper than 64 levels") != NULL,
		   "200 nested schemas refused: %s", err.msg);
	free(re);
	cbllm_buf_free(&s);

	/* each definition names the next twice: 2^30 copies */
	cbllm_buf_append(&s, "{\"$defs\":{", 10);
	for (int i = 0; i < 30; i++)
	{
		char		p[128];

		cbllm_buf_append(&s, p, (size_t) snprintf(p, sizeof(p),
												  "\"d%d\":{\"type\":\"array\",\"prefixItems\":[{\"$ref\":\"#/$defs/d%d\"},{\"$ref\":\"#/$defs/d%d\"}]},",
												  i, i + 1, i + 1));
	}
	cbllm_buf_append(&s, "\"d30\":{\"type\":\"string\"}},\"$ref\":\"#/$defs/d0\"}", 46);
	{
		double		t0 = cbllm_now();

		re = RegexOf(s.data, &err, &rc);
		TAP_OK(rc == CBLLM_ERR_UNSUPPORTED && strstr(err.msg, "too large") != NULL && cbllm_now() - t0 < 5,
			   "$refs doubling 30 times refused quickly: %s", err.msg);
	}
	free(re);
	cbllm_buf_free(&s);
}

/* Compile time of the 20-property fixture (reported, not asserted). */
static void
TestTiming(void)
{
	char	   *path = cbllm_path_join(FIXTURE_DIR, "twenty.json");
	cJSON	   *fx = LoadFixture(path);
	double		t0 = cbllm_now(),
				t1;
	cbllm_dfa  *d = NULL;
	cbllm_err	err;
	size_t		re_len = 0;
	int			rc = fx != NULL ? CompileFixture(fx, &d, &err, &re_len) : CBLLM_ERR_IO;

	t1 = cbllm_now();
	TAP_OK(rc == CBLLM_OK, "twenty.json compiles");
	if (rc == CBLLM_OK)
		TAP_DIAG("twenty.json: schema to automaton in %.2f ms (regex %zu bytes, %d states, %d classes)",
				 (t1 - t0) * 1e3, re_len, d->n_states, d->n_classes);
	dfa_free(d);
	cJSON_Delete(fx);
	free(path);
}

/* ---------------------------------------------------------------- modes for the Python check */

static uint64_t rng;

/* A random number (splitmix64). */
static uint64_t
Rand(void)
{
	uint64_t	z = (rng += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/*
 * Write one random document of d: a walk that picks uniformly among the
 * byte classes allowed next (then a byte of the class), stops at an
 * accepting state one time in four, and past SAMPLE_BUDGET bytes takes
 * only bytes that bring a match nearer.
 */
static void
SampleOne(const cbllm_dfa *d, cbllm_buf *doc)
{
	int32_t		s = 0;
	int32_t		ok[256];

	doc->len = 0;
	for (;;)
	{
		bool		home = doc->len >= SAMPLE_BUDGET;
		int			n = 0,
					k,
					m = 0;
		uint8_t		pick[256];

		if (d->accept[s] && (home || Rand() % 4 == 0))
			break;
		for (int32_t c = 0; c < d->n_classes; c++)
		{
			int32_t		t = d->next[(size_t) s * d->n_classes + c];

			if (t >= 0 && (!home || d->dist[t] < d->dist[s]))
				ok[n++] = c;
		}
		if (n == 0)
			break;				/* an accepting state with no way on */
		k = ok[Rand() % (uint64_t) n];
		for (int b = 0; b < 256; b++)
			if (d->byte_class[b] == k)
				pick[m++] = (uint8_t) b;
		cbllm_buf_append(doc, &pick[Rand() % (uint64_t) m], 1);
		s = dfa_next(d, s, doc->data[doc->len - 1]);
	}
	cbllm_buf_append(doc, "", 0);
}

/* --sample FILE N SEED */
static int
Sample(const char *path, int n, uint64_t seed)
{
	cJSON	   *fx = LoadFixture(path);
	cbllm_dfa  *d;
	cbllm_err	err;
	cbllm_buf	doc = {0};

	if (fx == NULL)
		return 2;
	if (CompileFixture(fx, &d, &err, NULL) != CBLLM_OK)
	{
		fprintf(stderr, "%s: %s\n", path, err.msg);
		cJSON_Delete(fx);
		return 1;
	}
	rng = seed;
	for (int i = 0; i < n; i++)
	{
		SampleOne(d, &doc);
		fwrite(doc.data, 1, doc.len, stdout);
		putchar('\n');
	}
	cbllm_buf_free(&doc);
	dfa_free(d);
	cJSON_Delete(fx);
	return 0;
}

/* --match FILE */
static int
Match(const char *path)
{
	static const char *const lists[] = {"valid", "invalid", "outside"};
	cJSON	   *fx = LoadFixture(path);
	cbllm_dfa  *d;
	cbllm_err	err;

	if (fx == NULL)
		return 2;
	if (CompileFixture(fx, &d, &err, NULL) != CBLLM_OK)
	{
		fprintf(stderr, "%s: %s\n", path, err.msg);
		cJSON_Delete(fx);
		return 1;
	}
	for (int l = 0; l < 3; l++)
	{
		const cJSON *e;
		int			i = 0;

		cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(fx, lists[l]))
			printf("%s %d %d\n", lists[l], i++,
				   cJSON_IsString(e) && dfa_match(d, e->valuestring, strlen(e->valuestring)));
	}
	dfa_free(d);
	cJSON_Delete(fx);
	return 0;
}

int
main(int argc, char **argv)
{
	if (argc == 5 && strcmp(argv[1], "--sample") == 0)
		return Sample(argv[2], atoi(argv[3]), strtoull(argv[4], NULL, 10));
	if (argc == 3 && strcmp(argv[1], "--match") == 0)
		return Match(argv[2]);
	if (argc != 1)
	{
		fprintf(stderr, "usage: test_json_schema [--sample FILE N SEED | --match FILE]\n");
		return 2;
	}
	TestFixtures();
	TestErrors();
	TestDecisions();
	TestManyOptional();
	TestLimits();
	TestTiming();
	return tap_done();
}
