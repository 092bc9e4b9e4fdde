#!/usr/bin/env python3
"""Report import loops, and imports that run up a declared layer order,
between the source files of Rust crates and of Python script folders.

    python3 scripts/check_import_cycles.py [--layers FILE] DIR [DIR ...]

DIR is a Rust crate's source folder (CRATE/src) or a folder of Python
scripts (scripts/gpu). Each file is a node.

Rust: src/lib.rs (or main.rs) is the crate root, src/a.rs or src/a/mod.rs the
module `a`, src/a/b.rs the module `a::b`. A file depends on another when its
code names an item of that module: a `use` (re-exports, `pub use`, included:
a facade depends on what it re-exports), a path `crate::a::b::f()`,
`super::x::Y` or `child::g()` in an expression, resolved to the longest
module prefix that is a file. A name that module re-exports (`pub use
x::Y;`, `pub use x::{Y, Z as W};`) is followed to the file that defines it,
so `use crate::client::Session` depends on client/session.rs when
client/mod.rs re-exports it from there (and client/mod.rs itself depends on
client/session.rs); `crate::m!` of a `#[macro_export]` macro is the file
that defines it. Not counted:
  - `mod x;` declarations (a parent owning a child is not an import);
  - test code: files named tests.rs / proptests.rs or under a `tests` or
    `bin` directory, and everything from a `#[cfg(test)]` line to the end of
    a file (the project's convention puts the test module last);
  - comments and string contents.

Python: every *.py file, and every file without an extension whose first
line names python, is the module of its name. A file depends on a sibling
when it imports it, anywhere in the file (`import x`, `import x as y`,
`from x import y`, `from . import x`, `from .x import y`).

A loop is a strongly connected component of two or more files.

Layers (--layers, default scripts/import_layers.txt beside this script): for
each folder, its top-level modules in order, one layer per line, top first.
A module may import a module in its own layer or in any layer below it; an
import from a lower layer to a higher one is reported. The crate root
(lib.rs) is above every layer. A top-level module of a folder with layers
that is in none is reported too, so a new module must be given its place.

Exit status 1 when any folder has a loop, an upward import or an unplaced
module; each is printed with the files and edges involved.
"""

import ast
import re
import sys
from pathlib import Path

DEFAULT_LAYERS = Path(__file__).with_name("import_layers.txt")

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
PATH = re.compile(r"(?<![A-Za-z0-9_:$])((?:" + IDENT + r")(?:::(?:" + IDENT + r"))+)")
USE = re.compile(r"(?<![A-Za-z0-9_])(pub(?:\s*\([^)]*\))?\s+)?use\s+([^;]*);", re.S)


# ---------------------------------------------------------------- layers file


def read_layers(path: Path) -> dict:
    """`[folder]` then one layer per line, top first; `#` starts a comment.
    Returns {resolved folder: [[module, ...], ...]}."""
    out, cur = {}, None
    if not path.exists():
        return out
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("[") and line.endswith("]"):
            key = (Path.cwd() / line[1:-1].strip()).resolve()
            cur = out.setdefault(key, [])
            continue
        if cur is None:
            sys.exit(f"{path}:{n}: a layer before any [folder] line")
        cur.append(line.split())
    return out


# ---------------------------------------------------------------- Rust


def module_of(src: Path, f: Path) -> tuple:
    rel = f.relative_to(src).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] in ("lib", "main", "mod"):
        parts = parts[:-1]
    return tuple(parts)


TOKEN = re.compile(
    r"""(?P<comment>//[^\n]*|/\*.*?\*/)"""
    r"""|(?P<raw>b?r(?P<hashes>#*)".*?"(?P=hashes))"""
    r"""|(?P<string>b?"(?:\\.|[^"\\])*")"""
    r"""|(?P<char>b?'(?:\\.|\\u\{[0-9a-fA-F]+\}|[^'\\])')""",
    re.S,
)


def strip(text: str) -> str:
    """The code without comments, with empty strings and blank characters,
    cut at the first `#[cfg(test)]`."""
    text = text.replace("$crate", "crate")

    def blank(m):
        if m.group("comment"):
            return " "
        if m.group("char"):
            return "' '"
        return '""'

    text = TOKEN.sub(blank, text)
    cut = re.search(r"^\s*#\[cfg\(test\)\]", text, flags=re.M)
    if cut:
        text = text[: cut.start()]
    return text


