//! Generates `include/tandem.h` from the Rust definitions.
//!
//! The C header is never edited by hand: [`c_header`] renders it from the Rust
//! constants and from `offset_of!`/`size_of` of the real structs, and the
//! emitted `_Static_assert`s make a C compiler check that the C declarations
//! land on exactly the offsets Rust uses. The test `c_header_is_current`
//! fails when the committed file differs; regenerate with
//!
//! ```text
//! cargo run -p tandem-proto --example gen_header
//! ```
//!
//! To add a function to the explicit C API, add it to [`EXPLICIT_API`].

use core::fmt::Write as _;
use core::mem::{offset_of, size_of};

use crate::control::{
    ControlBlock, CONTROL_BLOCK_SIZE, GATE_CLOSED, GATE_OPEN, GATE_SEQ_STEP, LAUNCH_UNLIMITED,
};
use crate::estimates::ESTIMATES_LEN;
use crate::record::{EventKind, Record, FLAGS, RECORD_SIZE};
use crate::ring::{
    RingHeader, CONTROL_OFFSET, DEFAULT_CAPACITY, MAX_CAPACITY, MIN_CAPACITY, RECORDS_OFFSET,
    RING_HEADER_SIZE, RING_LAYOUT_VERSION, RING_MAGIC,
};
use crate::wire::PROTOCOL_VERSION;

/// Path of the generated header, relative to the workspace root.
pub const HEADER_PATH: &str = "include/tandem.h";

