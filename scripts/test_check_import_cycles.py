"""The import checker finds the loops and upward imports that are there and
none that are not."""

import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

CHECKER = Path(__file__).with_name("check_import_cycles.py")


def folder(files: dict) -> Path:
    root = Path(tempfile.mkdtemp()) / "src"
    for name, text in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def run(src: Path, layers=None):
    """Run the checker on one folder, with `layers` (top first) declared for it."""
    layers_file = src.parent / "layers.txt"
    text = ""
    if layers is not None:
        text = f"[{src}]\n" + "".join(" ".join(layer) + "\n" for layer in layers)
    layers_file.write_text(text)
    return subprocess.run(
        [sys.executable, str(CHECKER), "--layers", str(layers_file), str(src)],
        capture_output=True, text=True,
    )


class ImportLoops(unittest.TestCase):
    def test_a_sibling_loop_is_found(self):
        src = folder({
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": "use crate::b::B;\npub struct A;\n",
            "b.rs": "pub struct B(crate::a::A);\n",
        })
        r = run(src)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("src/a.rs -> src/b.rs", r.stdout)
        self.assertIn("src/b.rs -> src/a.rs", r.stdout)

    def test_a_loop_through_super_and_a_group_is_found(self):
        src = folder({
            "lib.rs": "mod m;\n",
            "m/mod.rs": "mod x;\nmod y;\n",
            "m/x.rs": "use super::y::{Y, other};\npub struct X;\n",
            "m/y.rs": "fn f() -> super::x::X { todo!() }\npub struct Y;\n",
        })
        self.assertEqual(run(src).returncode, 1)

    def test_a_loop_only_a_reexport_makes_is_found(self):
        # a.rs re-exports B: a facade that depends on b.rs, which uses a.rs.
        src = folder({
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": "pub use crate::b::B;\npub struct A;\n",
            "b.rs": "use crate::a::A;\npub struct B(A);\n",
        })
        r = run(src)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("src/a.rs -> src/b.rs  [use crate::b::B]", r.stdout)

    def test_a_grouped_reexport_of_a_child_counts(self):
        # mod.rs re-exports from its child, which uses an item of mod.rs.
        src = folder({
            "lib.rs": "mod m;\n",
            "m/mod.rs": "mod inner;\npub(crate) use inner::{Thing, Other as Renamed};\npub fn helper() {}\n",
            "m/inner.rs": "use super::helper;\npub struct Thing;\npub struct Other;\n",
        })
        r = run(src)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("src/m/mod.rs -> src/m/inner.rs", r.stdout)

    def test_an_import_through_a_facade_reaches_the_file_that_defines_it(self):
        # x.rs names m::Thing; m/mod.rs only re-exports it from m/inner.rs,
        # which uses x.rs: the loop is x -> m/inner -> x (m/mod.rs is not in it).
        src = folder({
            "lib.rs": "mod m;\nmod x;\n",
            "m/mod.rs": "mod inner;\npub use inner::Thing as Thing;\n",
            "m/inner.rs": "use crate::x::X;\npub struct Thing;\n",
            "x.rs": "use crate::m::Thing;\npub struct X;\n",
        })
        r = run(src)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("src/x.rs -> src/m/inner.rs", r.stdout)
        self.assertIn("loop of 2 files: src/m/inner.rs, src/x.rs", r.stdout)

    def test_an_exported_macro_is_the_file_that_defines_it(self):
        # `crate::rule!` names matcher.rs's own macro, not lib.rs.
        src = folder({
            "lib.rs": "mod matcher;\npub use matcher::Matcher;\n",
            "matcher.rs": "pub struct Matcher;\n#[macro_export]\nmacro_rules! rule { () => {} }\n"
                          "fn f() { crate::rule!(); }\n",
        })
        r = run(src)
        self.assertEqual(r.returncode, 0, r.stdout)

    def test_tests_comments_and_inline_modules_make_no_loop(self):
        src = folder({
            "lib.rs": "mod a;\nmod b;\npub use a::A;\n",
            "a.rs": "use crate::b::B;\n// crate::b::B in a comment\npub struct A(B);\n"
                    "mod api { use super::A; }\n",
            "b.rs": "pub struct B;\nconst S: &str = \"crate::a::A\";\n"
                    "#[cfg(test)]\nmod tests { use crate::a::A; }\n",
        })
        r = run(src)
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertIn("no import loop", r.stdout)


class Layers(unittest.TestCase):
    CRATE = {
        "lib.rs": "mod top;\nmod low;\n",
        "top.rs": "use crate::low::L;\npub struct T(L);\n",
        "low.rs": "pub struct L;\n",
    }

    def test_downward_imports_pass(self):
        r = run(folder(self.CRATE), layers=[["top"], ["low"]])
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertIn("2 layers, no upward import", r.stdout)

    def test_an_upward_import_is_found(self):
        src = folder(dict(self.CRATE, **{"low.rs": "pub struct L;\nfn f(_: crate::top::T) {}\n"}))
        r = run(src, layers=[["top"], ["low"]])
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("1 upward import(s)", r.stdout)
        self.assertIn("src/low.rs (layer 2) -> src/top.rs (layer 1)  [crate::top::T]", r.stdout)

    def test_an_upward_import_through_a_reexport_is_found(self):
        # low/mod.rs re-exports T from the layer above: a facade that points up.
        src = folder({
            "lib.rs": "mod top;\nmod low;\n",
            "top.rs": "pub struct T;\n",
            "low.rs": "pub use crate::top::T;\n",
        })
        r = run(src, layers=[["top"], ["low"]])
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("src/low.rs (layer 2) -> src/top.rs (layer 1)", r.stdout)

    def test_a_module_in_no_layer_is_found(self):
        r = run(folder(self.CRATE), layers=[["top"]])
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("module(s) in no layer: low", r.stdout)


class Python(unittest.TestCase):
    def test_a_loop_through_a_function_level_import_is_found(self):
        src = folder({
            "a.py": "import b\n",
            "b.py": "def f():\n    import a as x\n    return x\n",
            "c.py": "'''import a'''\nimport os\n",
        })
        r = run(src)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("loop of 2 files: src/a.py, src/b.py", r.stdout)

    def test_a_script_without_an_extension_counts_and_from_imports_too(self):
        src = folder({
            "prove": "#!/usr/bin/env python3\nfrom shared import x\n",
            "shared.py": "x = 1\nfrom . import helper\n",
            "helper.py": "y = 2\n",
        })
        r = run(src, layers=[["prove"], ["shared"], ["helper"]])
        self.assertEqual(r.returncode, 0, r.stdout)
        r = run(src, layers=[["prove"], ["helper"], ["shared"]])
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("src/shared.py (layer 3) -> src/helper.py (layer 2)", r.stdout)


if __name__ == "__main__":
    unittest.main()
