//! How many inputs of the `wire` corpus decode as each message type:
//! `cargo run -p tandem-fuzz-harness --example wire_types DIR...`
//! (`scripts/fuzz` prints it after a `wire` campaign).

use std::collections::BTreeMap;

fn main() {
    let mut n = 0usize;
    let mut by_type: BTreeMap<&str, usize> = BTreeMap::new();
    for dir in std::env::args().skip(1) {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            let Ok(data) = std::fs::read(e.path()) else {
                continue;
            };
            n += 1;
            let t = tandem_fuzz_harness::wire::decoded_type(&data).unwrap_or("(rejected)");
            *by_type.entry(t).or_default() += 1;
        }
    }
    let parts: Vec<String> = by_type.iter().map(|(t, c)| format!("{t} {c}")).collect();
    println!("wire corpus: {n} inputs; decode as: {}", parts.join(", "));
}