/// The explicit C API exported by `libtandem.so`: `(declaration, doc comment)`.
/// The generator emits these verbatim in the header's API section.
pub const EXPLICIT_API: &[(&str, &str)] = &[
    (
        "uint64_t tandem_hook_count(const char *symbol);",
        "How many times this process called the hooked driver variant exported under exactly\n\
         this name (e.g. \"cuLaunchKernel_ptsz\"); UINT64_MAX if the shim does not hook it.",
    ),
    (
        "uint64_t tandem_driver_calls(const char *symbol);",
        "Calls libtandem.so itself made to that driver function (not on the program's behalf):\n\
         a hooked variant, or an unhooked function the shim uses for its own work (completion\n\
         marks' cuEventCreate and cuEventRecord, cuCtxSetCurrent, ...); UINT64_MAX if the shim\n\
         neither hooks nor calls it. The driver saw tandem_hook_count(symbol) +\n\
         tandem_driver_calls(symbol) calls of a hooked variant, and the program's own calls\n\
         plus tandem_driver_calls(symbol) of any other.",
    ),
    (
        "uint64_t tandem_kernels_launched(void);",
        "Kernels this process sent to the GPU: successful launches not recorded by stream\n\
         capture, plus every kernel node of every graph launch. Compare with CUPTI.",
    ),
    (
        "uint64_t tandem_records_pushed(void);",
        "Records this process pushed into its coordinator ring since it started (or forked),\n\
         over every registration (a reconnect continues the count).",
    ),
    (
        "uint64_t tandem_records_dropped(void);",
        "Records this process dropped since it started (or forked): ring full, or ring busy\n\
         past the bounded spin. A push never blocks the job.",
    ),
    (
        "uint64_t tandem_client_id(void);",
        "The coordinator's id for this process; 0 while it is not registered (no coordinator,\n\
         refused, TANDEM_CLASS=off, between a coordinator's death and the reconnect).",
    ),
    (
        "void tandem_request_begin(void);",
        "An inference request begins now (optional: without these calls the coordinator infers\n\
         request boundaries from launch gaps and syncs). Reports one REQUEST_BEGIN record while\n\
         registered; does nothing otherwise. Never blocks.",
    ),
    (
        "void tandem_request_end(void);",
        "The current inference request ended (its result is ready). Reports one REQUEST_END\n\
         record while registered; does nothing otherwise. Never blocks.",
    ),
    (
        "uint64_t tandem_dedup_shared_bytes(void);",
        "Weight dedup (TANDEM_SHARE_WEIGHTS=on): bytes of this process's device memory that map\n\
         a copy shared read-only with other jobs now.",
    ),
    (
        "uint64_t tandem_dedup_merges(void);",
        "Weight dedup: granules this process merged into a shared copy (after a byte-for-byte\n\
         comparison) since it started.",
    ),
    (
        "uint64_t tandem_dedup_cow_breaks(void);",
        "Weight dedup: shared granules this process got a private copy of again because a\n\
         driver copy or memset wrote into them (copy-on-write).",
    ),
    (
        "uint64_t tandem_dedup_backed_bytes(void);",
        "Weight dedup: bytes of device memory held through dedup-backed (VMM) allocations,\n\
         shared or private, in whole 2 MiB granules.",
    ),
    (
        "int tandem_follow_alloc(uint64_t bytes, unsigned long long *dptr);",
        "Follow mode (TANDEM_FOLLOW=on; see README): allocate `bytes` of device memory in the\n\
         current context (whole 2 MiB granules, read-write, like cuMemAlloc) that can be\n\
         offered to followers. Fill it, then call tandem_follow_offer. TANDEM_FOLLOW_OK and\n\
         *dptr set, or *dptr = 0 and TANDEM_FOLLOW_INVALID / _DRIVER. Works with or without\n\
         a coordinator; free it with tandem_follow_free or cuMemFree.",
    ),
    (
        "int tandem_follow_offer(unsigned long long dptr, const char *name,\n\
                        const uint8_t layout[16]);",
        "Follow mode: offer the region tandem_follow_alloc returned as `name` (1-56 printable\n\
         ASCII characters), with the opaque `layout` tag, to followers of this trust group on\n\
         this GPU. Waits for tandemd's answer for at most 5 s. The memory stays the job's\n\
         whatever the code (OK, or why it is not offered now); a named region is offered\n\
         again by itself to a tandemd the process registers with later (a restart).",
    ),
    (
        "int tandem_follow_map(const char *name, uint64_t bytes, const uint8_t layout[16],\n\
                      unsigned timeout_ms, unsigned long long *dptr);",
        "Follow mode: map region `name`, shared by another job, read-only into the current\n\
         context. `bytes` and `layout` must equal the sharer's. Reads see the sharer's live\n\
         memory (no snapshot: a read may see a half-applied update); writes by a driver copy\n\
         fail, a kernel that writes faults this process only. Waits up to timeout_ms for the\n\
         region to appear (0: 5000). On TANDEM_FOLLOW_OK *dptr is set, else it is 0.",
    ),
    (
        "int tandem_follow_free(unsigned long long dptr);",
        "Follow mode: release a region from tandem_follow_alloc (no longer offered;\n\
         followers keep what they mapped) or tandem_follow_map. cuMemFree does the same.",
    ),
    (
        "const char *tandem_follow_strerror(int code);",
        "Follow mode: one line of text for a tandem_follow_* return code (static storage).",
    ),
    (
        "uint64_t tandem_follow_shared_bytes(void);",
        "Follow mode: device bytes of the regions this process allocated with\n\
         tandem_follow_alloc (offered or not) and holds now, each rounded up to the\n\
         allocation granularity (2 MiB on current GPUs).",
    ),
    (
        "uint64_t tandem_follow_mapped_bytes(void);",
        "Follow mode: device bytes of other jobs' regions this process maps read-only\n\
         now, rounded up as above.",
    ),
];

/// One C struct member, with its Rust-derived offset and size.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CField {
    pub c_type: &'static str,
    /// Member name; arrays carry their extent, e.g. `pad0[11]`.
    pub name: &'static str,
    pub offset: usize,
    pub size: usize,
    pub doc: &'static str,
}

impl CField {
    /// The member name without an array extent (for `offsetof`).
    fn base_name(&self) -> &'static str {
        self.name.split('[').next().unwrap_or(self.name)
    }
}

macro_rules! field {
    ($ty:ty, $f:ident, $cty:expr, $name:expr, $size:expr, $doc:expr) => {
        CField {
            c_type: $cty,
            name: $name,
            offset: offset_of!($ty, $f),
            size: $size,
            doc: $doc,
        }
    };
}