def use_tree(tree: str, prefix: list) -> list:
    """`a::{b, c::{D, E as F}, self}` -> [(path segments, bound name), ...]."""
    tree = tree.strip()
    out = []
    # split off the leading path up to a `{` or the end
    brace = tree.find("{")
    if brace < 0:
        name = tree
        alias = None
        m = re.match(r"^(.*?)\s+as\s+(" + IDENT + r")$", name, re.S)
        if m:
            name, alias = m.group(1), m.group(2)
        segs = [s.strip() for s in name.split("::") if s.strip()]
        if segs and segs[-1] == "self":
            segs = segs[:-1]
        full = prefix + segs
        if full:
            bound = alias or (full[-1] if segs else None)
            out.append((full, None if bound in ("*", "_") else bound))
        return out
    head = tree[:brace].rstrip().rstrip(":").strip()
    inner = tree[brace + 1 : tree.rfind("}")]
    base = prefix + [s.strip() for s in head.split("::") if s.strip()]
    depth, item = 0, ""
    for ch in inner + ",":
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            if item.strip() == "self":
                if base:
                    out.append((base, base[-1]))
            elif item.strip():
                out.extend(use_tree(item, base))
            item = ""
        else:
            item += ch
    return out


INLINE_MOD = re.compile(r"\bmod\s+(" + IDENT + r")\s*\{")


def inline_modules(text: str) -> list:
    """[(start, end, name)] of each `mod name { ... }` written inside a file."""
    spans = []
    for m in INLINE_MOD.finditer(text):
        depth, i = 0, m.end() - 1
        while i < len(text):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    break
            i += 1
        spans.append((m.start(), i, m.group(1)))
    return spans


def inside(spans: list, pos: int) -> tuple:
    """The inline modules, outermost first, that enclose a position."""
    return tuple(name for start, end, name in spans if start <= pos <= end)


class Crate:
    def __init__(self, src: Path):
        self.src = src
        self.files = {}
        for f in sorted(src.rglob("*.rs")):
            rel = f.relative_to(src)
            if f.name in ("tests.rs", "proptests.rs") or "tests" in rel.parts[:-1]:
                continue
            if "bin" in rel.parts[:-1]:
                continue
            if rel == Path("main.rs") and (src / "lib.rs").exists():
                continue  # the binary: another crate, which uses the library by its name
            self.files[module_of(src, f)] = f
        self.modules = set(self.files)
        self.text = {m: strip(f.read_text()) for m, f in self.files.items()}
        # module -> {name it re-exports: absolute path segments}
        self.reexports = {m: {} for m in self.modules}
        self.uses = {m: [] for m in self.modules}
        self.spans = {m: inline_modules(text) for m, text in self.text.items()}
        # `#[macro_export]` puts a macro at the crate root: `crate::name!` is
        # the file that defines it.
        for m, text in self.text.items():
            for x in re.finditer(r"#\[macro_export\][^\n]*\n(?:\s*#\[[^\n]*\n)*\s*macro_rules!\s*(" + IDENT + ")", text):
                self.reexports.setdefault((), {}).setdefault(x.group(1), list(m) + [x.group(1)])
        for m, text in self.text.items():
            for u in USE.finditer(text):
                public = bool(u.group(1))
                scope = inside(self.spans[m], u.start())
                for segs, bound in use_tree(u.group(2), []):
                    absolute = self.absolute(segs, m + scope)
                    if absolute is None:
                        continue
                    self.uses[m].append(("use " + "::".join(segs), absolute))
                    if public and bound and not scope:
                        self.reexports[m][bound] = absolute

    def absolute(self, segs: list, here: tuple):
        """The path from the crate root, or None for an outside crate."""
        segs = [s for s in segs if s]
        if not segs:
            return None
        if segs[0] == "crate":
            return list(segs[1:])
        if segs[0] in ("self", "super"):
            cur = list(here)
            rest = list(segs)
            while rest and rest[0] in ("self", "super"):
                if rest[0] == "super":
                    cur = cur[:-1]
                rest = rest[1:]
            return cur + rest
        if here + (segs[0],) in self.modules:
            return list(here) + segs
        return None  # std, core, another crate, a local item (a type, a variant)

    def resolve(self, path: list, seen=None) -> tuple:
        """The file (module) that defines what an absolute path names."""
        best, i = (), 0
        for k in range(1, len(path) + 1):
            if tuple(path[:k]) in self.modules:
                best, i = tuple(path[:k]), k
            else:
                break
        if i < len(path):
            target = self.reexports[best].get(path[i])
            seen = seen or set()
            if target is not None and (best, path[i]) not in seen:
                seen.add((best, path[i]))
                return self.resolve(target + path[i + 1 :], seen)
        return best

    def graph(self) -> tuple:
        """({file: {files it depends on}}, {(file, file): the first path that made the edge})."""
        graph = {m: set() for m in self.modules}
        why = {}
        for m, text in self.text.items():
            paths = list(self.uses[m])
            rest = USE.sub(lambda u: " " * len(u.group(0)), text)
            for found in PATH.finditer(rest):
                p = found.group(1)
                a = self.absolute(p.split("::"), m + inside(self.spans[m], found.start()))
                if a is not None:
                    paths.append((p, a))
            for said, p in paths:
                t = self.resolve(p)
                if t != m and t in self.modules:
                    graph[m].add(t)
                    why.setdefault((m, t), said)
        return graph, why

    def name(self, m: tuple) -> str:
        return str(self.files[m].relative_to(self.src.parent))

    @staticmethod
    def top(m: tuple):
        return m[0] if m else None


