#!/usr/bin/python3
"""Render a chat template the way transformers' apply_chat_template(tokenize=False) does.

    test/tools/render_chat.py DIR < request.json

DIR holds tokenizer_config.json (and chat_template.jinja, which wins when present).
The request is one JSON object {"messages": [...], "add_generation_prompt": bool, ...};
its other keys are template variables.  The environment is Jinja2's
ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and the loopcontrols
extension, a tojson filter that is json.dumps(ensure_ascii=False, ...), and the globals
raise_exception and strftime_now; the variables are the config's special tokens that
are set, tools and documents (None), add_generation_prompt, messages, then the
request's keys.  Prints the prompt with nothing added; on a template error prints
"render_chat: error: ..." to standard error and exits 1.
"""

import json
import os
import sys
from datetime import datetime

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

TOKEN_KEYS = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]


def token_text(v):
    """A special token's text: a string, or an object's "content"."""
    if isinstance(v, dict):
        v = v.get("content")
    return v if isinstance(v, str) else None


def load(model_dir):
    """The template text and the special-token variables of a model directory."""
    with open(os.path.join(model_dir, "tokenizer_config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    template = cfg.get("chat_template")
    if isinstance(template, list):
        template = next(t["template"] for t in template if t["name"] == "default")
    jinja_path = os.path.join(model_dir, "chat_template.jinja")
    if os.path.exists(jinja_path):
        with open(jinja_path, encoding="utf-8", newline="") as f:
            template = f.read()
    tokens = {}
    for k in TOKEN_KEYS:
        t = token_text(cfg.get(k))
        if t is not None:
            tokens[k] = t
    extra = cfg.get("additional_special_tokens")
    if extra:
        tokens["additional_special_tokens"] = [token_text(t) for t in extra]
    return template, tokens


def render(template, tokens, request):
    """Render as transformers does."""
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    compiled = env.from_string(template)
    variables = dict(tokens)
    variables.update(tools=None, documents=None,
                     add_generation_prompt=bool(request.get("add_generation_prompt", False)))
    variables.update(request)
    return compiled.render(**variables)


def main():
    if len(sys.argv) != 2:
        sys.stderr.write("usage: render_chat.py DIR < request.json\n")
        return 2
    request = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    template, tokens = load(sys.argv[1])
    try:
        out = render(template, tokens, request)
    except Exception as e:  # every template failure is a refusal here
        sys.stderr.write("render_chat: error: %s: %s\n" % (type(e).__name__, e))
        return 1
    sys.stdout.buffer.write(out.encode("utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
