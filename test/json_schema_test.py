#!/usr/bin/python3
"""json_schema_test.py: the JSON Schema compiler (src/constrain/json_schema.c) checked
against Python's jsonschema, which shares no code with it.

For every fixture of test/data/json_schemas (README.md there):
  - the fixture itself agrees with jsonschema: its "valid" and "outside"
    documents are JSON valid under the schema, its "invalid" ones are not;
  - the regex agrees with the fixture (test_json_schema --match): it admits
    the "valid" documents and neither the "invalid" nor the "outside" ones;
  - 500 documents sampled from the regex's automaton (test_json_schema
    --sample: random walks) are UTF-8, JSON (json.loads) and valid under the
    schema (Draft 2020-12 validator with a format checker).

Formats: jsonschema's FormatChecker() checks date, uuid, ipv4 and email
(those that need no optional package).  Its "time" is draft 3's
("%H:%M:%S", no offset) and its "date-time" needs rfc3339-validator, which
is absent, so both are checked here as draft 2020-12 defines them, RFC 3339
full-time and date-time, by checkers written for this test (datetime for
the values, a regex for the shape).

Usage: test/json_schema_test.py --bin build/test/test_json_schema
Prints TAP ("ok N - ...", the plan "1..N" last); exit status 1 on failure.
"""
import argparse
import datetime
import importlib.metadata
import json
import os
import re
import subprocess
import sys

import jsonschema
from jsonschema import Draft202012Validator, FormatChecker

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "data", "json_schemas")

_TIME = re.compile(r"(\d\d):(\d\d):(\d\d)(\.\d+)?([Zz]|[+-](\d\d):(\d\d))\Z")


def rfc3339_time(s):
    """RFC 3339 full-time (partial-time and a required offset), no leap second."""
    if not isinstance(s, str):
        return True
    m = _TIME.match(s)
    if not m:
        return False
    if m.group(6) is not None and (int(m.group(6)) > 23 or int(m.group(7)) > 59):
        return False
    datetime.time(int(m.group(1)), int(m.group(2)), int(m.group(3)))  # raises when out of range
    return True


def rfc3339_date_time(s):
    """RFC 3339 date-time: full-date "T" full-time."""
    if not isinstance(s, str):
        return True
    if len(s) < 11 or s[10] not in "Tt" or not s[:10].isascii():
        return False
    datetime.date.fromisoformat(s[:10])
    return rfc3339_time(s[11:])


def format_checker():
    """FormatChecker() with draft 2020-12's time and date-time."""
    fc = FormatChecker()
    fc.checks("time", raises=ValueError)(rfc3339_time)
    fc.checks("date-time", raises=ValueError)(rfc3339_date_time)
    return fc


class Tap:
    """TAP lines, counted."""

    def __init__(self):
        self.n = 0
        self.failed = 0

    def ok(self, cond, what, diag=()):
        self.n += 1
        if not cond:
            self.failed += 1
        print("%s %d - %s" % ("ok" if cond else "not ok", self.n, what))
        for d in list(diag)[:10]:
            print("#   " + d)
        sys.stdout.flush()

    def done(self):
        print("1..%d" % self.n)
        return 1 if self.failed else 0


def problem(validator, text):
    """Why text is not a valid document (None when it is)."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        return "not JSON: %s" % e
    errors = list(validator.iter_errors(doc))
    if errors:
        return "invalid: %s at %s" % (errors[0].message, "/".join(map(str, errors[0].absolute_path)))
    return None


def check_lists(tap, name, fx, validator):
    """The fixture's lists against jsonschema."""
    bad = []
    counts = []
    for key, want_valid in (("valid", True), ("invalid", False), ("outside", True)):
        docs = fx.get(key, [])
        counts.append("%d %s" % (len(docs), key))
        for i, text in enumerate(docs):
            why = problem(validator, text)
            if (why is None) != want_valid:
                bad.append("%s[%d] %s: %s" % (key, i, why or "valid", text))
    tap.ok(not bad, "schema %s: fixture lists agree with jsonschema (%s)" % (name, ", ".join(counts)), bad)


def check_match(tap, name, path, fx, binary):
    """The regex against the fixture's lists (test_json_schema --match)."""
    r = subprocess.run([binary, "--match", path], capture_output=True, text=True)
    bad = []
    seen = 0
    if r.returncode != 0:
        bad.append("--match exited %d: %s" % (r.returncode, r.stderr.strip()))
    for line in r.stdout.splitlines():
        key, i, got = line.split()
        seen += 1
        if (got == "1") != (key == "valid"):
            bad.append("%s[%s] %s: %s" % (key, i, "rejected" if got == "0" else "accepted",
                                           fx[key][int(i)]))
    want = sum(len(fx.get(k, [])) for k in ("valid", "invalid", "outside"))
    if seen != want:
        bad.append("%d results for %d documents" % (seen, want))
    tap.ok(not bad, "schema %s: the regex admits exactly the valid documents of the fixture" % name, bad)


def check_samples(tap, name, path, binary, validator, n, seed):
    """n documents sampled from the regex, each valid."""
    r = subprocess.run([binary, "--sample", path, str(n), str(seed)], capture_output=True)
    bad = []
    if r.returncode != 0:
        bad.append("--sample exited %d: %s" % (r.returncode, r.stderr.decode(errors="replace").strip()))
    lines = r.stdout.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    if len(lines) != n:
        bad.append("%d documents for %d asked" % (len(lines), n))
    distinct = len(set(lines))
    longest = max((len(x) for x in lines), default=0)
    for raw in lines:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            bad.append("not UTF-8 (%s): %r" % (e, raw[:200]))
            continue
        why = problem(validator, text)
        if why is not None:
            bad.append("%s: %s" % (why, text[:300]))
    tap.ok(not bad, "schema %s: %d sampled documents valid (%d distinct, longest %d bytes)"
           % (name, len(lines), distinct, longest), bad)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True, help="build/test/test_json_schema")
    ap.add_argument("--fixtures", default=FIXTURES)
    ap.add_argument("-n", type=int, default=500, help="documents sampled per schema")
    ap.add_argument("--seed", type=int, default=20240601)
    args = ap.parse_args()

    tap = Tap()
    fc = format_checker()
    print("# jsonschema %s; formats checked: %s (time, date-time by this test's RFC 3339 checkers)"
          % (importlib.metadata.version("jsonschema"),
             ", ".join(f for f in ("date", "time", "date-time", "uuid", "ipv4", "email") if f in fc.checkers)))
    names = sorted(f for f in os.listdir(args.fixtures) if f.endswith(".json"))
    tap.ok(len(names) >= 10, "%d schema fixtures in %s" % (len(names), args.fixtures))
    for k, f in enumerate(names):
        path = os.path.join(args.fixtures, f)
        name = f[:-5]
        with open(path, encoding="utf-8") as fh:
            fx = json.load(fh)
        try:
            Draft202012Validator.check_schema(fx["schema"])
        except jsonschema.SchemaError as e:
            tap.ok(False, "schema %s: a valid Draft 2020-12 schema" % name, [e.message])
            continue
        validator = Draft202012Validator(fx["schema"], format_checker=fc)
        check_lists(tap, name, fx, validator)
        check_match(tap, name, path, fx, args.bin)
        check_samples(tap, name, path, args.bin, validator, args.n, args.seed + k)
    return tap.done()


if __name__ == "__main__":
    sys.exit(main())
