//! Regenerates `include/tandem.h` from the Rust layout definitions.
//!
//! `cargo run -p tandem-proto --example gen_header` writes the file;
//! `... -- --stdout` prints it instead.

use std::path::PathBuf;

fn main() {
    let text = tandem_proto::c_header();
    if std::env::args().any(|a| a == "--stdout") {
        print!("{text}");
        return;
    }
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(tandem_proto::header::HEADER_PATH);
    if let Err(e) = std::fs::write(&path, &text) {
        eprintln!("cannot write {}: {e}", path.display());
        std::process::exit(1);
    }
    println!("wrote {}", path.display());
}
