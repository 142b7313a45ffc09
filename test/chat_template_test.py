#!/usr/bin/python3
"""Render many message lists through cbllm-cli chat --render and through Python Jinja2 set up as
transformers sets it up (test/tools/render_chat.py), and require the same bytes.

    test/chat_template_test.py [--cli bin/cbllm-cli] [--tokenizers test/data/tokenizers]
                               [--workdir DIR]

Templates: the three real ones of test/data/tokenizers (llama3_1, qwen3, gemma3), the
Llama-2-chat, Mistral-7B-Instruct-v0.2 and Llama-3.1-Instruct (tools, date header) templates
(as their model cards' tokenizer_config files publish them), gpt-oss's harmony template
(test/data/templates/openai-gpt-oss.jinja: developer messages, assistant "thinking", one tool
call per message, reasoning_effort, builtin_tools, model_identity), Gemma 4's (thinking channels,
tool declarations; read from test/data/llama-cpp-vocab/ggml-vocab-gemma-4.gguf's
tokenizer.chat_template), and a template of this test that uses every construct the interpreter
supports (macros, namespaces, filters, tests, slices, string methods, whitespace control), given
as chat_template.jinja beside a config whose own template must lose.  Message lists: with and
without a system message, multi-turn, tool calls and tool results, a tools list, empty and null
content, Unicode, text that looks like template syntax or special tokens, Qwen3 reasoning in
assistant turns and enable_thinking true and false, roles that do not alternate, content given
as a list of parts, a long conversation, and seeded random conversations; each with
add_generation_prompt true and false.  Then about 150 small templates, a construct or a few
each (whitespace control, literals, operators, filters, tests, methods, loops, macros, repr
and json of values).  Where Jinja2 raises, cbllm must fail too.  One TAP line per template,
one for the snippets.
"""

import argparse
import json
import os
import random
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "tools"))
import gguf_meta  # noqa: E402
import render_chat  # noqa: E402

# Llama-2-chat (meta-llama/Llama-2-7b-chat-hf tokenizer_config.json)
LLAMA2_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}"
    "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
    "{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}")

# Mistral-7B-Instruct-v0.2 (mistralai/Mistral-7B-Instruct-v0.2 tokenizer_config.json)
MISTRAL_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}")

