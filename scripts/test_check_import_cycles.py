"""The import-loop checker finds a loop that is there and none that is not."""

import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

CHECKER = Path(__file__).with_name("check_import_cycles.py")


def crate(files: dict) -> Path:
    root = Path(tempfile.mkdtemp()) / "src"
    for name, text in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def run(src: Path):
    return subprocess.run([sys.executable, str(CHECKER), str(src)], capture_output=True, text=True)


class ImportLoops(unittest.TestCase):
    def test_a_sibling_loop_is_found(self):
        src = crate({
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": "use crate::b::B;\npub struct A;\n",
            "b.rs": "pub struct B(crate::a::A);\n",
        })
        r = run(src)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("src/a.rs -> src/b.rs", r.stdout)
        self.assertIn("src/b.rs -> src/a.rs", r.stdout)

    def test_a_loop_through_super_and_a_group_is_found(self):
        src = crate({
            "lib.rs": "mod m;\n",
            "m/mod.rs": "mod x;\nmod y;\n",
            "m/x.rs": "use super::y::{Y, other};\npub struct X;\n",
            "m/y.rs": "fn f() -> super::x::X { todo!() }\npub struct Y;\n",
        })
        self.assertEqual(run(src).returncode, 1)

    def test_reexports_tests_and_comments_make_no_loop(self):
        src = crate({
            "lib.rs": "mod a;\nmod b;\npub use a::A;\n",
            "a.rs": "pub use crate::b::B;\n// crate::b::B in a comment\npub struct A;\n"
                    "#[cfg(test)]\nmod tests { use crate::b::B; }\n",
            "b.rs": "use crate::a::A;\npub struct B(A);\n",
        })
        r = run(src)
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertIn("no import loop", r.stdout)


if __name__ == "__main__":
    unittest.main()