pub(crate) fn record_fields() -> Vec<CField> {
    vec![
        field!(
            Record,
            ts_ns,
            "uint64_t",
            "ts_ns",
            8,
            "ns on CLOCK_MONOTONIC"
        ),
        field!(Record, kind, "uint16_t", "kind", 2, "TANDEM_EVENT_*"),
        field!(Record, flags, "uint16_t", "flags", 2, "TANDEM_FLAG_*"),
        field!(
            Record,
            shared_mem_bytes,
            "uint32_t",
            "shared_mem_bytes",
            4,
            "dynamic shared memory per block, bytes"
        ),
        field!(
            Record,
            stream,
            "uint64_t",
            "stream",
            8,
            "CUstream handle value; 0 = legacy default stream"
        ),
        field!(
            Record,
            func_id,
            "uint64_t",
            "func_id",
            8,
            "stable function id / graph-exec id / request tag"
        ),
        field!(
            Record,
            bytes,
            "uint64_t",
            "bytes",
            8,
            "bytes allocated or copied"
        ),
        field!(
            Record,
            addr,
            "uint64_t",
            "addr",
            8,
            "device address (alloc, free, copy destination)"
        ),
        field!(Record, grid_x, "uint32_t", "grid_x", 4, "grid dims, blocks"),
        field!(
            Record,
            grid_y,
            "uint16_t",
            "grid_y",
            2,
            "saturated at 65535"
        ),
        field!(
            Record,
            grid_z,
            "uint16_t",
            "grid_z",
            2,
            "saturated at 65535"
        ),
        field!(
            Record,
            block_x,
            "uint16_t",
            "block_x",
            2,
            "block dims, threads"
        ),
        field!(Record, block_y, "uint16_t", "block_y", 2, ""),
        field!(Record, block_z, "uint16_t", "block_z", 2, ""),
        field!(Record, reserved, "uint16_t", "reserved", 2, "0"),
    ]
}

pub(crate) fn ring_header_fields() -> Vec<CField> {
    vec![
        field!(
            RingHeader,
            magic,
            "uint64_t",
            "magic",
            8,
            "TANDEM_RING_MAGIC"
        ),
        field!(
            RingHeader,
            layout_version,
            "uint32_t",
            "layout_version",
            4,
            "TANDEM_RING_LAYOUT_VERSION"
        ),
        field!(
            RingHeader,
            record_size,
            "uint32_t",
            "record_size",
            4,
            "TANDEM_RECORD_SIZE"
        ),
        field!(
            RingHeader,
            capacity,
            "uint32_t",
            "capacity",
            4,
            "records, power of two"
        ),
        field!(
            RingHeader,
            control_offset,
            "uint32_t",
            "control_offset",
            4,
            "TANDEM_CONTROL_OFFSET"
        ),
        field!(
            RingHeader,
            records_offset,
            "uint32_t",
            "records_offset",
            4,
            "TANDEM_RECORDS_OFFSET"
        ),
        field!(RingHeader, reserved0, "uint32_t", "reserved0", 4, ""),
        field!(RingHeader, region_len, "uint64_t", "region_len", 8, "bytes"),
        field!(RingHeader, pad0, "uint64_t", "pad0[11]", 88, ""),
        field!(
            RingHeader,
            head,
            "uint64_t",
            "head",
            8,
            "producer: records pushed (release-store)"
        ),
        field!(
            RingHeader,
            dropped_full,
            "uint64_t",
            "dropped_full",
            8,
            "producer: dropped, ring full"
        ),
        field!(
            RingHeader,
            dropped_busy,
            "uint64_t",
            "dropped_busy",
            8,
            "producer: dropped, producer busy"
        ),
        field!(RingHeader, pad1, "uint64_t", "pad1[13]", 104, ""),
        field!(
            RingHeader,
            tail,
            "uint64_t",
            "tail",
            8,
            "consumer: records consumed (release-store)"
        ),
        field!(RingHeader, pad2, "uint64_t", "pad2[15]", 120, ""),
    ]
}

