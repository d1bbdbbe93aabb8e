"""The house rules, checked (CI runs this; docs/development.md lists them):

1. No library source file over 600 lines, and no function over 80 (lizard measures them).
   Tests, benchmarks' fixtures and generated files are exempt. The known exceptions below may
   only shrink: one that grows fails, and one that is back within the rule must be removed.
2. No build output tracked: wheels, objects, archives, shared objects, build folders.
3. No issue numbers, dates or machine names in library comments: a comment gives the reason;
   the run that measured it belongs in the commit message and docs/benchmarks.md.
4. Rooms: a file includes only its own folder and the folders ROOMS lets it see (tests
   included), and the includes inside a folder never run in a circle.
5. Every lock is seen by clang's thread-safety analysis: no bare std::mutex (shared,
   recursive, timed) or std::condition_variable declared outside base/mutex.h, which wraps
   them as Mutex and CondVar with the annotations.
6. The map is true to the code: every room in ROOMS with code in it has its row in
   docs/architecture.md's room table.

Usage: python scripts/house_rules.py [ROOT]   (ROOT: a git work tree, default this one)
Exit 0 when every rule holds; 1 with one line per breach, saying what to do.
"""
import os
import re
import subprocess
import sys

MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80

# path -> lines today. Split these; never raise a number.
KNOWN_LONG_FILES: dict = {}
# (path, function) -> lines today.
KNOWN_LONG_FUNCTIONS: dict = {}

# folder -> the folders its files may include besides their own (docs/architecture.md#rooms).
# A room sees the rooms beneath it, never one beside or above it: net/ (the client) never sees
# store/ (the engine); only server/, cli/ and what sits over everything do.
_LIB = ["base", "cuda", "rdma", "cache", "disk", "index", "store", "net", "server", "cluster",
        "events", "ops", "cli"]
