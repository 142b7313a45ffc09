#!/usr/bin/env python3
"""constraint_test.py: the independent check of constrained decoding.

test_constraint (test/unit/test_constraint.c) writes every text it generated
under a constraint to DIR/*.jsonl, one object a line: kind ("regex",
"choices" or "json"), name, constraint (the regex; the choices separated by
newlines; the JSON schema as text), finish and text.  Here each text is
checked with Python's own tools: re.fullmatch for a regex, membership for
choices, json.loads and jsonschema (Draft 2020-12, formats checked) for a
schema.  One TAP line per file, constraint and tokenizer.

usage: constraint_test.py DIR
"""
import collections
import json
import re
import sys

import jsonschema


def valid(rec):
    """Why rec's text is not valid under its constraint, or None."""
    if rec["finish"] not in ("stop", "constraint"):
        return "finished %s" % rec["finish"]
    text = rec["text"]
    if rec["kind"] == "regex":
        return None if re.fullmatch(rec["constraint"], text) else "no full match"
    if rec["kind"] == "choices":
        return None if text in rec["constraint"].split("\n") else "not one of the choices"
    try:
        doc = json.loads(text)
    except ValueError as e:
        return "not JSON: %s" % e
    schema = json.loads(rec["constraint"])
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
    errors = list(validator.iter_errors(doc))
    return errors[0].message if errors else None


def main():
    if len(sys.argv) != 2:
        print("usage: constraint_test.py DIR", file=sys.stderr)
        return 2
    import glob
    files = sorted(glob.glob(sys.argv[1] + "/*.jsonl"))
    n = 0
    failed = 0
    if not files:
        print("not ok 1 - %s holds the generated texts (*.jsonl)" % sys.argv[1])
        print("1..1")
        return 1
    for path in files:
        groups = collections.OrderedDict()
        with open(path, encoding="utf-8") as f:
            for line in f:
                rec = json.loads(line)
                groups.setdefault((rec["kind"], rec["name"]), []).append(rec)
        source = path.rsplit("/", 1)[-1][:-len(".jsonl")]
        for (kind, name), recs in groups.items():
            bad = [(r, valid(r)) for r in recs]
            bad = [(r, why) for r, why in bad if why is not None]
            n += 1
            ok = not bad
            failed += not ok
            print("%s %d - %s %s %s: %d of %d texts valid (Python %s)" % (
                "ok" if ok else "not ok", n, source, kind, name, len(recs) - len(bad), len(recs),
                {"regex": "re.fullmatch", "choices": "membership",
                 "json": "json + jsonschema"}[kind]))
            for r, why in bad[:3]:
                print("#   %r: %s" % (r["text"], why))
    print("1..%d" % n)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
