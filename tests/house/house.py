"""house.py - the house rules of ref/ and include/ that a reviewer would
otherwise check by eye (tests/test_house.sh runs it; CONTRIBUTING.md,
"Architecture"):

  cycles     the folder-level dependency graph of ref/ has no cycle. A file
             in folder A depends on folder B when it includes a header and
             uses a function declared there that a .c file in B defines:
             include/parity/x.h counts as the folder(s) of its
             implementation, a private header (ref/.../x.h) the same way,
             so `#include "parity/run_report.h"` for tp_print_report is an
             edge to ref/parallel/reports. Folders are the leaves of ref/
             except that ref/model/** is one (the model is one layer with one
             private header, gpt.h, its parts call each other through) and so
             is ref/coll/** (the MPI transport is the collectives' backend).
             Static inline functions and types make no edge: they have no
             implementation folder.
  lines      no file in ref/ or include/ over 600 lines, except the data
             files in LONG_DATA (data only: no code).
  functions  no function in ref/model, ref/parallel or ref/cli over 100
             lines (a brace counter: a definition starts at column 0, ends
             at the brace that closes it).

Every offender is printed; the exit status is 1 if there is any.
  python3 tests/house/house.py [REPO]
"""
import collections
import os
import re
import sys

MAX_LINES, MAX_FUNCTION = 600, 100
# Data only, allowed past MAX_LINES: the training text.
LONG_DATA = {"ref/data/corpus.txt"}
FUNCTION_DIRS = ("ref/model", "ref/parallel", "ref/cli")
SKIP_DIRS = {"__pycache__", "_build"}


def walk(top):
    for d, dirs, files in os.walk(top):
        dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS)
        for f in sorted(files):
            yield os.path.join(d, f)


def strip_comments(s):
    s = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), s, flags=re.S)
    return re.sub(r"//[^\n]*", "", s)


def node(path):
    """the folder a file counts in (see the docstring)"""
    parts = path.split("/")
    if parts[1] in ("model", "coll"):
        return "ref/" + parts[1]
    return "/".join(parts[:-1])


def cycles(sources, headers, text):
    defs = collections.defaultdict(set)  # function -> folders defining it
    for f in sources:
        if f.endswith(".c"):
            for m in re.finditer(r"^(?!static\b)[A-Za-z_][\w \t*]*?\b([A-Za-z_]\w*)\s*\([^;{]*\)\s*\{",
                                 text[f], re.M):
                defs[m.group(1)].add(node(f))
    decl = {h: set(re.findall(r"^(?!typedef|#|static)[A-Za-z_][\w \t*]*?\b([A-Za-z_]\w*)\s*\([^;{]*\)\s*;",
                              text[h], re.M)) for h in headers}

    def resolve(inc, src):
        for p in ("include/" + inc, "ref/" + inc, os.path.join(os.path.dirname(src), inc)):
            if os.path.exists(p):
                return os.path.normpath(p)
        return None

    edges, why = collections.defaultdict(set), {}
    for f in sources:
        a = node(f)
        ids = set(re.findall(r"\b[A-Za-z_]\w*\b", text[f]))
        for m in re.finditer(r'^\s*#\s*include\s*"([^"]+)"', text[f], re.M):
            h = resolve(m.group(1), f)
            for name in sorted(decl.get(h, set()) & ids):
                for b in defs.get(name, ()):
                    if b != a:
                        edges[a].add(b)
                        why.setdefault((a, b), "%s includes %s for %s" % (f, m.group(1), name))
    # Tarjan's strongly connected components
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v), on.add(v)
        for w in sorted(edges[v]):
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
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    out = []
    for comp in found:
        out.append("cycle between folders: " + ", ".join(comp))
        for a in comp:
            for b in sorted(edges[a] & set(comp)):
                out.append("    %s -> %s: %s" % (a, b, why[(a, b)]))
    return out


def long_files(paths):
    out = []
    for p in paths:
        if p in LONG_DATA:
            continue
        try:
            n = open(p, "rb").read().count(b"\n")
        except OSError:
            continue
        if n > MAX_LINES:
            out.append("%s: %d lines (at most %d)" % (p, n, MAX_LINES))
    return out


def long_functions(paths, text):
    out = []
    start = re.compile(r"^(?!typedef|struct|enum|static const|const)[A-Za-z_][^;=]*\(")
    for p in paths:
        if not p.endswith(".c") or not p.startswith(FUNCTION_DIRS):
            continue
        lines = text[p].split("\n")
        i = 0
        while i < len(lines):
            m = start.match(lines[i])
            if not m:
                i += 1
                continue
            j = i
            while j < len(lines) and ";" not in lines[j] and "{" not in lines[j]:
                j += 1
            if j >= len(lines) or "{" not in lines[j] or ";" in lines[j].split("{")[0]:
                i += 1
                continue
            depth, k = 0, j
            while k < len(lines):
                depth += lines[k].count("{") - lines[k].count("}")
                if depth <= 0:
                    break
                k += 1
            name = re.search(r"([A-Za-z_]\w*)\s*\(", lines[i])
            if k - i + 1 > MAX_FUNCTION:
                out.append("%s:%d: %s: %d lines (at most %d)" % (p, i + 1, name.group(1), k - i + 1,
                                                                  MAX_FUNCTION))
            i = k + 1
    return out


def main():
    os.chdir(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "../.."))
    paths = list(walk("ref")) + list(walk("include"))
    code = [p for p in paths if p.endswith((".c", ".h"))]
    text = {p: strip_comments(open(p, errors="replace").read()) for p in code}
    sources = [p for p in code if p.startswith("ref/")]
    headers = code
    failed = 0
    for title, found in (("cycles", cycles(sources, headers, text)),
                         ("lines", long_files(paths)),
                         ("functions", long_functions(code, text))):
        for line in found:
            print("%s: %s" % (title, line))
        n = sum(not line.startswith("    ") for line in found)
        print("%s %s" % ("ok     " if not n else "not ok ", title + (": %d offender%s" % (n, "" if n == 1 else "s") if n else "")))
        failed += bool(found)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
