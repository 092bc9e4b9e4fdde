#!/usr/bin/env python3
"""Report import loops between the source files of Rust crates.

    python3 scripts/check_import_cycles.py CRATE/src [CRATE/src ...]

Each file is a node (src/lib.rs the crate root, src/a.rs or src/a/mod.rs the
module `a`, src/a/b.rs the module `a::b`). A file depends on another when its
code names an item of that module: `use crate::a::b::X`, a path
`crate::a::b::f()` or `super::x::Y` in an expression, resolved to the longest
module prefix that is a file. Not counted:
  - `pub use` lines: a re-export is a facade, not a dependency;
  - `mod x;` declarations (a parent owning a child is not an import);
  - test code: files named tests.rs / proptests.rs or under a `tests`
    directory, and everything from a `#[cfg(test)]` line to the end of a file
    (the project's convention puts the test module last);
  - comments.
A loop is a strongly connected component of two or more files. Exit status 1
when any crate has one, with the files of each loop and the edges inside it.
"""

import re
import sys
from pathlib import Path

PATH = re.compile(r"\b((?:crate|super|self)(?:::(?:super|[A-Za-z_][A-Za-z0-9_]*))+)")
USE_GROUP = re.compile(r"\buse\s+((?:crate|super|self)(?:::[A-Za-z_][A-Za-z0-9_]*)*)::\{([^;]*)\};", re.S)


def module_of(src: Path, f: Path) -> tuple:
    rel = f.relative_to(src).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] in ("lib", "main", "mod"):
        parts = parts[:-1]
    return tuple(parts)


def strip(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    cut = re.search(r"^\s*#\[cfg\(test\)\]", text, flags=re.M)
    if cut:
        text = text[: cut.start()]
    # re-exports are facades
    text = re.sub(r"\bpub(?:\([^)]*\))?\s+use\b[^;]*;", "", text, flags=re.S)
    return text


def expand_groups(text: str) -> list:
    """`use crate::a::{b, c::D}` -> ["crate::a::b", "crate::a::c::D"] (one level deep is enough here)."""
    out = []
    for m in USE_GROUP.finditer(text):
        base, inner = m.group(1), m.group(2)
        depth, item = 0, ""
        for ch in inner + ",":
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == "," and depth == 0:
                name = item.strip().split(" as ")[0].split("::{")[0].strip()
                if name and name != "self":
                    out.append(base + "::" + name)
                elif name == "self":
                    out.append(base)
                item = ""
            else:
                item += ch
    return out


def resolve(path: str, here: tuple, is_dir_module: bool, modules: set):
    segs = path.split("::")
    if segs[0] == "crate":
        cur, rest = (), segs[1:]
    else:
        # the module this file *is*; `self` is it, each `super` its parent
        cur = here
        rest = segs
        while rest and rest[0] in ("self", "super"):
            if rest[0] == "super":
                cur = cur[:-1]
            rest = rest[1:]
    best = cur
    for i in range(1, len(rest) + 1):
        cand = cur + tuple(rest[:i])
        if cand in modules:
            best = cand
        else:
            break
    return best


def tarjan(graph: dict) -> list:
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
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
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return out


def check(src: Path) -> int:
    files = {}
    for f in sorted(src.rglob("*.rs")):
        rel = f.relative_to(src)
        if f.name in ("tests.rs", "proptests.rs") or "tests" in rel.parts[:-1]:
            continue
        if "bin" in rel.parts[:-1]:
            continue
        files[module_of(src, f)] = f
    modules = set(files)
    graph = {m: set() for m in modules}
    for m, f in files.items():
        text = strip(f.read_text())
        paths = PATH.findall(text) + expand_groups(text)
        for p in paths:
            t = resolve(p, m, f.name == "mod.rs", modules)
            if t != m and t in modules and t != ():
                graph[m].add(t)
    loops = [c for c in tarjan(graph) if len(c) > 1]
    name = lambda m: str(files[m].relative_to(src.parent))
    if not loops:
        print(f"{src}: no import loop ({len(files)} files)")
        return 0
    print(f"{src}: {len(loops)} import loop(s)")
    for comp in loops:
        cs = set(comp)
        print(f"  loop of {len(comp)} files: " + ", ".join(sorted(name(m) for m in comp)))
        for m in sorted(comp):
            for t in sorted(graph[m] & cs):
                print(f"    {name(m)} -> {name(t)}")
    return 1


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    rc = 0
    for arg in sys.argv[1:]:
        rc |= check(Path(arg))
    return rc


if __name__ == "__main__":
    sys.exit(main())