pub(crate) fn control_fields() -> Vec<CField> {
    vec![
        field!(
            ControlBlock,
            gate,
            "uint32_t",
            "gate",
            4,
            "bit 0: TANDEM_GATE_CLOSED; bits 1-31: limit sequence; futex word"
        ),
        field!(
            ControlBlock,
            class,
            "uint32_t",
            "granted_class",
            4,
            "class granted: 0 none yet, 1 inference, 2 training"
        ),
        field!(
            ControlBlock,
            heartbeat,
            "uint64_t",
            "heartbeat",
            8,
            "coordinator liveness counter"
        ),
        field!(ControlBlock, client_id, "uint64_t", "client_id", 8, ""),
        field!(
            ControlBlock,
            launch_limit,
            "uint64_t",
            "launch_limit",
            8,
            "launch n (1-based) starts only while n <= this; 0 = unlimited"
        ),
        field!(
            ControlBlock,
            mark_every_ns,
            "uint64_t",
            "mark_every_ns",
            8,
            "0: no completion marks; else at most one per this many ns"
        ),
        field!(
            ControlBlock,
            budget_idle_ns,
            "uint64_t",
            "budget_idle_ns",
            8,
            "local in-flight bound, no inference active; 0 = none"
        ),
        field!(
            ControlBlock,
            budget_active_ns,
            "uint64_t",
            "budget_active_ns",
            8,
            "local in-flight bound, inference active; 0 = none"
        ),
        field!(
            ControlBlock,
            default_est_ns,
            "uint64_t",
            "default_est_ns",
            8,
            "charge of a launch with no published estimate"
        ),
        field!(
            ControlBlock,
            hold_ns,
            "uint64_t",
            "hold_ns",
            8,
            "GPU counts as inference-active this long after a board bump"
        ),
        field!(ControlBlock, pad0, "uint64_t", "pad0[7]", 56, ""),
        field!(
            ControlBlock,
            gate_waits,
            "uint64_t",
            "gate_waits",
            8,
            "shim: waits on a closed gate"
        ),
        field!(
            ControlBlock,
            gate_timeouts,
            "uint64_t",
            "gate_timeouts",
            8,
            "shim: waits that hit their bound"
        ),
        field!(
            ControlBlock,
            stale_opens,
            "uint64_t",
            "stale_opens",
            8,
            "shim: fail-opens on a stale coordinator"
        ),
        field!(
            ControlBlock,
            gate_wait_ns,
            "uint64_t",
            "gate_wait_ns",
            8,
            "shim: ns launches waited at a closed gate"
        ),
        field!(
            ControlBlock,
            launches,
            "uint64_t",
            "launches",
            8,
            "shim: gated launches started (graph launch = 1)"
        ),
        field!(
            ControlBlock,
            marks_placed,
            "uint64_t",
            "marks_placed",
            8,
            "shim: completion marks recorded"
        ),
        field!(
            ControlBlock,
            marks_done,
            "uint64_t",
            "marks_done",
            8,
            "shim: completion marks seen complete"
        ),
        field!(
            ControlBlock,
            charged_ns,
            "uint64_t",
            "charged_ns",
            8,
            "shim: estimated ns of every launch charged"
        ),
        field!(
            ControlBlock,
            done_ns,
            "uint64_t",
            "done_ns",
            8,
            "shim: the part of charged_ns seen complete"
        ),
        field!(
            ControlBlock,
            local_waits,
            "uint64_t",
            "local_waits",
            8,
            "shim: launches that waited at the local bound"
        ),
        field!(
            ControlBlock,
            local_wait_ns,
            "uint64_t",
            "local_wait_ns",
            8,
            "shim: ns they waited"
        ),
        field!(
            ControlBlock,
            requests_open,
            "uint64_t",
            "requests_open",
            8,
            "shim: explicit requests open"
        ),
        field!(
            ControlBlock,
            board_slot,
            "uint64_t",
            "board_slot",
            8,
            "shim: board slot in use + 1; 0 = none"
        ),
        field!(ControlBlock, pad1, "uint64_t", "pad1[3]", 24, ""),
    ]
}

