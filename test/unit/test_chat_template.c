/*
 * test_chat_template.c: the chat-template interpreter and its API.
 *
 *   test_chat_template [TOKENIZERS_DIR]   (default test/data/tokenizers)
 *
 * 1. Every case of chat.jsonl for llama3_1, qwen3 and gemma3 (rendered by
 *    transformers.js and cross-checked with Python Jinja2) renders
 *    byte-identical through chat_load + chat_render.
 * 2. Language cases: each template's expected output below is what Jinja2
 *    3.1 renders in transformers' environment (test/tools/render_chat.py),
 *    recorded once; the error cases name what the message must say.
 * 3. The API: message validation naming the element, template sources
 *    (chat_template.jinja wins, a list's "default", none at all), special
 *    tokens given as objects, kwargs overriding defaults, and renders of one
 *    template on four threads at once.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "chat_cases.h"
#include "chat/chat_template.h"
#include "checks.h"
#include "chat/jinja.h"

typedef struct render_case
{
	const char *name;
	const char *tmpl;
	const char *vars;
	const char *expect;
} render_case;

typedef struct error_case
{
	const char *name;
	const char *tmpl;
	const char *vars;
	const char *needle;
} error_case;

/* name, template, variables (JSON), Jinja2's output */
static const render_case RENDER_CASES[] = {
	{"lstrip_and_minus",
	 "a  {%- if true %} b {% endif -%}  c",
	 "{}",
	 "a b c"},
	{"lstrip_blocks_indent",
	 "x\n    {% if true %}\n    y\n    {% endif %}\nz",
	 "{}",
	 "x\n    y\nz"},
	{"plus_disables_lstrip",
	 "  {%+ if true %}k{% endif %}",
	 "{}",
	 "  k"},
	{"plus_disables_trim",
	 "{% if true +%}\nq{% endif %}",
	 "{}",
	 "\nq"},
	{"comment_lstrip_trim",
	 "a\n  {# c #}\nb",
	 "{}",
	 "a\nb"},
	{"raw_block",
	 "{% raw %}{{ x }}{% endraw %}",
	 "{}",
	 "{{ x }}"},
	{"trailing_newline_dropped",
	 "a\n",
	 "{}",
	 "a"},
	{"print_minus_both_sides",
	 "x  {{- ' y ' -}}  z",
	 "{}",
	 "x y z"},
	{"variable_not_lstripped",
	 "  {{ 'v' }}\n{{ 'w' }}",
	 "{}",
	 "  v\nw"},
	{"crlf_normalised",
	 "a\r\n{% if true %}\r\nb{% endif %}\r\n",
	 "{}",
	 "a\nb"},
	{"loop_object",
	 "{% for x in [1,2,3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.revindex }}{{ loop.length }};{% endfor %}",
	 "{}",
	 "10TrueFalse33;21FalseFalse23;32FalseTrue13;"},
	{"for_else",
	 "{% for x in [] %}a{% else %}empty{% endfor %}",
	 "{}",
	 "empty"},
	{"for_if_filter",
	 "{% for x in range(10) if x is odd %}{{ x }}/{{ loop.length }},{% endfor %}",
	 "{}",
	 "1/5,3/5,5/5,7/5,9/5,"},
	{"break_continue",
	 "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 4 %}{% break %}{% endif %}{{ x }}{% endfor %}",
	 "{}",
	 "0134"},
	{"items_unpack",
	 "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
	 "{\"d\": {\"b\": 1, \"a\": 2}}",
	 "b=1;a=2;"},
	{"previtem_nextitem",
	 "{% for x in 'abc' %}[{{ loop.previtem }}{{ x }}{{ loop.nextitem }}]{% endfor %}",
	 "{}",
	 "[ab][abc][bc]"},
	{"loop_scope",
	 "{% set c = 0 %}{% for i in [1,2] %}{% set c = c + 1 %}{{ c }}{% endfor %}{{ c }}",
	 "{}",
	 "110"},
	{"namespace_assign",
	 "{% set ns = namespace(n=0, s='') %}{% for i in [1,2,3] %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}",
	 "{}",
	 "6"},
	{"block_set",
	 "{% set x %}a{{ 1 }}b{% endset %}[{{ x }}]",
	 "{}",
	 "[a1b]"},
	{"macro_defaults",
	 "{% macro f(a, b='B') %}{{ a }}-{{ b }}{% endmacro %}{{ f(1) }} {{ f(2, b=3) }}",
	 "{}",
	 "1-B 2-3"},
	{"filter_block",
	 "{% filter upper %}ab{{ 'c' }}{% endfilter %}",
	 "{}",
	 "ABC"},
	{"slices_and_repr",
	 "{{ [1,2,3][::-1] }} {{ 'hello'[1:3] }} {{ 'h\303\251llo'[-1] }} {{ (1,) }} {{ {'a': [1, 2.5, none, true, 'it\\'s']} }}",
	 "{}",
	 "[3, 2, 1] el o (1,) {'a': [1, 2.5, None, True, \"it's\"]}"},
	{"arithmetic",
	 "{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1e20 }} {{ 0.1 + 0.2 }} {{ 1.0 }} {{ 3 * 'ab' }} {{ 1e-5 }} {{ 123456789.125 }} {{ -7.5 // 2 }} {{ 7.5 % -2 }}",
	 "{}",
	 "3 -4 2 3.5 1024 1e+20 0.30000000000000004 1.0 ababab 1e-05 123456789.125 -4.0 -0.5"},
	{"logic_and_concat",
	 "{{ 'a' ~ 1 ~ none }} {{ 1 if false }}|{{ 'y' if 0 else 'n' }} {{ not 1 }} {{ 1 and 'x' }} {{ 0 or [] }}",
	 "{}",
	 "a1None |n False x []"},
	{"comparisons",
	 "{{ 'b' in 'abc' }} {{ 2 not in [1,2] }} {{ 1 < 2 < 3 }} {{ 'a' < 'b' }} {{ 1 == 1.0 }} {{ true == 1 }} {{ [1,2] == [1,2] }} {{ 'k' in {'k': 1} }}",
	 "{}",
	 "True False True True True True True True"},
	{"tests",
	 "{{ x is defined }} {{ y is undefined }} {{ none is none }} {{ 'a' is string }} {{ 1 is number }} {{ 1.5 is float }} {{ 1 is integer }} {{ {} is mapping }} {{ [] is iterable }} {{ 6 is divisibleby 3 }} {{ 3 is odd }} {{ x is eq 1 }} {{ true is boolean }} {{ false is false }} {{ x is not none }} {{ 'ab' is lower }}",
	 "{\"x\": 1}",
	 "True True True True True True True True True True True True True True True True"},
	{"string_methods",
	 "{{ '  a b  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a b  c '.split() }}|{{ 'a-b-c'.rsplit('-', 1) }}|{{ 'a-b-c'.split('-', 1) }}|{{ 'abc'.startswith(('x','a')) }}|{{ 'abc'.endswith('bc') }}|{{ 'Hello World'.lower() }}|{{ \"they're bill's\".title() }}|{{ 'abcabc'.replace('b', 'X', 1) }}|{{ 'h\303\251llo'.find('l') }}|{{ 'aaa'.count('a') }}|{{ '-'.join(['a','b']) }}|{{ '\303\211COLE \316\224'.lower() }}|{{ 'stra\303\237e'.upper() }}|{{ 'x\\ny'.splitlines() }}|{{ 'aBc'.capitalize() }}|{{ '\\n\\nx\\n'.lstrip('\\n') }}",
	 "{}",
	 "a b|a|['a', 'b', '', 'c']|['a', 'b', 'c']|['a-b', 'c']|['a', 'b-c']|True|True|hello world|They'Re Bill'S|aXcabc|2|3|a-b|\303\251cole \316\264|STRASSE|['x', 'y']|Abc|x\n"},
	{"filters",
	 "{{ ' x '|trim }}|{{ {'a':1,'b':[1,2]}|tojson }}|{{ {'a':1,'b':[]}|tojson(indent=2) }}|{{ [3,1,2]|sort }}|{{ ['b','A','a']|unique|list }}|{{ [1,2,3]|reverse|list }}|{{ 'abc'|length }}|{{ [1,2]|first }}{{ [1,2]|last }}|{{ x|default('d') }}|{{ ''|default('e', true) }}|{{ 'hello'|upper }}|{{ 'hello wORLD-x'|title }}|{{ 'hello'|capitalize }}|{{ '3'|int + 1 }}|{{ '2.5'|float }}|{{ -3|abs }}|{{ 2.567|round(2) }}|{{ 2.5|round }}|{{ 'a\\n\\nb'|indent(2) }}|{{ [1,2]|join(', ') }}|{{ d|dictsort }}|{{ d|items|list }}|{{ '<a & \"b\">'|e }}|{{ ['b','a','C']|sort(reverse=true) }}|{{ [1,2,3]|sum }}|{{ [3,1]|min }}{{ [3,1]|max }}|{{ 'ab'|list }}|{{ none|string }}|{{ 'x'|replace('x', 'yy') }}",
	 "{\"d\": {\"b\": 1, \"a\": 2}}",
	 "x|{\"a\": 1, \"b\": [1, 2]}|{\n  \"a\": 1,\n  \"b\": []\n}|[1, 2, 3]|['b', 'A']|[3, 2, 1]|3|12|d|e|HELLO|Hello World-X|Hello|4|2.5|3|2.57|2.0|a\n\n  b|1, 2|[('a', 2), ('b', 1)]|[('b', 1), ('a', 2)]|&lt;a &amp; &#34;b&#34;&gt;|['C', 'b', 'a']|6|13|['a', 'b']|None|yy"},
	{"select_map",
	 "{{ users|selectattr('active')|map(attribute='name')|join(',') }}|{{ users|rejectattr('active')|map(attribute='name')|list }}|{{ [1,2,3,4]|select('even')|list }}|{{ users|map(attribute='age', default=0)|list }}|{{ users|selectattr('name', 'equalto', 'b')|list|length }}|{{ ['a','B']|map('upper')|list }}|{{ users|sort(attribute='name', reverse=true)|map(attribute='name')|join }}",
	 "{\"users\": [{\"name\": \"a\", \"active\": true, \"age\": 3}, {\"name\": \"b\", \"active\": false}, {\"name\": \"c\", \"active\": true}]}",
	 "a,c|['b']|[2, 4]|[3, 0, 0]|1|['A', 'B']|cba"},
	{"tojson_strings",
	 "{{ s|tojson }}",
	 "{\"s\": \"\\u00e9\\n\\\"\\\\\\u0001\\t/\\u2028\\ud83d\\ude00\"}",
	 "\"\303\251\\n\\\"\\\\\\u0001\\t/\342\200\250\360\237\230\200\""},
	{"tojson_numbers",
	 "{{ v|tojson }} {{ v }}",
	 "{\"v\": [1, 1.0, 2.5e-07, 1e+16, -0.0, 123456789012, true, null]}",
	 "[1, 1.0, 2.5e-07, 1e+16, -0.0, 123456789012, true, null] [1, 1.0, 2.5e-07, 1e+16, -0.0, 123456789012, True, None]"},
	{"tojson_sort_keys",
	 "{{ d|tojson(sort_keys=true) }} {{ d|tojson(separators=(',', ':')) }}",
	 "{\"d\": {\"b\": 1, \"a\": {\"y\": [], \"x\": {}}}}",
	 "{\"a\": {\"x\": {}, \"y\": []}, \"b\": 1} {\"b\":1,\"a\":{\"y\":[],\"x\":{}}}"},
	{"dict_methods",
	 "{{ d.get('a') }} {{ d.get('z', 'none') }} {{ d.keys()|list }} {{ d.values()|list }} {{ d['a'] }} {{ d.a }} {{ d.missing is defined }}",
	 "{\"d\": {\"a\": 1, \"b\": 2}}",
	 "1 none ['a', 'b'] [1, 2] 1 1 False"},
	{"undefined_prints_empty",
	 "[{{ nothing }}][{{ d.nope }}][{{ nothing|length }}][{{ nothing|default('x') }}]",
	 "{\"d\": {}}",
	 "[][][0][x]"},
};
/* name, template, variables (JSON), what the error message must contain */
static const error_case ERROR_CASES[] = {
	{"unsupported_filter_names_line",
	 "a\n\n{{ x|wordwrap }}",
	 "{}",
	 "chat template line 3: unsupported filter 'wordwrap'"},
	{"raise_exception_names_line",
	 "x\n{{ raise_exception('bad roles') }}",
	 "{}",
	 "chat template line 2: bad roles"},
	{"undefined_attribute_error",
	 "{{ y.z }}",
	 "{}",
	 "chat template line 1: 'y' is undefined"},
	{"type_error_names_line",
	 "\n{{ 1 + 'a' }}",
	 "{}",
	 "chat template line 2: unsupported operand type(s) for +: 'int' and 'str'"},
	{"append_is_refused",
	 "{% set l = [] %}\n{{ l.append(1) }}",
	 "{}",
	 "chat template line 2: access to attribute 'append' of 'list' object is unsafe"},
	{"unsupported_tag",
	 "{% include 'x' %}",
	 "{}",
	 "chat template line 1: unsupported tag 'include'"},
	{"unclosed_if",
	 "{% if x %}\nabc",
	 "{}",
	 "chat template line 2: unexpected end of template"},
	{"break_outside_loop",
	 "\n{% break %}",
	 "{}",
	 "chat template line 2: 'break' outside a for loop"},
	{"unterminated_string",
	 "{{ 'abc }}",
	 "{}",
	 "chat template line 1: unterminated string"},
	{"output_limit",
	 "{% for i in range(100000) %}{{ s }}{% endfor %}",
	 "{\"s\": \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}",
	 "output exceeds"},
	{"step_limit",
	 "{% set r = range(100000) %}{% for i in r %}{% for j in r %}{% endfor %}{% endfor %}",
	 "{}",
	 "steps"},
	{"macro_recursion_limit",
	 "{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}",
	 "{}",
	 "nested deeper"},
	{"parse_nesting_limit",
	 "{{ ((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((1)))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))) }}",
	 "{}",
	 "nesting deeper"},
	{"memory_limit",
	 "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
	 "{}",
	 "MiB of memory"},
	{"range_limit",
	 "{{ range(1000000)|length }}",
	 "{}",
	 "range too big"},
};

