//! The tandem-nri binary: `--version`, and one line, not one per attempt,
//! while the runtime's NRI socket is missing.

use std::process::{Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_tandem-nri");

#[test]
fn version() {
    let o = Command::new(BIN).arg("--version").output().expect("run");
    assert!(o.status.success());
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        format!("tandem-nri {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn a_missing_nri_socket_is_said_once() {
    let dir = std::env::temp_dir().join(format!("tandem-nri-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let mut p = Command::new(BIN)
        .args(["--socket"])
        .arg(dir.join("no-nri.sock"))
        .arg("--records")
        .arg(dir.join("records"))
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    // Attempts at 0, 1 and 3 s: three failures in 3.5 s.
    std::thread::sleep(Duration::from_millis(3500));
    p.kill().expect("kill");
    let o = p.wait_with_output().expect("wait");
    let err = String::from_utf8_lossy(&o.stderr);
    let _ = std::fs::remove_dir_all(&dir);
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("cannot reach")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains("doubling up to 60 s"), "{err}");
}