fn emit_struct(out: &mut String, c_name: &str, size: usize, fields: &[CField]) {
    // The tables must tile the struct exactly (also covered by a test).
    let covered: usize = fields.iter().map(|f| f.size).sum();
    assert_eq!(
        covered, size,
        "field table for {c_name} does not cover the struct"
    );
    let _ = writeln!(out, "struct {c_name} {{");
    for f in fields {
        let decl = format!("{} {};", f.c_type, f.name);
        if f.doc.is_empty() {
            let _ = writeln!(out, "    {decl:<32} /* @{:<3} */", f.offset);
        } else {
            let _ = writeln!(out, "    {decl:<32} /* @{:<3} {} */", f.offset, f.doc);
        }
    }
    let _ = writeln!(out, "}};");
    let _ = writeln!(
        out,
        "TANDEM_STATIC_ASSERT(sizeof(struct {c_name}) == {size}, \"struct {c_name} must be {size} bytes\");"
    );
    for f in fields {
        let _ = writeln!(
            out,
            "TANDEM_STATIC_ASSERT(offsetof(struct {c_name}, {n}) == {o}, \"{c_name}.{n} offset\");",
            n = f.base_name(),
            o = f.offset
        );
    }
    out.push('\n');
}

/// Render the full text of `include/tandem.h`.
#[must_use]
pub fn c_header() -> String {
    let mut o = String::with_capacity(12 * 1024);
    o.push_str(
        "/* tandem.h -- GENERATED by tandem-proto (proto/src/header.rs). DO NOT EDIT.
 *
 * Regenerate with:   cargo run -p tandem-proto --example gen_header
 *
 * The shared-memory layout between libtandem.so and tandemd, and the explicit
 * C API of libtandem.so. One region per client (a sealed memfd):
 *
 *   at 0                      struct tandem_ring_header   (TANDEM_RING_HEADER_SIZE bytes)
 *   at TANDEM_CONTROL_OFFSET  struct tandem_control_block (TANDEM_CONTROL_BLOCK_SIZE bytes)
 *   at TANDEM_RECORDS_OFFSET  capacity x struct tandem_record
 *   then                      the estimate table (TANDEM_ESTIMATES_LEN bytes)
 *   total                     TANDEM_REGION_SIZE(capacity)
 *
 * head/tail are free-running counts; slot = position & (capacity - 1).
 * Fields written by the other process must be read with atomic loads
 * (__atomic_load_n(&h->head, __ATOMIC_ACQUIRE)); a reader must keep its own
 * copy of capacity and its own index and treat everything else as untrusted.
 * All integers are native-endian (the region never leaves the host).
 */
#ifndef TANDEM_H
#define TANDEM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#define TANDEM_STATIC_ASSERT(c, m) static_assert(c, m)
extern \"C\" {
#else
#define TANDEM_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif

",
    );

    let _ = writeln!(o, "/* ---- versions and geometry ---- */");
    let _ = writeln!(o, "#define TANDEM_PROTOCOL_VERSION {PROTOCOL_VERSION}u");
    let _ = writeln!(
        o,
        "#define TANDEM_RING_MAGIC {RING_MAGIC:#018x}ull /* \"TANDEMRG\" little-endian */"
    );
    let _ = writeln!(
        o,
        "#define TANDEM_RING_LAYOUT_VERSION {RING_LAYOUT_VERSION}u"
    );
    let _ = writeln!(o, "#define TANDEM_RECORD_SIZE {RECORD_SIZE}u");
    let _ = writeln!(o, "#define TANDEM_RING_HEADER_SIZE {RING_HEADER_SIZE}u");
    let _ = writeln!(o, "#define TANDEM_CONTROL_BLOCK_SIZE {CONTROL_BLOCK_SIZE}u");
    let _ = writeln!(o, "#define TANDEM_CONTROL_OFFSET {CONTROL_OFFSET}u");
    let _ = writeln!(o, "#define TANDEM_RECORDS_OFFSET {RECORDS_OFFSET}u");
    let _ = writeln!(o, "#define TANDEM_MIN_CAPACITY {MIN_CAPACITY}u");
    let _ = writeln!(o, "#define TANDEM_MAX_CAPACITY {MAX_CAPACITY}u");
    let _ = writeln!(o, "#define TANDEM_DEFAULT_CAPACITY {DEFAULT_CAPACITY}u");
    let _ = writeln!(
        o,
        "#define TANDEM_ESTIMATES_LEN {ESTIMATES_LEN}u /* the estimate table, after the records */"
    );
    let _ = writeln!(
        o,
        "#define TANDEM_REGION_SIZE(capacity) ((size_t)TANDEM_RECORDS_OFFSET + (size_t)(capacity) * TANDEM_RECORD_SIZE + TANDEM_ESTIMATES_LEN)"
    );
    o.push('\n');

    let _ = writeln!(
        o,
        "/* ---- event kinds (struct tandem_record.kind); 0 is never valid ---- */"
    );
    for k in EventKind::ALL {
        let _ = writeln!(
            o,
            "#define TANDEM_EVENT_{} {}u",
            k.name().to_ascii_uppercase(),
            k.raw()
        );
    }
    o.push('\n');
    let _ = writeln!(
        o,
        "/* ---- record flags (struct tandem_record.flags) ---- */"
    );
    for (name, bit) in FLAGS {
        let _ = writeln!(o, "#define TANDEM_FLAG_{name} {bit:#06x}u");
    }
    o.push('\n');
    let _ = writeln!(
        o,
        "/* ---- gate values (struct tandem_control_block.gate) ---- */"
    );
    let _ = writeln!(o, "#define TANDEM_GATE_OPEN {GATE_OPEN}u");
    let _ = writeln!(
        o,
        "#define TANDEM_GATE_CLOSED {GATE_CLOSED}u /* bit 0: closed; other bits: limit sequence */"
    );
    let _ = writeln!(
        o,
        "#define TANDEM_GATE_SEQ_STEP {GATE_SEQ_STEP}u /* added to the gate word when the launch limit is raised */"
    );
    let _ = writeln!(
        o,
        "#define TANDEM_LAUNCH_UNLIMITED {LAUNCH_UNLIMITED}u /* launch_limit: no limit */"
    );
    o.push('\n');

    let _ = writeln!(
        o,
        "/* ---- tandem_follow_* return codes (see tandem_follow_strerror) ---- */"
    );
    for (name, value, _) in crate::follow::api::CODES {
        let _ = writeln!(o, "#define TANDEM_FOLLOW_{name} ({value})");
    }
    o.push('\n');

    let _ = writeln!(o, "/* ---- one event, 64 bytes ---- */");
    emit_struct(
        &mut o,
        "tandem_record",
        size_of::<Record>(),
        &record_fields(),
    );
    let _ = writeln!(
        o,
        "/* ---- ring header: three 128-byte lines (meta, producer, consumer) ---- */"
    );
    emit_struct(
        &mut o,
        "tandem_ring_header",
        size_of::<RingHeader>(),
        &ring_header_fields(),
    );
    let _ = writeln!(
        o,
        "/* ---- control block: coordinator line, then shim line ---- */"
    );
    emit_struct(
        &mut o,
        "tandem_control_block",
        size_of::<ControlBlock>(),
        &control_fields(),
    );

    let _ = writeln!(o, "/* ---- explicit API (exported by libtandem.so) ----");
    let _ = writeln!(
        o,
        " * When a program may run without libtandem.so loaded, declare the functions"
    );
    let _ = writeln!(
        o,
        " * it uses weak (#pragma weak tandem_hook_count) and test them for NULL. */"
    );
    for (decl, doc) in EXPLICIT_API {
        for (i, line) in doc.lines().enumerate() {
            let lead = if i == 0 { "/* " } else { " * " };
            let _ = writeln!(o, "{lead}{line}");
        }
        let _ = writeln!(o, " */");
        let _ = writeln!(o, "{decl}");
    }
    o.push_str(
        "
#ifdef __cplusplus
} /* extern \"C\" */
#endif

#endif /* TANDEM_H */
",
    );
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::ControlBlock;
    use crate::ring::RingHeader;
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
}