/* Compile and render a template with variables from a JSON object; the status. */
static int
RenderText(const char *tmpl, const char *vars, cbllm_buf *out, cbllm_err *err)
{
	jinja_template *t = NULL;
	cJSON	   *v = cJSON_Parse(vars);
	jinja_var	var = {NULL, v, vars, strlen(vars), true};
	int			rc = jinja_compile(tmpl, strlen(tmpl), &t, err);

	if (rc == CBLLM_OK)
		rc = jinja_render(t, &var, 1, out, err);
	jinja_free(t);
	cJSON_Delete(v);
	return rc;
}

/* The language cases whose output Jinja2 gave. */
static void
TestRenderCases(void)
{
	for (size_t i = 0; i < sizeof(RENDER_CASES) / sizeof(RENDER_CASES[0]); i++)
	{
		const render_case *c = &RENDER_CASES[i];
		cbllm_buf	out = {0};
		cbllm_err	err = {{0}};
		int			rc = RenderText(c->tmpl, c->vars, &out, &err);
		bool		same = rc == CBLLM_OK && out.len == strlen(c->expect) && memcmp(out.data, c->expect, out.len) == 0;

		if (rc != CBLLM_OK)
			TAP_DIAG("%s", err.msg);
		else if (!same)
			chat_cases_diff(out.data, out.len, c->expect);
		TAP_OK(same, "%s renders as Jinja2 does", c->name);
		cbllm_buf_free(&out);
	}
}

