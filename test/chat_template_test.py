#!/usr/bin/python3
"""Render many message lists through cbllm-cli chat --render and through Python Jinja2 set up as
transformers sets it up (test/tools/render_chat.py), and require the same bytes.

    test/chat_template_test.py [--cli bin/cbllm-cli] [--tokenizers test/data/tokenizers]
                               [--workdir DIR]

Templates: the three real ones of test/data/tokenizers (llama3_1, qwen3, gemma3), the
Llama-2-chat and Mistral-7B-Instruct-v0.2 templates (as their model cards' tokenizer_config
files publish them), and a template of this test that uses every construct the interpreter
supports (macros, namespaces, filters, tests, slices, string methods, whitespace control), given
as chat_template.jinja beside a config whose own template must lose.  Message lists: with and
without a system message, multi-turn, tool calls and tool results, a tools list, empty and null
content, Unicode, text that looks like template syntax or special tokens, Qwen3 reasoning in
assistant turns and enable_thinking true and false, roles that do not alternate, content given
as a list of parts, a long conversation, and seeded random conversations; each with
add_generation_prompt true and false.  Where Jinja2 raises, cbllm must fail too.  One TAP line
per template.
"""

import argparse
import json
import os
import random
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "tools"))
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


def make_model_dirs(workdir, tokenizers):
    """The template directories: the real ones and those this test writes."""
    dirs = {m: os.path.join(tokenizers, m) for m in ("llama3_1", "qwen3", "gemma3")}
    written = {
        "llama2": ({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
                    "chat_template": LLAMA2_TEMPLATE}, None),
        "mistral": ({"bos_token": {"content": "<s>", "special": True}, "eos_token": "</s>",
                     "chat_template": MISTRAL_TEMPLATE}, None),
        "features": ({"bos_token": "<s>", "eos_token": "</s>",
                      "chat_template": "the config's template must lose"}, FEATURES_TEMPLATE),
    }
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


TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city, in °C.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "e.g. \"Paris\""},
            "days": {"type": "integer", "minimum": 1, "maximum": 7}},
            "required": ["city"]}}},
    {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}},
]

TEXTS = ["Hello!", "What is 2+2?", "  padded with spaces  ", "line one\nline two\n\n", "",
         "日本語のテキスト", "مرحبا بالعالم", "emoji 👍🏽 👨‍👩‍👧", "tabs\tand\u2028separators",
         "looks like {{ template }} {% if %} syntax", "<|im_end|> <end_of_turn> </s> [INST]",
         "a \"quoted\" and 'single' \\ backslash", "Ünïcödé cômbining e\u0301",
         "<think>\nLet me think.\n</think>\n\nThe answer is 4.", "x" * 300]


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
    ]
    for label, kw in extra:
        for base in ("one user turn", "tool calls", "reasoning after last user", "system multi-turn"):
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
    print("1..%d" % n)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
