//! The header's tests: the field tables tile each struct, and the committed
//! `include/tandem.h` is what [`c_header`] renders.

use super::fields::{control_fields, record_fields, ring_header_fields};
use super::*;
use crate::control::ControlBlock;
use crate::record::{EventKind, Record};
use crate::ring::RingHeader;
use core::mem::size_of;
use std::path::PathBuf;

/// The field tables cover each struct exactly: contiguous, no gaps, no
/// overlap, ending at the struct size. If a Rust field is added, moved or
/// resized without updating the table, this fails.
#[test]
fn field_tables_are_complete() {
    for (name, size, fields) in [
        ("Record", size_of::<Record>(), record_fields()),
        ("RingHeader", size_of::<RingHeader>(), ring_header_fields()),
        ("ControlBlock", size_of::<ControlBlock>(), control_fields()),
    ] {
        let mut at = 0;
        for f in &fields {
            assert_eq!(
                f.offset, at,
                "{name}.{} starts at {} not {at}",
                f.name, f.offset
            );
            let width = match f.c_type {
                "uint64_t" => 8,
                "uint32_t" => 4,
                "uint16_t" => 2,
                t => panic!("unexpected C type {t}"),
            };
            let count = f
                .name
                .split_once('[')
                .map(|(_, n)| n.trim_end_matches(']').parse::<usize>().unwrap())
                .unwrap_or(1);
            assert_eq!(
                width * count,
                f.size,
                "{name}.{}: C type does not match size",
                f.name
            );
            at += f.size;
        }
        assert_eq!(at, size, "{name}: fields cover {at} of {size} bytes");
    }
}

#[test]
fn c_header_is_current() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(HEADER_PATH);
    let want = c_header();
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "{} is out of date with the Rust layout.\n\
         Regenerate it with:  cargo run -p tandem-proto --example gen_header\n\
         and commit the result.",
        path.display()
    );
}

#[test]
fn header_mentions_everything() {
    let h = c_header();
    for k in EventKind::ALL {
        assert!(h.contains(&format!(
            "TANDEM_EVENT_{} {}u",
            k.name().to_ascii_uppercase(),
            k.raw()
        )));
    }
    for (decl, _) in EXPLICIT_API {
        assert!(h.contains(decl));
    }
    assert!(h.contains("struct tandem_record {"));
    assert!(h.contains("offsetof(struct tandem_ring_header, tail) == 256"));
}