/* The error cases: a failure whose message says what and where. */
static void
TestErrorCases(void)
{
	for (size_t i = 0; i < sizeof(ERROR_CASES) / sizeof(ERROR_CASES[0]); i++)
	{
		const error_case *c = &ERROR_CASES[i];
		cbllm_buf	out = {0};
		cbllm_err	err = {{0}};
		int			rc = RenderText(c->tmpl, c->vars, &out, &err);

		expect_fail(c->name, rc, &err, c->needle, NULL, NULL);
		cbllm_buf_free(&out);
	}
}

/*
 * Bytes that are not UTF-8 each stand for themselves, as one character
 * (base/utf8.h decides what is UTF-8): an overlong form, a surrogate or a
 * code point past U+10FFFF is never read as the character it spells.
 */
static void
TestIllFormedUtf8(void)
{
	static const struct
	{
		const char *what;
		const char *tmpl;
		const char *expect;
	}			cases[] = {
		{"(the control) well-formed characters count one each", "{{ 'a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80'|length }}", "4"},
		{"an overlong '/' (C0 AF) is two characters", "{{ 'a\xC0\xAF" "b'|length }}", "4"},
		{"a surrogate (ED A0 80) is three characters", "{{ 'x\xED\xA0\x80y'|length }}", "5"},
		{"F4 90 80 80 (past U+10FFFF) is four characters", "{{ '\xF4\x90\x80\x80'|length }}", "4"},
		{"a cut-short character is its bytes", "{{ 'a\xE2\x82'|length }}", "3"},
		{"tojson does not read an overlong '\"' (C0 A2) as a quote", "{{ '\xC0\xA2'|tojson }}", "\"\xC0\xA2\""},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
	{
		cbllm_buf	out = {0};
		cbllm_err	err = {{0}};
		int			rc = RenderText(cases[i].tmpl, "{}", &out, &err);
		bool		same = rc == CBLLM_OK && out.len == strlen(cases[i].expect) &&
			memcmp(out.data, cases[i].expect, out.len) == 0;

		if (rc != CBLLM_OK)
			TAP_DIAG("%s", err.msg);
		TAP_OK(same, "ill-formed UTF-8: %s", cases[i].what);
		cbllm_buf_free(&out);
	}
}

/* chat_render_fn over a loaded template: no template variables. */
static int
RenderWith(void *arg, const char *messages, size_t len, bool add_generation_prompt, cbllm_buf *out,
		   cbllm_err *err)
{
	return chat_render(arg, messages, len, add_generation_prompt, NULL, 0, out, err);
}

/* One model's chat.jsonl through chat_load and chat_render. */
static void
TestVectors(const char *root, const char *model)
{
	char		dir[1024],
				path[1100];
	cbllm_err	err = {{0}};
	cbllm_chat *chat = NULL;
	int			total,
				same = 0;

	snprintf(dir, sizeof(dir), "%s/%s", root, model);
	snprintf(path, sizeof(path), "%s/chat.jsonl", dir);
	if (chat_load(dir, &chat, &err) != CBLLM_OK || chat == NULL)
	{
		TAP_OK(false, "%s: load the template: %s", model, err.msg);
		chat_free(chat);
		return;
	}
	total = chat_cases_run(path, RenderWith, chat, &same);
	printf("%s: %d/%d rendered\n", model, same, total);
	TAP_OK(total > 0 && same == total, "%s: %d/%d chat.jsonl cases render byte-identical", model, same, total);
	chat_free(chat);
}

static const char QWEN_LIKE[] =
	"{\"bos_token\": null, \"eos_token\": {\"content\": \"<|im_end|>\", \"special\": true},"
	" \"chat_template\": \"{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{{ eos_token }}{% endfor %}"
	"{% if add_generation_prompt %}<|assistant|>{% if enable_thinking is defined and not enable_thinking %}"
	"<think></think>{% endif %}{% endif %}{{ bos_token is defined }}|{{ tools }}\"}";

/* Render through the chat API; the status. */
static int
ChatRender(const cbllm_chat *c, const char *msgs, bool agp, const char *kwargs, cbllm_buf *out, cbllm_err *err)
{
	return chat_render(c, msgs, strlen(msgs), agp, kwargs, kwargs ? strlen(kwargs) : 0, out, err);
}

/* Check a chat_render result against an expected text. */
static void
ExpectRender(const char *what, int rc, const cbllm_buf *out, const cbllm_err *err, const char *want)
{
	bool		ok = rc == CBLLM_OK && out->len == strlen(want) && memcmp(out->data, want, out->len) == 0;

	if (rc != CBLLM_OK)
		TAP_DIAG("%s", err->msg);
	else if (!ok)
		chat_cases_diff(out->data, out->len, want);
	TAP_OK(ok, "%s", what);
}

/* Messages are checked before rendering, naming the element. */
static void
TestValidation(void)
{
	cbllm_chat *c = NULL;
	cbllm_err	err = {{0}};
	cbllm_buf	out = {0};
	static const struct
	{
		const char *msgs;
		const char *needle;
	}			bad[] = {
		{"{\"role\": \"user\"}", "messages must be a JSON array"},
		{"[{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"user\", \"content\": \"b\"}, 3]", "messages[2] is not an object"},
		{"[{\"role\": \"user\", \"content\": \"a\"}, {\"role\": 1, \"content\": \"b\"}]", "messages[1].role must be a string"},
		{"[{\"role\": \"user\", \"content\": 5}]", "messages[0].content must be a string or null"},
		{"[{\"role\": \"user\", \"content\": [\"x\"]}]", "messages[0].content must be a string, null or a list"},
		{"not json", "messages must be a JSON array"},
	};

	TAP_OK(chat_load_from(QWEN_LIKE, strlen(QWEN_LIKE), NULL, 0, &c, &err) == CBLLM_OK && c != NULL,
		   "a config with an object eos_token and a null bos_token loads");
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		expect_fail(bad[i].needle, ChatRender(c, bad[i].msgs, false, NULL, &out, &err), &err, bad[i].needle, NULL, NULL);
	{
		cbllm_buf	plain = {0};
		bool		same = ChatRender(c, "[{\"role\": \"user\", \"content\": \"hi\"}]", false, NULL, &plain, &err) == CBLLM_OK &&
			ChatRender(c, "[{\"role\": \"user\", \"content\": \"hi\"}]", false, "{\"messages\": [{\"role\": null}]}", &out, &err) == CBLLM_OK &&
			out.len == plain.len && memcmp(out.data, plain.data, out.len) == 0;

		TAP_OK(same, "a \"messages\" key in the kwargs never replaces the messages argument");
		cbllm_buf_free(&plain);
	}
	{
		cbllm_buf	deep = {0};
		int			rc;

		for (int k = 0; k < 600; k++)
			cbllm_buf_append(&deep, "[", 1);
		for (int k = 0; k < 600; k++)
			cbllm_buf_append(&deep, "]", 1);
		cbllm_buf_append(&deep, "", 1);
		rc = ChatRender(c, deep.data, false, NULL, &out, &err);
		expect_fail("messages nested 600 deep", rc, &err, "nested too deeply", NULL, NULL);
		cbllm_buf_free(&deep);
	}
	expect_fail("kwargs that are not an object", ChatRender(c, "[]", false, "[1]", &out, &err), &err,
				"kwargs must be a JSON object", NULL, NULL);
	ExpectRender("special tokens: object content used, null bos_token undefined, tools none",
				 ChatRender(c, "[{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": null}]",
							true, NULL, &out, &err), &out, &err,
				 "<|user|>hi<|im_end|><|assistant|>None<|im_end|><|assistant|>False|None");
	ExpectRender("kwargs become variables and override defaults",
				 ChatRender(c, "[]", true, "{\"enable_thinking\": false, \"tools\": [1, 2.0]}", &out, &err), &out, &err,
				 "<|assistant|><think></think>False|[1, 2.0]");
	ExpectRender("content as a list of parts reaches the template",
				 ChatRender(c, "[{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"t\"}]}]", false, NULL,
							&out, &err), &out, &err, "<|user|>[{'type': 'text', 'text': 't'}]<|im_end|>False|None");
	cbllm_buf_free(&out);
	chat_free(c);
}

