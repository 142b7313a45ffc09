#!/usr/bin/env python3
"""check_includes.py: hold the engine's folders to the include rule of src/README.md.

Reads the two tables of src/README.md (each folder and the folders it may use; the
files allowed more, with why), then every #include "..." of src/, bgworker/ and
tools/, and prints TAP lines:
  - every quoted include of src/ names a folder ("kv/block_manager.h") and a file
    that exists;
  - no file includes a folder its row (or an exception) does not allow;
  - the folders' include graph has no circle;
  - every static function of a .c or .cu file (src/, bgworker/, tools/, test/) is named in
    CamelCase (functions a header declares or defines take their module's snake_case prefix);
  - no C or CUDA source file (src/, bgworker/, tools/, test/) is over 1,000 lines;
and, as figures, the folders, the files of each, the includes that run upward
(against the rule) and the largest file.

usage: test/check_includes.py [--root DIR]     check the tree at DIR (default: this one)
       test/check_includes.py --self-test      also prove that the check fails on a
                                               planted wrong include, a planted circle, a
                                               planted snake_case static function and a
                                               planted file of 1,001 lines
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCE = re.compile(r"\.(c|h|inc|cu|cuh)$")
C_SOURCE = re.compile(r"\.(c|h|inc|cu|cuh|cc)$")
# a static function's definition, PostgreSQL's layout: the type on one line, the name at the
# start of the next
STATIC_DEF = re.compile(r"^static\s+(?:inline\s+)?(?:const\s+)?[\w\s*]+?\n(\w+)\(", re.M)
CAMEL = re.compile(r"^[A-Z][A-Za-z0-9]*$")
MAX_LINES = 1000


def read_tables(readme):
    """(allowed: folder -> set of folders, exceptions: file -> set of folders) from src/README.md."""
    allowed, exceptions = {}, {}
    section = None
    with open(readme, encoding="utf-8") as f:
        for line in f:
            if line.startswith("## "):
                section = "rule" if "may use" in line else "exceptions" if "Exceptions" in line else None
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not line.startswith("|") or len(cells) < 3 or set(cells[0]) <= set("-"):
                continue
            if section == "rule" and cells[0].startswith("`"):
                uses = cells[2]
                allowed[cells[0].strip("`")] = {u.strip() for u in uses.split(",") if u.strip()}
            elif section == "exceptions" and cells[0].startswith("`"):
                exceptions[cells[0].strip("`")] = {u.strip() for u in cells[1].split(",") if u.strip()}
    return allowed, exceptions


def folder_of(path, folders):
    """The folder of src/ that path (relative to src/) lies in: the longest that matches."""
    best = None
    for d in folders:
        if path.startswith(d + "/") and (best is None or len(d) > len(best)):
            best = d
    return best


def scan(root):
    """[(file relative to root, line number, included path)] for src/, bgworker/ and tools/."""
    out = []
    for top in ("src", "bgworker", "tools"):
        for dp, _, fn in os.walk(os.path.join(root, top)):
            for name in sorted(fn):
                if not SOURCE.search(name):
                    continue
                p = os.path.join(dp, name)
                with open(p, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                for m in INCLUDE.finditer(text):
                    out.append((os.path.relpath(p, root), text.count("\n", 0, m.start()) + 1, m.group(1)))
    return out


def circles(graph):
    """The strongly connected components of more than one folder (Tarjan)."""
    index, low, stack, on, comps = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return comps


def c_files(root):
    """(path relative to root, text) of every C and CUDA source of src/, bgworker/, tools/, test/."""
    for top in ("src", "bgworker", "tools", "test"):
        for dp, _, fn in os.walk(os.path.join(root, top)):
            for f in sorted(fn):
                if C_SOURCE.search(f):
                    path = os.path.join(dp, f)
                    with open(path, encoding="utf-8", errors="replace") as fh:
                        yield os.path.relpath(path, root), fh.read()


def check(root, tap):
    """Run every check on the tree at root; returns the number of failures."""
    allowed, exceptions = read_tables(os.path.join(root, "src", "README.md"))
    folders = sorted(allowed)
    src = os.path.join(root, "src")
    outside = {"bgworker": {"base", "api", "ipc"}, "tools": set(folders)}
    bad_names, upward, graph = [], [], {d: set() for d in folders}
    for rel, line, inc in scan(root):
        top = rel.split("/")[0]
        target = folder_of(inc, folders)
        if top == "src":
            own = folder_of(rel[len("src/"):], folders)
            if target is None or not os.path.isfile(os.path.join(src, inc)):
                # a header of the file's own folder must be named by its folder too
                bad_names.append(f"{rel}:{line}: \"{inc}\"")
                continue
        else:
            own = top
            if target is None or not os.path.isfile(os.path.join(src, inc)):
                continue        # the glue's and the tools' own headers, PostgreSQL's
        if target == own:
            continue
        if own in graph:
            graph[own].add(target)
        may = (allowed.get(own) if top == "src" else outside.get(own, set())) | exceptions.get(rel, set())
        if target not in may:
            upward.append(f"{rel}:{line}: includes {inc} ({own} may not use {target})")
    comps = circles(graph)
    sizes = []
    counts = {}
    for dp, _, fn in os.walk(src):
        d = os.path.relpath(dp, src)
        n = [f for f in fn if SOURCE.search(f)]
        if n:
            counts[d] = len(n)
        for f in n:
            with open(os.path.join(dp, f), encoding="utf-8", errors="replace") as fh:
                sizes.append((sum(1 for _ in fh), os.path.join("src", d, f)))
    unknown = sorted(set(counts) - set(folders))
    snake, long_files = [], []
    for rel, text in c_files(root):
        if rel.endswith((".c", ".cu")):
            snake += [f"{rel}: {n}" for n in STATIC_DEF.findall(text) if not CAMEL.match(n)]
        n_lines = text.count("\n")
        if n_lines > MAX_LINES:
            long_files.append(f"{rel}: {n_lines} lines")
    results = [
        (not bad_names, "every include of src/ names its folder and an existing file",
         bad_names),
        (not unknown, "every folder of src/ has a row in src/README.md", unknown),
        (not upward, "no file includes a folder the rule does not allow it (%d upward includes)"
         % len(upward), upward),
        (not comps, "the folders' includes have no circle (%d circles)" % len(comps),
         [" -> ".join(c) for c in comps]),
        (not snake, "every static function of a .c or .cu file is named in CamelCase (%d are not)"
         % len(snake), snake),
        (not long_files, "no C or CUDA source file is over %d lines (%d are)" % (MAX_LINES, len(long_files)),
         long_files),
    ]
    fails = 0
    for ok, name, detail in results:
        tap(ok, name)
        for d in detail[:20]:
            print("#   " + d)
        fails += not ok
    largest = max(sizes)
    print("# folders: %d; files (.c .h .inc .cu .cuh): %s" % (
        len(counts), ", ".join("%s %d" % (d, counts[d]) for d in sorted(counts))))
    print("# the largest file: %s, %d lines" % (largest[1], largest[0]))
    return fails


class Tap:
    def __init__(self):
        self.n = 0
        self.failed = 0

    def __call__(self, ok, name):
        self.n += 1
        self.failed += not ok
        print("%s %d - %s" % ("ok" if ok else "not ok", self.n, name))


def sources_only(folder, names):
    """copytree's ignore: every file but the C sources and the READMEs (the tables)."""
    return [n for n in names if os.path.isfile(os.path.join(folder, n))
            and not (C_SOURCE.search(n) or n == "README.md")]


