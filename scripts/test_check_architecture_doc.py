"""The ARCHITECTURE check fails when the doc names what is gone or misses what is there."""

import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

CHECKER = Path(__file__).with_name("check_architecture_doc.py")

DOC = """# arch
`tandem-a` holds `a/src/x.rs` and `a/src/y/`; `tandem_a::x` is a module,
`tandem_a::Thing` a re-export.

```
a picture naming gone/src/z.rs, which is not checked
```
"""


def repo(doc: str = DOC) -> Path:
    root = Path(tempfile.mkdtemp())
    files = {
        "Cargo.toml": '[workspace]\nmembers = ["a"]\n',
        "a/Cargo.toml": '[package]\nname = "tandem-a"\n',
        "a/src/lib.rs": "mod x;\nmod y;\npub use x::Thing;\n#[cfg(test)]\nmod tests;\n",
        "a/src/x.rs": "pub struct Thing;\n",
        "a/src/y/mod.rs": "",
        "a/src/tests.rs": "",
        "docs/ARCHITECTURE.md": doc,
    }
    for name, text in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def run(root: Path):
    return subprocess.run([sys.executable, str(CHECKER), str(root)], capture_output=True, text=True)


class ArchitectureDoc(unittest.TestCase):
    def test_a_doc_that_matches_the_code_passes(self):
        r = run(repo())
        self.assertEqual(r.returncode, 0, r.stdout)

    def test_a_named_module_that_was_removed_fails(self):
        root = repo()
        (root / "a/src/x.rs").unlink()
        (root / "a/src/lib.rs").write_text("mod y;\n")
        r = run(root)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("`a/src/x.rs` is named but does not exist", r.stdout)
        self.assertIn("`tandem_a::x`", r.stdout)

    def test_a_module_the_doc_does_not_name_fails(self):
        root = repo()
        (root / "a/src/new.rs").write_text("")
        r = run(root)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("module a/src/new.rs is not named", r.stdout)

    def test_a_crate_the_doc_does_not_name_fails(self):
        r = run(repo(DOC.replace("`tandem-a` holds", "It holds")))
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("crate tandem-a (a/) is not named", r.stdout)

    def test_a_module_moved_into_a_directory_of_its_own_is_still_named(self):
        root = repo()
        (root / "a/src/x.rs").unlink()
        (root / "a/src/x").mkdir()
        (root / "a/src/x/mod.rs").write_text("pub struct Thing;\n")
        r = run(root)
        self.assertEqual(r.returncode, 0, r.stdout)

    def test_a_short_file_name_is_refused(self):
        r = run(repo(DOC + "\nAlso `x.rs`.\n"))
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("`x.rs`: name a source file by its path", r.stdout)


if __name__ == "__main__":
    unittest.main()