/* Where the template comes from. */
static void
TestSources(void)
{
	char	   *dir = fixture_case_dir("sources");
	cbllm_chat *c = NULL;
	cbllm_err	err = {{0}};
	cbllm_buf	out = {0};
	const char *list_cfg = "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"},"
		" {\"name\": \"default\", \"template\": \"D{{ messages|length }}\"}]}";
	const char *no_template = "{\"eos_token\": \"</s>\"}";
	const char *no_default = "{\"chat_template\": [{\"name\": \"x\", \"template\": \"y\"}]}";
	const char *bad_syntax = "{\"chat_template\": \"a\\n{% for %}\"}";

	TAP_OK(chat_load_from(no_template, strlen(no_template), NULL, 0, &c, &err) == CBLLM_OK && c == NULL,
		   "a config without chat_template gives no template and no error");
	TAP_OK(chat_load_from(list_cfg, strlen(list_cfg), NULL, 0, &c, &err) == CBLLM_OK && c != NULL,
		   "a list of named templates loads");
	ExpectRender("the list's \"default\" template is used", ChatRender(c, "[]", false, NULL, &out, &err), &out, &err, "D0");
	chat_free(c);
	c = NULL;
	expect_fail("a list without default", chat_load_from(no_default, strlen(no_default), NULL, 0, &c, &err), &err,
				"no \"default\"", NULL, NULL);
	expect_fail("a syntax error at load", chat_load_from(bad_syntax, strlen(bad_syntax), NULL, 0, &c, &err), &err,
				"chat template line 2: expected a variable name", NULL, NULL);
	TAP_OK(dir != NULL && fixture_write_text(dir, "tokenizer_config.json", "{\"chat_template\": \"config\", \"eos_token\": \"E\"}") &&
		   fixture_write_text(dir, "chat_template.jinja", "jinja {{ eos_token }}\n"), "write a model directory with both sources");
	TAP_OK(chat_load(dir, &c, &err) == CBLLM_OK && c != NULL, "chat_load reads the directory");
	ExpectRender("chat_template.jinja wins over the config, with the config's tokens",
				 ChatRender(c, "[]", false, NULL, &out, &err), &out, &err, "jinja E");
	chat_free(c);
	c = NULL;
	TAP_OK(chat_load("/nonexistent-dir-for-chat", &c, &err) == CBLLM_OK && c == NULL,
		   "a directory without tokenizer files has no template");
	expect_fail("render without a template", ChatRender(NULL, "[]", false, NULL, &out, &err), &err, "no chat template",
				NULL, NULL);
	cbllm_buf_free(&out);
	free(dir);
}

