"""The file-size check fails on a source file over 600 lines and on no test code."""

import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

CHECKER = Path(__file__).with_name("check_file_sizes.py")


def tree(files: dict) -> Path:
    root = Path(tempfile.mkdtemp())
    for name, text in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def run(root: Path):
    return subprocess.run([sys.executable, str(CHECKER), str(root)], capture_output=True, text=True)


def lines(n: int) -> str:
    return "".join(f"pub const C{i}: u32 = {i};\n" for i in range(n))


TESTS = "#[cfg(test)]\nmod tests {\n" + "    #[test]\n    fn t() {}\n" * 200 + "}\n"


class FileSizes(unittest.TestCase):
    def test_a_file_at_the_limit_passes_and_one_line_more_fails(self):
        root = tree({"a/src/lib.rs": lines(600)})
        self.assertEqual(run(root).returncode, 0)
        (root / "a/src/lib.rs").write_text(lines(601))
        r = run(root)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("a/src/lib.rs has 601 non-test lines", r.stdout)

    def test_a_trailing_test_module_does_not_count(self):
        root = tree({"a/src/lib.rs": lines(590) + TESTS})
        r = run(root)
        self.assertEqual(r.returncode, 0, r.stdout)

    def test_a_test_module_with_code_after_it_counts(self):
        root = tree({"a/src/lib.rs": lines(300) + TESTS + lines(10)})
        self.assertEqual(run(root).returncode, 1)

    def test_test_files_and_directories_do_not_count(self):
        big = lines(700)
        root = tree({
            "a/src/tests.rs": big,
            "a/src/proptests.rs": big,
            "a/tests/daemon.rs": big,
            "a/benches/launch.rs": big,
            "tests/e2e/src/coord.rs": big,
            "target/debug/build/out.rs": big,
        })
        r = run(root)
        self.assertEqual(r.returncode, 0, r.stdout)

    def test_a_crate_under_the_top_level_tests_directory_counts(self):
        root = tree({"tests/fake-driver/src/vmm.rs": lines(601)})
        r = run(root)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("tests/fake-driver/src/vmm.rs", r.stdout)


if __name__ == "__main__":
    unittest.main()