ROOMS = {
    "base": set(),
    "cuda": {"base"},
    "rdma": {"base"},
    "cache": {"base", "cuda"},
    "disk": {"base"},
    "index": {"base", "disk"},
    "store": {"base", "cuda", "cache", "disk", "index"},
    "net": {"base", "cuda", "rdma", "cache"},
    "server": {"base", "cuda", "rdma", "cache", "disk", "index", "store", "net"},
    "cluster": {"base", "cuda", "rdma", "cache", "net"},
    "sim": {"base", "cuda", "rdma", "cache", "net", "cluster"},
    "events": {"base", "cuda", "cache", "store"},
    "ops": {"base", "cuda", "rdma", "cache", "disk", "index", "store", "net", "server"},
    "cli": set(_LIB) - {"cli"},
    "include": set(_LIB) - {"cli", "ops", "events"},  # the public facades over the libraries
    "python": set(_LIB) - {"cli", "ops", "events"},
    "bench": set(_LIB) | {"include", "sim"},
    "tests": set(_LIB) | {"include", "sim"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/([^"]+)"', re.M)
BARE_LOCK = re.compile(r"^\s*(?:static\s+|mutable\s+|inline\s+)*std::(mutex|shared_mutex|"
                       r"recursive_mutex|timed_mutex|condition_variable)\s+\w+", re.M)
LOCK_HOME = "base/mutex.h"
ROOM_ROW = re.compile(r"^\|\s*`([a-z_]+)/", re.M)

SOURCE = re.compile(r"\.(cc|h|cu|py)$")
EXEMPT = re.compile(r"(^|/)tests/|_test\.cc$|_fuzz\.cc$|(^|/)conftest\.py$|^scripts/")
BUILD_OUTPUT = re.compile(r"\.(whl|o|a|so|pyc|egg-info)$|(^|/)(build[^/]*|dist|__pycache__)/")
# What a comment may not say: our issue numbers, calendar dates, the machines a figure was
# taken on. Upstream references ("vLLM #55547") are fine: they say where a reason comes from.
FORBIDDEN = [
    (re.compile(r"\bissues? #?\d+", re.I), "an issue number"),
    (re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b"), "a date"),
    (re.compile(r"\b(H100|H200|A100|B200|GH200|GB200)\b"), "a machine (GPU model)"),
    (re.compile(r"\b\d+-core (VM|host|machine|box)\b", re.I), "a machine"),
    (re.compile(r"\bth(is|e) VM('s)?\b|\b(dev(elopment)?|CI) (VM|box)\b", re.I), "a machine"),
]


def tracked(root):
    out = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True,
                         check=True).stdout
    return [p for p in out.splitlines() if p]


def comment_lines(path, text):
    """(line number, comment text) for each comment line of a C++ or Python file."""
    python = path.endswith(".py")
    in_block = False
    for n, line in enumerate(text.splitlines(), 1):
        if python:
            i = line.find("#")
            if i >= 0 and line[:i].count('"') % 2 == 0 and line[:i].count("'") % 2 == 0:
                yield n, line[i + 1:]
            continue
        if in_block:
            end = line.find("*/")
            yield n, line if end < 0 else line[:end]
            in_block = end < 0
            continue
        i = line.find("//")
        if i >= 0 and line[:i].count('"') % 2 == 0:
            yield n, line[i + 2:]
        j = line.find("/*")
        if j >= 0 and (i < 0 or j < i) and line[:j].count('"') % 2 == 0:
            end = line.find("*/", j + 2)
            yield n, line[j + 2:] if end < 0 else line[j + 2:end]
            in_block = end < 0


def long_functions(root, files):
    """(path, function name, lines) for each function over MAX_FUNCTION_LINES."""
    try:
        import lizard
    except ImportError:
        sys.exit("house-rules: the lizard package is missing (scripts/tools-env.sh installs it)")
    for path in files:
        info = lizard.analyze_file(os.path.join(root, path))
        for f in info.function_list:
            if f.length > MAX_FUNCTION_LINES:
                yield path, f.name if path.endswith(".py") else f.long_name.split("(")[0], \
                    f.length


def room_of(path):
    parts = path.split("/")
    if parts[0] == "python" and len(parts) > 1 and parts[1] == "src":
        return "python"
    return parts[0] if parts[0] in ROOMS else None


def room_breaches(root, files):
    """Includes that reach a room this one may not see, and circles inside a room."""
    breaches, graph = [], {}
    for p in files:
        room = room_of(p)
        if room is None or not re.search(r"\.(cc|h|cu)$", p):
            continue
        with open(os.path.join(root, p), encoding="utf-8", errors="replace") as f:
            text = f.read()
        for m in INCLUDE.finditer(text):
            target = m.group(1)
            line = text.count("\n", 0, m.start()) + 1
            if target == room or (room == "python" and target == "python"):
                graph.setdefault(p, []).append(f"{target}/{m.group(2)}")
            elif target == "ecstore" and room in ("include", "bench", "tests", "python"):
                continue  # include/ecstore/*.h, as an engine includes them
            elif target in ROOMS and target not in ROOMS[room]:
                breaches.append(f"{p}:{line}: includes {target}/{m.group(2)}, a room {room}/ "
                                "may not see: move the code to the room that owns it, or the "
                                "shared part down")
    state = {}

    def visit(node, stack):
        state[node] = 1
        for nxt in graph.get(node, []):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt):] + [nxt] if nxt in stack else [node, nxt]
                breaches.append(f"{node}: includes run in a circle: {' -> '.join(cycle)}: "
                                "break it with a forward declaration or a smaller header")
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return breaches


def bare_locks(root, files):
    """Mutexes and condition variables the thread-safety analysis cannot see."""
    out = []
    for p in files:
        if p == LOCK_HOME or not re.search(r"\.(cc|h|cu)$", p):
            continue
        with open(os.path.join(root, p), encoding="utf-8", errors="replace") as f:
            text = f.read()
        for m in BARE_LOCK.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            what = "CondVar" if m.group(1) == "condition_variable" else "Mutex"
            out.append(f"{p}:{line}: a bare std::{m.group(1)}: use {LOCK_HOME}'s {what}, and "
                       "mark what it guards GUARDED_BY and its helpers REQUIRES")
    return out


def unmapped_rooms(root, files):
    """Rooms with code that docs/architecture.md's room table leaves out."""
    path = os.path.join(root, "docs", "architecture.md")
    if not os.path.isfile(path):
        return []
    with open(path, encoding="utf-8") as f:
        mapped = set(ROOM_ROW.findall(f.read()))
    with_code = {room_of(p) for p in files if re.search(r"\.(cc|h|cu)$", p)}
    return [f"docs/architecture.md: the room table has no row for {room}/: say what lives "
            "there, its target and what it sees" for room in sorted(with_code - {None})
            if room not in mapped and room not in ("bench", "tests", "python")]


def check(root):
    breaches = []
    files = tracked(root)
    for p in files:
        if BUILD_OUTPUT.search(p):
            breaches.append(f"{p}: build output is tracked; `git rm --cached` it (.gitignore "
                            "keeps it out)")
    library = [p for p in files if SOURCE.search(p) and not EXEMPT.search(p)
               and os.path.isfile(os.path.join(root, p))]
    seen_files = set()
    for p in library:
        with open(os.path.join(root, p), encoding="utf-8", errors="replace") as f:
            text = f.read()
        lines = text.count("\n")
        known = KNOWN_LONG_FILES.get(p)
        if known is not None:
            seen_files.add(p)
            if lines > known:
                breaches.append(f"{p}: {lines} lines, more than its known {known}: split it, "
                                "do not grow it")
            elif lines <= MAX_FILE_LINES:
                breaches.append(f"{p}: {lines} lines, within the rule: remove it from "
                                "KNOWN_LONG_FILES in scripts/house_rules.py")
        elif lines > MAX_FILE_LINES:
            breaches.append(f"{p}: {lines} lines, over {MAX_FILE_LINES}: split it by what it "
                            "owns (state with its code)")
        for n, comment in comment_lines(p, text):
            for pattern, what in FORBIDDEN:
                m = pattern.search(comment)
                if m:
                    breaches.append(f"{p}:{n}: a comment names {what} ({m.group(0)!r}): give "
                                    "the reason; figures go to docs/benchmarks.md")
    seen_functions = set()
    for p, name, lines in long_functions(root, library):
        known = KNOWN_LONG_FUNCTIONS.get((p, name))
        if known is None:
            breaches.append(f"{p}: {name} has {lines} lines, over {MAX_FUNCTION_LINES}: split "
                            "it")
            continue
        seen_functions.add((p, name))
        if lines > known:
            breaches.append(f"{p}: {name} has {lines} lines, more than its known {known}: "
                            "split it, do not grow it")
    for key in KNOWN_LONG_FUNCTIONS.keys() - seen_functions:
        if key[0] in library:
            breaches.append(f"{key[0]}: {key[1]} is within {MAX_FUNCTION_LINES} lines or gone: "
                            "remove it from KNOWN_LONG_FUNCTIONS in scripts/house_rules.py")
    breaches += room_breaches(root, files)
    breaches += bare_locks(root, files)
    breaches += unmapped_rooms(root, files)
    for p in KNOWN_LONG_FILES.keys() - seen_files:
        if os.path.isdir(os.path.join(root, os.path.dirname(p))):
            breaches.append(f"{p}: gone: remove it from KNOWN_LONG_FILES in "
                            "scripts/house_rules.py")
    return breaches, len(library)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))
    breaches, checked = check(root)
    for b in breaches:
        print(b)
    if breaches:
        print(f"house-rules: {len(breaches)} breaches in {checked} library files")
        sys.exit(1)
    print(f"house-rules: {checked} library files within {MAX_FILE_LINES} lines and functions "
          f"within {MAX_FUNCTION_LINES} (known exceptions not grown), no build output "
          "tracked, no issue, date or machine in a comment, no include outside its rooms, "
          "every lock annotated, every room on the map")


if __name__ == "__main__":
    main()