def self_test(root, tap):
    """Plant a wrong include, then a circle the table allows, in copies of the tree: each must fail
    the check for that reason alone."""
    for what, path, line, expect in (
            ("a wrong include (chat uses kv)", "src/chat/jinja.c", '#include "kv/block_manager.h"\n',
             "upward includes"),
            ("a circle (kv, allowed sched by the table, uses it; sched uses kv)", "src/kv/kv_cache.c",
             '#include "sched/scheduler.h"\n', "circles"),
            ("a static function named in snake_case", "src/kv/kv_cache.c",
             "static int\nplanted_helper(void)\n{\n\treturn 0;\n}\n", "CamelCase"),
            ("a file of 1,001 lines", "tools/planted_long.c", "\n" * 1001, "lines")):
        tmp = tempfile.mkdtemp()
        try:
            for top in ("src", "bgworker", "tools", "test"):
                shutil.copytree(os.path.join(root, top), os.path.join(tmp, top), ignore=sources_only)
            with open(os.path.join(tmp, path), "a", encoding="utf-8") as f:
                f.write(line)
            if expect == "circles":
                readme = os.path.join(tmp, "src", "README.md")
                with open(readme, encoding="utf-8") as f:
                    text = f.read()
                with open(readme, "w", encoding="utf-8") as f:
                    # the kv row's allowed folders gain sched
                    f.write(re.sub(r"^(\| `kv` \|.*\| base, dtype) \|$", r"\1, sched |", text,
                                   flags=re.M))
            r = subprocess.run([sys.executable, __file__, "--root", tmp], capture_output=True, text=True)
            failed = [l for l in r.stdout.splitlines() if l.startswith("not ok")]
            tap(r.returncode != 0 and len(failed) == 1 and expect in failed[0],
                "the check fails on %s planted in %s, and only for its %s" % (what, path, expect))
        finally:
            shutil.rmtree(tmp)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    tap = Tap()
    check(a.root, tap)
    if a.self_test:
        self_test(a.root, tap)
    print("1..%d" % tap.n)
    sys.exit(1 if tap.failed else 0)


if __name__ == "__main__":
    main()