# ---------------------------------------------------------------- Python


class PyFolder:
    def __init__(self, src: Path):
        self.src = src
        self.files = {}
        for f in sorted(src.iterdir()):
            if not f.is_file():
                continue
            if f.suffix == ".py":
                self.files[f.stem] = f
            elif not f.suffix:
                with f.open("rb") as fh:
                    first = fh.readline()
                if first.startswith(b"#!") and b"python" in first:
                    self.files[f.name] = f
        self.modules = set(self.files)

    def graph(self) -> tuple:
        graph = {m: set() for m in self.modules}
        why = {}
        for m, f in self.files.items():
            tree = ast.parse(f.read_text(), filename=str(f))
            for node in ast.walk(tree):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name.split(".")[0] for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    if node.module:
                        names = [node.module.split(".")[0]]
                    if node.level and not node.module:
                        names = [a.name for a in node.names]
                for n in names:
                    if n in self.modules and n != m:
                        graph[m].add(n)
                        why.setdefault((m, n), f"import {n} (line {node.lineno})")
        return graph, why

    def name(self, m: str) -> str:
        return str(self.files[m].relative_to(self.src.parent))

    @staticmethod
    def top(m: str):
        return m


# ---------------------------------------------------------------- checks


def tarjan(graph: dict) -> list:
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
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
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def check(src: Path, layers: dict) -> int:
    if not src.is_dir():
        print(f"{src}: not a folder")
        return 1
    unit = Crate(src) if any(src.rglob("*.rs")) else PyFolder(src)
    graph, why = unit.graph()
    rc = 0
    loops = [c for c in tarjan(graph) if len(c) > 1]
    if loops:
        rc = 1
        print(f"{src}: {len(loops)} import loop(s)")
        for comp in loops:
            cs = set(comp)
            print(f"  loop of {len(comp)} files: " + ", ".join(sorted(unit.name(m) for m in comp)))
            for m in sorted(comp):
                for t in sorted(graph[m] & cs):
                    print(f"    {unit.name(m)} -> {unit.name(t)}  [{why[(m, t)]}]")
    order = layers.get(src.resolve())
    upward, unplaced = [], set()
    if order is not None:
        level = {name: i for i, layer in enumerate(order) for name in layer}

        def level_of(m):
            top = unit.top(m)
            if top is None:
                return -1  # the crate root, above every layer
            if top not in level:
                unplaced.add(top)
                return None
            return level[top]

        for m in sorted(graph):
            lm = level_of(m)
            for t in sorted(graph[m]):
                lt = level_of(t)
                if lm is not None and lt is not None and lt < lm:
                    upward.append((m, t, lm, lt))
        if unplaced:
            rc = 1
            print(f"{src}: module(s) in no layer: {', '.join(sorted(unplaced))}"
                  f" (give each a line's place under [{src}] in the layers file)")
        if upward:
            rc = 1
            print(f"{src}: {len(upward)} upward import(s)")
            for m, t, lm, lt in upward:
                print(f"    {unit.name(m)} (layer {lm + 1}) -> {unit.name(t)} (layer {lt + 1})"
                      f"  [{why[(m, t)]}]")
    if rc == 0:
        what = f"{len(order)} layers, no upward import" if order is not None else "no layers declared"
        print(f"{src}: no import loop ({len(unit.files)} files); {what}")
    return rc


def main() -> int:
    args = sys.argv[1:]
    layers_file = DEFAULT_LAYERS
    if len(args) >= 2 and args[0] == "--layers":
        layers_file = Path(args[1])
        args = args[2:]
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    layers = read_layers(layers_file)
    rc = 0
    for arg in args:
        rc |= check(Path(arg), layers)
    return rc


if __name__ == "__main__":
    sys.exit(main())
