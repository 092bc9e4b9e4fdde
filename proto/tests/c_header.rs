//! Compiles a C (and, if present, C++) file that includes `include/tandem.h`:
//! the header's static asserts check every size and offset against the
//! numbers Rust computed. Skipped (with a note) when no compiler is installed.

use std::path::{Path, PathBuf};
use std::process::Command;

fn include_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("include")
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

const PROGRAM: &str = r#"
#include "tandem.h"
#include <stdio.h>
#include <string.h>
int main(void) {
    struct tandem_record r;
    memset(&r, 0, sizeof r);
    r.kind = TANDEM_EVENT_LAUNCH_EX;
    r.flags = TANDEM_FLAG_COOPERATIVE;
    /* Print the layout so the Rust side can compare it at run time too. */
    printf("%zu %zu %zu %zu %zu %u\n",
           sizeof(struct tandem_record),
           sizeof(struct tandem_ring_header),
           sizeof(struct tandem_control_block),
           offsetof(struct tandem_ring_header, tail),
           (size_t)TANDEM_REGION_SIZE(1024),
           (unsigned)r.kind);
    return 0;
}
"#;

fn compile_and_run(compiler: &str, ext: &str, std: &str) {
    let dir = std::env::temp_dir().join(format!("tandem-proto-c-{}-{ext}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join(format!("check.{ext}"));
    let bin = dir.join("check");
    std::fs::write(&src, PROGRAM).unwrap();
    let out = Command::new(compiler)
        .arg(format!("-std={std}"))
        .args(["-Wall", "-Wextra", "-Werror", "-pedantic", "-I"])
        .arg(include_dir())
        .arg(&src)
        .arg("-o")
        .arg(&bin)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{compiler} rejected include/tandem.h:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&bin).output().unwrap();
    assert!(run.status.success());
    let expected = format!(
        "64 384 256 256 {} {}\n",
        tandem_proto::region_size(1024).unwrap(),
        tandem_proto::EventKind::LAUNCH_EX.raw()
    );
    assert_eq!(String::from_utf8_lossy(&run.stdout), expected);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn c_compiler_accepts_header() {
    if !have("cc") {
        eprintln!("note: no `cc`; skipping the C layout check");
        return;
    }
    compile_and_run("cc", "c", "c11");
}

#[test]
fn cxx_compiler_accepts_header() {
    if !have("c++") {
        eprintln!("note: no `c++`; skipping the C++ layout check");
        return;
    }
    compile_and_run("c++", "cc", "c++11");
}