typedef struct thread_arg
{
	const cbllm_chat *chat;
	const char *msgs;
	const char *want;
	int			same;
} thread_arg;

/* Render the same messages 200 times, counting identical results. */
static void *
RenderMany(void *p)
{
	thread_arg *a = p;
	cbllm_buf	out = {0};
	cbllm_err	err;

	for (int i = 0; i < 200; i++)
		if (ChatRender(a->chat, a->msgs, true, NULL, &out, &err) == CBLLM_OK && out.len == strlen(a->want) &&
			memcmp(out.data, a->want, out.len) == 0)
			a->same++;
	cbllm_buf_free(&out);
	return NULL;
}

/* Four threads render one shared template at once. */
static void
TestThreads(const char *root)
{
	char		dir[1024];
	cbllm_chat *c = NULL;
	cbllm_err	err = {{0}};
	cbllm_buf	want = {0};
	pthread_t	th[4];
	thread_arg	args[4];
	const char *msgs = "[{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \"q\"},"
		" {\"role\": \"assistant\", \"content\": \"<think>r</think>a\"}, {\"role\": \"user\", \"content\": \"q2\"}]";
	int			same = 0;

	snprintf(dir, sizeof(dir), "%s/qwen3", root);
	if (chat_load(dir, &c, &err) != CBLLM_OK || c == NULL || ChatRender(c, msgs, true, NULL, &want, &err) != CBLLM_OK)
	{
		TAP_OK(false, "load qwen3 for the thread test: %s", err.msg);
		chat_free(c);
		return;
	}
	for (int i = 0; i < 4; i++)
	{
		args[i] = (thread_arg) {c, msgs, want.data, 0};
		pthread_create(&th[i], NULL, RenderMany, &args[i]);
	}
	for (int i = 0; i < 4; i++)
	{
		pthread_join(th[i], NULL);
		same += args[i].same;
	}
	TAP_OK(same == 800, "4 threads x 200 renders of one shared template: %d/800 identical", same);
	cbllm_buf_free(&want);
	chat_free(c);
}

static const char *tokenizers_root = "test/data/tokenizers";

/* Every test, run in a fixture root. */
static void
TestAll(void)
{
	TestVectors(tokenizers_root, "llama3_1");
	TestVectors(tokenizers_root, "qwen3");
	TestVectors(tokenizers_root, "gemma3");
	TestRenderCases();
	TestErrorCases();
	TestIllFormedUtf8();
	TestValidation();
	TestSources();
	TestThreads(tokenizers_root);
}

int
main(int argc, char **argv)
{
	static void (*const tests[]) (void) = {TestAll};

	if (argc > 1)
		tokenizers_root = argv[1];
	return run_in_fixture_root("chat", tests, 1);
}
