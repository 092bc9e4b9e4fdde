#!/usr/bin/env python3
"""Keep docs/ARCHITECTURE.md from going stale (issue 27).

    python3 scripts/check_architecture_doc.py [ROOT]

Reads ROOT/docs/ARCHITECTURE.md (ROOT: the repository root by default) and
fails, naming each problem, when
  (a) a path or module it names does not exist: every inline code span that
      is a relative path (`proto/src/ring/`, `include/tandem.h`: letters,
      digits, `._-` and at least one `/`) must exist under ROOT, and every
      `tandem_xxx::module` path must name a workspace crate and, after it, a
      module file of that crate or a name its lib.rs declares or re-exports;
      a bare `NAME.rs` is refused (a short name cannot be checked);
  (b) a crate or top-level module is not named: every workspace member
      (ROOT/Cargo.toml's `members`) by its package name (`tandem-proto`) or
      its directory (`proto/`), and every top-level module of each, by its
      path: `src/NAME.rs` as `CRATE/src/NAME.rs`, `src/NAME/mod.rs` as
      `CRATE/src/NAME/` (or `.../mod.rs`), `src/bin/NAME.rs` likewise.
      A module is one module whether it is `a.rs` or `a/mod.rs`: either
      spelling names either form, in (a) and (b), so moving a module's file
      into a directory of its own needs no change here.
      Crate roots (lib.rs, main.rs) are covered by the crate's name; test
      modules (tests.rs, proptests.rs, *_tests.rs, src/tests/) need no entry.
Paths inside fenced code blocks (the pictures) are not checked: the prose
names every module the pictures show.
"""

import re
import sys
from pathlib import Path

SPAN = re.compile(r"`([^`\n]+)`")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
PATH = re.compile(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*/?$")
RUST_PATH = re.compile(r"^(tandem_[a-z_]+)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
TEST_NAMES = {"tests.rs", "proptests.rs"}


def members(root: Path) -> list:
    text = (root / "Cargo.toml").read_text()
    m = re.search(r"^members\s*=\s*\[(.*?)\]", text, re.S | re.M)
    return re.findall(r'"([^"]+)"', m.group(1)) if m else []


def package_name(crate_dir: Path) -> str:
    m = re.search(r'^name\s*=\s*"([^"]+)"', (crate_dir / "Cargo.toml").read_text(), re.M)
    return m.group(1) if m else crate_dir.name


def top_level_modules(root: Path, member: str) -> list:
    """(path as written in the doc, other accepted spellings) per module."""
    src = root / member / "src"
    out = []
    for f in sorted(src.glob("*.rs")):
        if f.name in ("lib.rs", "main.rs") or f.name in TEST_NAMES or f.name.endswith("_tests.rs"):
            continue
        d = f.name[: -len(".rs")]
        out.append((f"{member}/src/{f.name}", (f"{member}/src/{d}/", f"{member}/src/{d}/mod.rs")))
    for f in sorted(src.glob("*/mod.rs")):
        d = f.parent.name
        if d == "tests":
            continue
        out.append(
            (f"{member}/src/{d}/", (f"{member}/src/{d}/mod.rs", f"{member}/src/{d}", f"{member}/src/{d}.rs"))
        )
    for f in sorted(src.glob("bin/*.rs")):
        out.append((f"{member}/src/bin/{f.name}", ()))
    return out


def exists(root: Path, span: str) -> bool:
    """Whether the path exists; a module is the same module whether it is a
    file, `a.rs`, or a directory, `a/` with `a/mod.rs`, so either spelling
    finds either form."""
    p = root / span.rstrip("/")
    if p.exists():
        return True
    if span.endswith(".rs"):
        return (p.with_suffix("") / "mod.rs").exists()
    if span.endswith("/"):
        return p.with_name(p.name + ".rs").exists()
    return False


def spans(doc: str) -> set:
    return set(SPAN.findall(FENCE.sub("", doc)))


def check_rust_path(root: Path, crates: dict, span: str) -> str:
    m = RUST_PATH.match(span)
    krate, rest = m.group(1), [s for s in m.group(2).split("::") if s]
    member = crates.get(krate.replace("_", "-"))
    if member is None:
        return f"`{span}`: no workspace crate {krate.replace('_', '-')}"
    if not rest:
        return ""
    first = rest[0]
    src = root / member / "src"
    if (src / f"{first}.rs").exists() or (src / first / "mod.rs").exists():
        return ""
    lib = src / "lib.rs"
    if lib.exists() and re.search(rf"\b{re.escape(first)}\b", lib.read_text()):
        return ""
    return f"`{span}`: {krate} has no module or re-exported item `{first}` ({member}/src/)"


def main(argv: list) -> int:
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent
    doc_path = root / "docs" / "ARCHITECTURE.md"
    named = spans(doc_path.read_text())
    problems = []
    ms = members(root)
    crates = {package_name(root / m): m for m in ms}
    # (a) what the doc names exists
    for s in sorted(named):
        if PATH.match(s) and "/" in s and not s.startswith("/"):
            if not exists(root, s):
                problems.append(f"`{s}` is named but does not exist")
        elif PATH.match(s) and s.endswith(".rs"):
            problems.append(f"`{s}`: name a source file by its path from the repository root")
        elif RUST_PATH.match(s):
            p = check_rust_path(root, crates, s)
            if p:
                problems.append(p)
    # (b) every crate and top-level module is named
    for name, m in crates.items():
        if name not in named and f"{m}/" not in named:
            problems.append(f"crate {name} ({m}/) is not named: write `{name}` or `{m}/`")
        for path, others in top_level_modules(root, m):
            if path not in named and not any(o in named for o in others):
                problems.append(f"module {path} is not named: write `{path}`")
    rel = doc_path.relative_to(root) if doc_path.is_relative_to(root) else doc_path
    for p in problems:
        print(f"check_architecture_doc: {rel}: {p}")
    if problems:
        print(f"check_architecture_doc: {len(problems)} problem(s): update {rel} (paths from the "
              "repository root, in backticks) so it matches the code")
        return 1
    print(f"check_architecture_doc: {rel} names {len(crates)} crates and every top-level "
          "module, and everything it names exists")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
