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

  modes      the model's arithmetic tests no parallel mode outside the style
             files: in ref/model, outside STYLE_PLACES (the styles, and where a
             replica's extents, placements and the engine's queries are
             computed), no conditional (if, while, ?:, ==, !=, &&, ||) reads a
             mode flag (MODE_FIELDS) or a PC_TP_* mode; and nowhere in ref/ or
             include/ is tp_mode compared with a bare number.
  state      no mode-prefixed field (MODE_PREFIXES) in the shared scratch or
             activation structs of ref/model/gpt.h and the headers it
             includes (STATE_STRUCTS): a mode's buffers are its style's or
             its part's, behind one pointer.
  builders   one parameter-table builder: nothing in ref/, include/ or
             tests/ names a param_table_build_* other than
             param_table_build_at (and param_table_build, the golden
             table, a call of it).

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
# Where the model may ask which parallel form it runs: the styles, and the
# files that compute a replica's extents, its parameters' placements and
# the engine's questions about them.
STYLE_PLACES = ("ref/model/styles/", "ref/model/state/extents.c", "ref/model/state/params.c",
                "ref/model/query.c")
MODE_FIELDS = ("tp_mode", "t2q", "row_linears", "ulysses", "expert_fold", "expert_tp", "cp_comm",
               "PC_TP_1D", "PC_TP_2D", "PC_TP_25D", "PC_TP_3D")
MODE_PREFIXES = ("moe_", "cp_", "ul_", "t2_", "row_", "sp_")
# The structs every unit and style share (an MoE layer's own part,
# units/moe.h, is the part's, not shared).
STATE_STRUCTS = ("gpt_scratch_t", "layer_acts_t", "attn_acts_t", "mlp_acts_t", "gpt_slot_t")
# Names that only look like a mode's: the golden kernels' per-row scratch.
NOT_MODES = {"row_scratch"}


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


def mode_tests(code, text):
    out = []
    field = re.compile(r"\b(%s)\b" % "|".join(MODE_FIELDS))
    cond = re.compile(r"\bif\b|\bwhile\b|\?|==|!=|&&|\|\|")
    bare = re.compile(r"tp_mode\s*(?:==|!=|<=|>=|<|>)\s*[0-9]")
    for p in code:
        for n, line in enumerate(text[p].split("\n"), 1):
            if bare.search(line):
                out.append("%s:%d: tp_mode against a bare number: %s" % (p, n, line.strip()))
            elif (p.startswith("ref/model/") and not p.startswith(STYLE_PLACES)
                  and field.search(line) and cond.search(line)):
                out.append("%s:%d: a mode test outside the style files: %s" % (p, n, line.strip()))
    return out


def mode_state(code, text):
    out = []
    for p in code:
        if not p.startswith("ref/model/") or not p.endswith(".h"):
            continue
        for m in re.finditer(r"typedef struct[^{]*\{(.*?)\}\s*(\w+)\s*;", text[p], re.S):
            if m.group(2) not in STATE_STRUCTS:
                continue
            for decl in m.group(1).split(";"):
                for name in re.findall(r"\*?\s*([A-Za-z_]\w*)\s*(?:\[[^\]]*\])?\s*(?:,|$)", decl):
                    if name.startswith(MODE_PREFIXES) and name not in NOT_MODES:
                        out.append("%s: %s.%s: a mode's field in a shared struct" % (p, m.group(2), name))
    return out


def builders(paths):
    out = []
    other = re.compile(r"\bparam_table_build_(?!at\b)\w+")
    for p in paths:
        # this checker and its test name the old builders on purpose
        if not p.endswith((".c", ".h", ".py", ".sh")) or p.startswith(("tests/house/",
                                                                          "tests/test_house.sh")):
            continue
        for n, line in enumerate(open(p, errors="replace").read().split("\n"), 1):
            m = other.search(line)
            if m:
                out.append("%s:%d: %s: a second parameter-table builder" % (p, n, m.group(0)))
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
                         ("functions", long_functions(code, text)),
                         ("modes", mode_tests(code, text)),
                         ("state", mode_state(code, text)),
                         ("builders", builders(paths + list(walk("tests"))))):
        for line in found:
            print("%s: %s" % (title, line))
        n = sum(not line.startswith("    ") for line in found)
        print("%s %s" % ("ok     " if not n else "not ok ", title + (": %d offender%s" % (n, "" if n == 1 else "s") if n else "")))
        failed += bool(found)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