# Llama-3.1-Instruct's template with tools and the date header (as its model card publishes it)
LLAMA31_TOOLS_TEMPLATE = """{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message + builtin tools #}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\\n" }}
{%- endif %}
{%- if builtin_tools is defined %}
    {{- "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") + "\\n\\n"}}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\\n\\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\\n\\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Custom tools are passed in a user message with some extra guidance #}
{%- if tools_in_user_message and not tools is none %}
    {#- Extract the first user message so we can plug it in here #}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
{%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\\n\\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\\n\\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\\n\\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\\n\\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}
            {{- "<|python_tag|>" + tool_call.name + ".call(" }}
            {%- for arg_name, arg_val in tool_call.arguments | items %}
                {{- arg_name + '="' + arg_val + '"' }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- endif %}
                {%- endfor %}
            {{- ")" }}
        {%- else  %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}
            {{- '{"name": "' + tool_call.name + '", ' }}
            {{- '"parameters": ' }}
            {{- tool_call.arguments | tojson }}
            {{- "}" }}
        {%- endif %}
        {%- if builtin_tools is defined %}
            {#- This means we're in ipython mode #}
            {{- "<|eom_id|>" }}
        {%- else %}
            {{- "<|eot_id|>" }}
        {%- endif %}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\\n\\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

# every construct the interpreter supports, in one template
FEATURES_TEMPLATE = r"""{#- a template of this test: each line uses other constructs -#}
{%- macro turn(role, text, sep='\n') -%}
<{{ role|upper }}>{{ sep }}{{ text|trim }}</{{ role }}>
{%- endmacro -%}
{%- set ns = namespace(users=0, chars=0, last_role=none) -%}
{%- for m in messages if m.role != 'tool' -%}
    {%- set ns.users = ns.users + (1 if m.role == 'user' else 0) -%}
    {%- set ns.chars = ns.chars + (m.content|string|length if m.content is string else 0) -%}
    {%- set ns.last_role = m.role -%}
{%- endfor -%}
[{{ messages|length }} messages, {{ ns.users }} from users, {{ ns.chars }} chars, last {{ ns.last_role }}]
{% if tools %}
  {%- for t in tools %}
tool {{ loop.index }}/{{ loop.length }}: {{ t.function.name if t.function is defined else t.name }}
{{ t|tojson(indent=2) }}
  {%- endfor %}
{% endif %}
{%- for m in messages %}
  {%- if m.content is none %}
(none from {{ m.role }})
  {%- elif m.content is string %}
{{ turn(m.role, m.content) }}
    {%- if '</think>' in m.content %} [reasoning {{ m.content.split('</think>')[0].split('<think>')[-1].strip()|length }}]{% endif %}
    {%- set words = m.content.split() %}
    {%- if words|length > 1 %} first={{ words|first }} last={{ words[-1] }} rev={{ m.content[::-1][:5] }}{% endif %}
  {%- else %}
{{ turn(m.role, m.content|selectattr('type', 'equalto', 'text')|map(attribute='text')|join(' ')) }}
  {%- endif %}
  {%- for tc in m.tool_calls|default([]) %}
    {%- set f = tc.function if tc.function is defined else tc %}
call {{ f.name }}({% if f.arguments is mapping %}{% for k, v in f.arguments|dictsort %}{{ k }}={{ v|tojson }}{{ ', ' if not loop.last }}{% endfor %}{% else %}{{ f.arguments }}{% endif %})
  {%- endfor %}
  {%- if loop.previtem is defined and loop.previtem.role == m.role %} (again {{ m.role }}){% endif %}
{%- endfor %}
{%+ raw %}{{ not rendered }}{% endraw %}
{%- if add_generation_prompt %}
<ASSISTANT>{% if enable_thinking is defined and enable_thinking is false %}<think></think>{% endif %}
{%- endif %}
"""


# small templates, one construct or a few each, rendered with SNIPPET_REQUEST
SNIPPETS = [
    "{% for i in range(5) %}{{ loop.cycle('a', 'b', 3) }}{% endfor %}",
    "{% for i in range(3) %}{% set outer = loop %}{% for j in 'xy' %}{{ outer.index }}{{ loop.index }}{% endfor %}{% endfor %}",
    "{{ 'a b c'.split(' ', 1) }}",
    "{{ ' a  b '.split(None, 1) }}",
    "{{ ' a  b '.rsplit(None, 1) }}",
    "{{ 'abc'.rsplit('b') }}",
    "{{ 'a\\tb'.expandtabs() if false }}ok",
    "{{ 10|string + 'x' }}",
    "{{ 3.0|int }} {{ '4.7'|int }} {{ 'x'|int(7) }} {{ '0x1A'|int }}",
    '{{ 1/3 }} {{ 2/3*3 }} {{ 1e300*1e10 }}',
    '{{ -0.0 }} {{ 5 % -3 }} {{ -5 // 3 }} {{ 2**-1 }} {{ 2**0.5 }}',
    "{{ 'abc'[5:] }}|{{ 'abc'[-5:2] }}|{{ [1,2,3][1:-1] }}|{{ [1,2,3,4,5][::2] }}|{{ [1,2,3,4,5][4:0:-2] }}",
    "{{ {'a':1}.items()|list }} {{ {'b':2, 'a':1}|dictsort(reverse=true) }}",
    "{{ [{'a':2},{'a':1}]|sort(attribute='a') }}",
    "{{ ['B','a','C']|sort }} {{ ['B','a','C']|sort(case_sensitive=true) }}",
    "{{ 'Hello'|reverse }} {{ [1,[2,3]]|first|string }}",
    '{% for a, b in [[1,2],[3,4]] %}{{ a }}{{ b }}{% endfor %}',
    "{% for x in {'k':1,'j':2} %}{{ x }}{% endfor %}",
    '{% set a, b = 1, 2 %}{{ a }}{{ b }}',
    "{% set t = (1, 'x') %}{{ t[1] }}{{ t|length }}{{ t }}",
    "{{ 'x' * 3 }}{{ [0] * 3 }}",
    '{{ none ~ true ~ 1.5 }}',
    "{{ 1 < 2 and 2 > 3 or 'z' }}",
    '{% if not none is none %}a{% else %}b{% endif %}',
    "{{ 'a' in ['a'] and 'b' not in {'a':1} }}",
    "{{ x|default }}|{{ false|default('d') }}|{{ false|default('d', true) }}",
    "{{ [1,2] is sequence }}{{ 'a' is iterable }}{{ 5 is iterable }}{{ {} is sequence }}",
    '{{ 1 is eq(1.0) }}{{ 2 is gt 1 }}{{ 2 is ge(3) }}',
    "{% macro m(x) %}[{{ x }}]{% endmacro %}{{ m('a') ~ m('b') }}{{ m() }}",
    '{% macro m(x) %}{{ y }}{% endmacro %}{% set y = 5 %}{{ m(1) }}',
    "{{ 'a,b'.split(',')|join('|') }}",
    "{{ [1, 'a', none]|join }}",
    "{{ {'a': {'b': [1, {'c': 'é'}]}}|tojson(indent=4) }}",
    '{{ [1,2]|tojson(indent=0) }}',
    "{{ 'x'|tojson }}{{ none|tojson }}{{ true|tojson }}",
    "{{ [1,2,2,'a','A']|unique|list }}",
    "{{ [3,1,2]|max }}{{ ['b','A']|min }}",
    "{{ 'hello world'.title() }} {{ 'HELLO'.capitalize() }} {{ 'aBc'.swapcase() if false }}",
    "{{ '  x  '|trim('x ') }}{{ 'xxyxx'.rstrip('x') }}",
    "{{ 'a\\n b\\n\\nc'|indent(3, true) }}",
    "{{ 'a\\n\\nb'|indent(2, blank=true) }}",
    '{{ \'one two\'|title }} {{ "o\'neil mc-d"|title }}',
    "{{ 'abc'.find('z') }}{{ 'abcb'.rfind('b') }}{{ 'aXbX'.count('X') }}",
    '{{ range(3)|list }}{{ range(1, 10, 3)|list }}{{ range(5, 0, -2)|list }}',
    '{{ namespace(a=1).a }}',
    '{% set ns = namespace() %}{% set ns.x = [1] %}{{ ns.x }}',
    '{{ loop is defined }}',
    '{% for i in range(3) %}{% for j in range(2) %}{{ loop.index }}{% endfor %}{{ loop.index }}|{% endfor %}',
    '{% for i in [] %}{% else %}E{{ i is defined }}{% endfor %}',
    "{{ [1,2,3]|select('odd')|list }}{{ [1,2,3]|reject('odd')|list }}{{ [1,2,3]|select('gt', 1)|list }}",
    "{{ [{'a':1},{'b':2}]|selectattr('a', 'defined')|list }}",
    "{{ [{'a':1},{'a':none}]|rejectattr('a', 'none')|list }}",
    "{{ ['1','2']|map('int')|sum }}",
    '{{ [1.5, 2]|sum }}',
    "{{ 0.5|round }} {{ 1.5|round }} {{ 2.675|round(2) }} {{ 3.14159|round(2, 'floor') }} {{ 7|round }}",
    "{{ 'ab' < 'b' }}{{ [1,2] < [1,3] }}{{ (1,2) == (1,2) }}",
    "{{ {'a':1} == {'a':1} }}{{ [1] == (1,) }}",
    "{{- '  x  ' -}}",
    'a {#- c -#} b',
    '{% raw -%}  x  {%- endraw %}',
    '  {%- if true %}x{% endif %}',
    'a\n  {%- if true -%}  \n  b\n  {%- endif %}\n',
    '{% if true %}\n  x\n{% endif %}\n',
    '{%- for m in [1,2] %}\n  {{ m }}\n{%- endfor %}',
    "{% set x = 'q' %}{% filter upper|trim %}  {{ x }} {% endfilter %}",
    '{% set s | upper %}ab{% endset %}{{ s }}',
    "{{ 'abc'.startswith('') }}{{ ''.split(',') }}{{ ''.split() }}",
    "{{ 'a'.join(['x']) }}{{ 'é'|length }}{{ 'é'|upper }}",
    "{{ '\\u00e9\\x41\\101\\N' }}",
    '{{ "a\\\\b" }}{{ \'it\'\'s\' if false }}x',
    '{{ 1_000 + 0.5e1 }}',
    "{{ [1,2,][1] }}{{ {'a':1,}['a'] }}",
    "{{ x.y if x is defined else 'u' }}",
    "{{ messages|length }}{{ messages[0].role }}{{ messages[-1]['content'] }}",
    "{% for m in messages %}{{ m.role }}:{{ m.content|default('-', true) }};{% endfor %}",
    "{{ messages|map(attribute='role')|join(',') }}",
    "{{ (messages|selectattr('role', 'equalto', 'user')|list)[0].content }}",
    '{{ messages[1:]|length }}{{ messages[::-1][0].role }}',
    '{{ add_generation_prompt }}{{ tools }}{{ documents }}{{ bos_token }}',
    '{{ 5|abs }}{{ -2.5|abs }}',
    '{{ -3 ** 2 }}{{ (-3) ** 2 }}',
    "{{ 2 * 3 + 4 // 3 - 1 }}{{ 'a' ~ 2 * 3 }}",
    '{{ not true == false }}',
    '{{ 1 if true else 2 if false else 3 }}',
    "{{ {'b':1,'a':2}|items|list }}",
    "{{ {'a':1}.get('b', 9) }}{{ {'a':1}.get('a') }}",
    "{{ 'a-b_c d'.title() }}",
    '{{ [3,2,1]|sort(reverse=true)|first }}',
    "{{ ['a', 'b']|reverse|join }}",
    "{{ 'Ab'.lower() == 'ab' }}",
    "{{ 'A'.isupper() }}{{ '12'.isdigit() }}{{ 'a1'.isalnum() }}{{ ' '.isspace() }}",
    "{{ '\\n'.join(['a','b']) }}",
    "{{ 'x'.ljust(3) if false }}k",
    "{{ strftime_now('%Y')|length }}",
    "{{ 'a\\r\\nb'.splitlines() }}",
    "{{ 'a\\r\\nb\\rc\\n\\x0bd'.splitlines(true) }}{{ 'x\\r\\n'.splitlines(keepends=1) }}{{ 'y\\r'.splitlines(0) }}",
    "{% for l in crlf.splitlines(true) %}[{{ l }}]{% endfor %}{{ crlf|indent(2) }}{{ crlf ~ '|' + crlf }}",
    "{{ crlf|trim }}|{{ crlf.rstrip('\\n') }}|{{ crlf.split('\\n') }}|{{ crlf|tojson }}|{{ [crlf] }}",
    '{{ [1e-7, 123456.789, 1e15, 1e16, 0.1, 1/7, 100.0, 2.5e-5, 12345678901234567890.0, 5e-324] }}',
    '{{ ["it\'s", \'say "hi"\', \'both \\\' "\', \'tab\\t\', \'nl\\n\', \'é\', \'\\x7f\', \'\\u2028\'] }}',
    "{{ {1: 'a', none: true, 2.5: [], 'k': {'n': none}} }}",
    "{{ {'a': 1}|tojson(ensure_ascii=true) }}{{ 'é😀'|tojson(ensure_ascii=true) }}",
    '{{ {1: 2, true: 3}|tojson if false }}x',
    '{{ 3 * 1.5 }} {{ 10 / 4 }} {{ 10 // 4.0 }} {{ 2 ** 62 }}',
    'x\n\t {% if true %}\ty{% endif %}',
    'x {% if true %}y{% endif %}',
    '{% if true %}a{% endif %}  \n  {% if true %}b{% endif %}',
    '{# c #}  {% if true %}a{% endif %}',
    "{{ 'a' }}   {% if true %}b{% endif %}",
    'a\n{%- raw %} r {% endraw -%}\n b',
    'line\n    {#- comment #}\nnext',
    '{%- set x = 1 -%}\n\n  {{ x }}  \n\n{%- set y = 2 %}\n  {{ y }}',
    '{% for i in range(2) -%}\n  {{ i }}\n{% endfor %}',
    '{% for i in range(2) %}\n  {{ i }}\n{%- endfor %}',
    '{% macro r(n) %}{% if n > 0 %}{{ n }}{{ r(n - 1) }}{% endif %}{% endmacro %}{{ r(3) }}',
    '{% macro m(a, b) %}{{ a }}{{ b }}{% endmacro %}{{ m(b=1, a=2) }}',
    '{% set l = [1, 2] %}{% set m = l + [3] %}{{ l }}{{ m }}',
    "{% for m in messages if m.role != 'system' %}{{ loop.index }}{{ m.role }}{% endfor %}",
    '{% for m in messages %}{% if loop.first %}F{% elif loop.last %}L{% else %}M{% endif %}{% endfor %}',
    '{{ messages[0] }}',
    '{{ messages|tojson }}',
    '{{ messages[2].content is none }}{{ messages[2].content|string }}',
    '{% set content = messages[1].content %}{% if content is string and content|length < 5 %}short{% endif %}',
    "{{ 'abc'|list|reverse|join('-') }}",
    "{{ 'A,B'.lower().split(',') }}",
    "{{ ('a' ~ 'b')|upper }}",
    '{{ -1|string }}',
    "{{ [1,2,3][10] }}|{{ {'a':1}['b'] }}|",
    '{{ messages[5] is defined }}',
    "{{ 'abcdef'[1:5:2] }}{{ 'héllo'[::-1] }}{{ 'héllo'[1:3] }}",
    '{{ [1,2,3][-1:] }}{{ [1,2,3][:-5] }}',
    "{{ 'a b'.split(' ') }}{{ 'a  b'.split(' ') }}{{ ',a,'.split(',') }}",
    "{{ 'aXbXc'.split('X', 0) }}{{ 'aXbXc'.rsplit('X', 0) }}",
    "{{ '  a b  '.rsplit(None, 1) }}",
    "{{ 'abc'.replace('', '-') }}{{ 'abc'.replace('', '-', 2) }}",
    "{{ 'aaa'.replace('a', 'b', 0) }}",
    "{{ 'Straße'.lower() }}{{ 'ǅ'.lower() if false }}ok",
    "{{ 'ÀÉÎ õü'.lower() }}{{ 'àéî'.upper() }}{{ 'привет мир'.title() }}{{ 'αβγ'.upper() }}",
    "{{ 'ŁÓDŹ'.lower() }}{{ 'Việt Nam'.upper() }}",
    "{{ 'x'|indent }}{{ 'a\\nb'|indent('> ') }}{{ 'a\\nb\\n'|indent(1, first=true) }}",
    "{{ [1,2,3]|length }}{{ {'a':1}|length }}{{ (1,2)|count }}",
    '{{ []|first }}|{{ []|last }}|{{ []|max }}|',
    "{{ 'abc' ~ [1] }}",
    "{{ [1] ~ {'a': 'b'} }}",
    "{% if [] %}t{% else %}f{% endif %}{% if {} %}t{% else %}f{% endif %}{% if '0' %}t{% endif %}{% if 0.0 %}t{% else %}f{% endif %}",
    '{% set x = none %}{{ x.y }}',
    '{% set ns = namespace(a=1) %}{{ ns.b }}|{{ ns }}',
    '{{ true and 5 }} {{ false or none }} {{ none or 0 }}',
    "{{ 'b' > 'a' > 'A' }}{{ 1 != 1.0 }}{{ none == none }}{{ none != false }}",
    "{{ 3 in [1,2,3] }}{{ '1' in [1] }}{{ 1.0 in [1] }}",
]
SNIPPET_REQUEST = {"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "hi"},
                                {"role": "assistant", "content": None}], "add_generation_prompt": True,
                   "crlf": "one\r\ntwo\rthree\r\n"}


def make_model_dirs(workdir, tokenizers):
    """The template directories: the real ones and those this test writes."""
    dirs = {m: os.path.join(tokenizers, m) for m in ("llama3_1", "qwen3", "gemma3")}
    written = {
        "llama2": ({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
                    "chat_template": LLAMA2_TEMPLATE}, None),
        "mistral": ({"bos_token": {"content": "<s>", "special": True}, "eos_token": "</s>",
                     "chat_template": MISTRAL_TEMPLATE}, None),
        "llama3_1_tools": ({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
                           "chat_template": LLAMA31_TOOLS_TEMPLATE}, None),
        "features": ({"bos_token": "<s>", "eos_token": "</s>",
                      "chat_template": "the config's template must lose"}, FEATURES_TEMPLATE),
        "gpt_oss": ({"bos_token": "<|startoftext|>", "eos_token": "<|return|>", "pad_token": "<|endoftext|>"},
                    GPT_OSS_TEMPLATE),
    }
    # Gemma 4's template (thinking channels, tool declarations), as llama.cpp's vocabulary test file
    # for gemma-4 carries it
    meta = gguf_meta.read_meta(os.path.join(HERE, "data", "llama-cpp-vocab", "ggml-vocab-gemma-4.gguf"))
    template, special = gguf_meta.chat_inputs(meta)
    written["gemma4"] = (special, template)
    for name, (cfg, jinja) in written.items():
        d = os.path.join(workdir, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(cfg, f, ensure_ascii=False)
        if jinja is not None:
            with open(os.path.join(d, "chat_template.jinja"), "w", encoding="utf-8") as f:
                f.write(jinja)
        dirs[name] = d
    return dirs


with open(os.path.join(HERE, "data", "templates", "openai-gpt-oss.jinja"), encoding="utf-8", newline="") as _f:
    GPT_OSS_TEMPLATE = _f.read()

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city, in °C.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "e.g. \"Paris\""},
            "days": {"type": "integer", "minimum": 1, "maximum": 7}},
            "required": ["city"]}}},
    {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}},
]

# tools that every template can render: each described (gpt-oss's template prints every description),
# with the parameter kinds its TypeScript rendering distinguishes
TOOLS_DESCRIBED = [
    TOOLS[0],
    {"type": "function", "function": {
        "name": "search", "description": "Search the notes.",
        "parameters": {"type": "object", "required": ["query"], "properties": {
            "query": {"type": "string", "description": "What to find."},
            "tags": {"type": "array", "items": {"type": "string"}, "nullable": True},
            "sizes": {"type": "array", "items": {"type": "object", "properties": {"w": {"type": "number"}}}},
            "mode": {"type": "string", "enum": ["fast", "exact"], "default": "fast"},
            "limit": {"type": "integer", "default": 10},
            "strict": {"type": "boolean"},
            "either": {"oneOf": [{"type": "string", "description": "a name"}, {"type": "number"}]},
            "kinds": {"type": ["string", "null"]},
            "filter": {"type": "object", "properties": {"from": {"type": "string"}}, "required": []}}}}},
    {"type": "function", "function": {"name": "now", "description": "The time.",
                                      "parameters": {"type": "object", "properties": {}}}},
]

TEXTS = ["Hello!", "What is 2+2?", "  padded with spaces  ", "line one\nline two\n\n", "",
         "日本語のテキスト", "مرحبا بالعالم", "emoji 👍🏽 👨‍👩‍👧", "tabs\tand\u2028separators",
         "looks like {{ template }} {% if %} syntax", "<|im_end|> <end_of_turn> </s> [INST]",
         "a \"quoted\" and 'single' \\ backslash", "Ünïcödé cômbining e\u0301",
         "<think>\nLet me think.\n</think>\n\nThe answer is 4.", "x" * 300,
         "SELECT 1;\r\nSELECT 2;", "lone\rcarriage\rreturns\r", "\r\n  CRLF around, \r inside  \r\n",
         "<think>\r\nCRLF thought\r\n</think>\r\n\r\nanswer\r\n"]


def tool_turns():
    """A tool-calling exchange: a call with structured and string arguments, and results."""
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "get_weather",
                                          "arguments": {"city": "Zürich", "days": 3, "scale": 1.5,
                                                        "flags": [True, None, {"x": 1.0}]}}},
        {"type": "function", "function": {"name": "now", "arguments": "{\"tz\": \"UTC\"}"}}]}
    return [call, {"role": "tool", "content": "{\"temp\": 21}"},
            {"role": "tool", "content": "<tool_response>12:00</tool_response>"}]


def cases():
    """(label, request) pairs: the message lists and variables every template gets."""
    u = lambda t: {"role": "user", "content": t}  # noqa: E731
    a = lambda t: {"role": "assistant", "content": t}  # noqa: E731
    s = lambda t: {"role": "system", "content": t}  # noqa: E731
    lists = [
        ("one user turn", [u("Hello!")]),
        ("system and user", [s("You are terse."), u("Hi")]),
        ("multi-turn", [u("Hi"), a("Hello."), u("How are you?")]),
        ("system multi-turn", [s("Be kind."), u("a"), a("b"), u("c"), a("d")]),
        ("empty contents", [s(""), u(""), a(""), u("")]),
        ("unicode", [u(TEXTS[5]), a(TEXTS[6]), u(TEXTS[7] + TEXTS[8] + TEXTS[12])]),
        ("template-looking text", [u(TEXTS[9]), a(TEXTS[10]), u(TEXTS[11])]),
        ("whitespace", [s(TEXTS[2]), u(TEXTS[3]), a("\n\nanswer\n"), u(" \t ")]),
        # Jinja2 keeps a variable's carriage returns byte for byte (only the template source's
        # line breaks are normalised)
        ("carriage returns", [s(TEXTS[17]), u(TEXTS[15]), a(TEXTS[16]), u(TEXTS[17])]),
        ("carriage returns in reasoning", [u(TEXTS[15]), a(TEXTS[18]), u(TEXTS[16]), a(TEXTS[18])]),
        ("tool calls", [s("Use tools."), u("Weather in Zürich?")] + tool_turns() + [a("It is 21 °C."), u("Thanks")]),
        ("tool call last", [u("Weather?")] + tool_turns()),
        ("reasoning before last user", [u("2+2?"), a(TEXTS[13]), u("and 3+3?")]),
        ("reasoning after last user", [u("2+2?"), a(TEXTS[13])]),
        ("reasoning_content key", [u("q"), {"role": "assistant", "content": "final", "reasoning_content": "\nthought\n"},
                                   u("q2"), {"role": "assistant", "content": "ok", "reasoning_content": "r2"}]),
        ("null assistant content", [u("call it"), {"role": "assistant", "content": None,
                                                   "tool_calls": tool_turns()[0]["tool_calls"]}]),
        ("two users in a row", [u("a"), u("b")]),
        ("assistant first", [a("I start."), u("ok")]),
        ("tool role only", [{"role": "tool", "content": "r"}]),
        ("content parts", [u([{"type": "text", "text": "Look:"}, {"type": "image"}, {"type": "text", "text": " this"}])]),
        ("system parts", [s([{"type": "text", "text": "Sys as parts"}]), u("hi")]),
        ("long text", [u(TEXTS[14]), a(TEXTS[14])]),
        ("long conversation", [s("long")] + [m for i in range(60) for m in (u("q%d" % i), a("a%d" % i))]),
        ("empty list", []),
        # gpt-oss's harmony template: developer instructions, reasoning in "thinking", one call
        ("developer message", [{"role": "developer", "content": "Answer in French."}, u("Hi")]),
        ("thinking field", [u("2+2?"), {"role": "assistant", "content": "4", "thinking": "Add them."},
                            u("and 3+3?"), {"role": "assistant", "content": "6", "thinking": "\nAdd again.\n"}]),
        ("thinking with a tool call", [u("Weather?"), {"role": "assistant", "content": "", "thinking": "Ask the tool.",
                                                       "tool_calls": tool_turns()[0]["tool_calls"][:1]},
                                       {"role": "tool", "content": "{\"temp\": 21}"}]),
        ("tool call then answer", [u("Weather?"), {"role": "assistant", "content": "Call it.",
                                                   "tool_calls": tool_turns()[0]["tool_calls"][1:]},
                                   {"role": "tool", "content": "12:00"}, a("It is noon."), u("ok")]),
        ("harmony markup in content", [u("q"), a("<|channel|>analysis<|message|>x<|end|>")]),
    ]
    rng = random.Random(20251202)
    for k in range(25):
        n = rng.randint(1, 9)
        msgs = [s(rng.choice(TEXTS))] if rng.random() < 0.4 else []
        for i in range(n):
            msgs.append((u if i % 2 == 0 else a)(rng.choice(TEXTS)))
        if rng.random() < 0.2:
            msgs[rng.randrange(len(msgs))]["role"] = rng.choice(["tool", "user", "assistant"])
        lists.append(("random %d" % k, msgs))
    out = []
    for label, msgs in lists:
        for agp in (False, True):
            out.append(("%s, generation prompt %s" % (label, agp), {"messages": msgs, "add_generation_prompt": agp}))
    extra = [
        ("tools list", {"tools": TOOLS}),
        ("enable_thinking false", {"enable_thinking": False}),
        ("enable_thinking true", {"enable_thinking": True}),
        ("tools and thinking off", {"tools": TOOLS, "enable_thinking": False}),
        ("tools in the system message", {"tools": TOOLS, "tools_in_user_message": False, "date_string": "2 Dec 2025"}),
        ("builtin tools", {"builtin_tools": ["brave_search", "code_interpreter", "wolfram_alpha"]}),
        ("reasoning_effort low", {"reasoning_effort": "low"}),
        ("reasoning_effort medium", {"reasoning_effort": "medium"}),
        ("reasoning_effort high and a tools list", {"reasoning_effort": "high", "tools": TOOLS_DESCRIBED}),
        ("browser and python", {"builtin_tools": ["browser", "python"], "model_identity": "You are terse."}),
    ]
    for label, kw in extra:
        for base in ("one user turn", "tool calls", "reasoning after last user", "system multi-turn",
                     "thinking field"):
            msgs = dict(lists)[base]
            for agp in (False, True):
                req = {"messages": msgs, "add_generation_prompt": agp}
                req.update(kw)
                out.append(("%s: %s, generation prompt %s" % (label, base, agp), req))
    return out


def reference(model_dir, request, cache):
    """Jinja2's rendering, or None when it raises."""
    if model_dir not in cache:
        cache[model_dir] = render_chat.load(model_dir)
    template, tokens = cache[model_dir]
    try:
        return render_chat.render(template, tokens, request)
    except Exception:  # a refusal: cbllm must refuse too
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", default=os.path.join(HERE, "..", "bin", "cbllm-cli"))
    ap.add_argument("--tokenizers", default=os.path.join(HERE, "data", "tokenizers"))
    ap.add_argument("--workdir", default=os.path.join(HERE, "..", "build", "test-work", "chat"))
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    dirs = make_model_dirs(args.workdir, args.tokenizers)
    all_cases = cases()
    cache = {}
    n = 0
    failed = 0
    for name, d in dirs.items():
        same = refused = 0
        bad = []
        for label, req in all_cases:
            want = reference(d, req, cache)
            p = subprocess.run([args.cli, "chat", "-m", d, "--render"], input=json.dumps(req).encode("utf-8"),
                               capture_output=True)
            got = p.stdout.decode("utf-8", "replace") if p.returncode == 0 else None
            if want is None and got is None and p.stderr.startswith(b"cbllm-cli: error: "):
                refused += 1
            elif want is not None and got == want:
                same += 1
            else:
                bad.append((label, want, got, p.stderr.decode("utf-8", "replace").strip()))
        n += 1
        ok = not bad and same > 0
        failed += not ok
        print("%s %d - %s: %d/%d cases identical to Jinja2 (%d refused by both)"
              % ("ok" if ok else "not ok", n, name, same + refused, len(all_cases), refused))
        for label, want, got, err in bad[:4]:
            print("#   %s: jinja2 %r" % (label, want if want is None else want[:160]))
            print("#   %s: cbllm  %r %s" % (label, got if got is None else got[:160], err))
    # the command's own refusals: one line "cbllm-cli: error: ..." naming the problem, exit status 1
    empty = os.path.join(args.workdir, "no-template")
    os.makedirs(empty, exist_ok=True)
    with open(os.path.join(empty, "tokenizer_config.json"), "w") as f:
        f.write('{"eos_token": "</s>"}')
    refusals = [
        (dirs["qwen3"], b"not json", "standard input must be one JSON object"),
        (dirs["qwen3"], b'{"messages": [1]}', "messages[0] is not an object"),
        (dirs["qwen3"], b'{"messages": [], "add_generation_prompt": 1}', "add_generation_prompt must be true or false"),
        (empty, b'{"messages": []}', "the model has no chat template"),
        (dirs["gemma3"], json.dumps({"messages": [{"role": "assistant", "content": "a"}]}).encode(),
         "chat template line 19: Conversation roles must alternate"),
    ]
    wrong = []
    for d, stdin, needle in refusals:
        p = subprocess.run([args.cli, "chat", "-m", d, "--render"], input=stdin, capture_output=True)
        err = p.stderr.decode("utf-8", "replace")
        if p.returncode != 1 or p.stdout or not err.startswith("cbllm-cli: error: ") or needle not in err:
            wrong.append((stdin, needle, p.returncode, err.strip()))
    n += 1
    failed += bool(wrong)
    print("%s %d - cbllm-cli chat refuses %d bad requests with one error line naming the problem"
          % ("not ok" if wrong else "ok", n, len(refusals)))
    for w in wrong:
        print("#   %r: wanted %r, exit %d, %r" % w)

    # the snippets: each in its own directory, one request
    same = refused = 0
    bad = []
    for i, text in enumerate(SNIPPETS):
        d = os.path.join(args.workdir, "snippets", str(i))
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump({"bos_token": "<s>", "chat_template": text}, f, ensure_ascii=False)
        want = reference(d, SNIPPET_REQUEST, cache)
        p = subprocess.run([args.cli, "chat", "-m", d, "--render"], input=json.dumps(SNIPPET_REQUEST).encode(),
                           capture_output=True)
        got = p.stdout.decode("utf-8", "replace") if p.returncode == 0 else None
        if want is None and got is None:
            refused += 1
        elif got == want:
            same += 1
        else:
            bad.append((text, want, got, p.stderr.decode("utf-8", "replace").strip()))
    n += 1
    failed += bool(bad)
    print("%s %d - snippets: %d/%d small templates identical to Jinja2 (%d refused by both)"
          % ("not ok" if bad else "ok", n, same + refused, len(SNIPPETS), refused))
    for text, want, got, err in bad[:6]:
        print("#   %r: jinja2 %r, cbllm %r %s" % (text, want, got, err))
    print("1..%d" % n)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
