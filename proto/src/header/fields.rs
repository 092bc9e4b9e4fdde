//! The C field tables of the shared-memory structs ([`Record`],
//! [`RingHeader`], [`ControlBlock`]): each member's C type and name with the
//! offset and size `offset_of!` gives the Rust struct.

use core::mem::offset_of;

use crate::control::ControlBlock;
use crate::record::Record;
use crate::ring::RingHeader;

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
    pub(super) fn base_name(&self) -> &'static str {
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
        field!(
            ControlBlock,
            spatial_reserve,
            "uint64_t",
            "spatial_reserve",
            8,
            "TPCs left to inference while active, thousandths; 0 = off"
        ),
        field!(
            ControlBlock,
            spatial_min_ns,
            "uint64_t",
            "spatial_min_ns",
            8,
            "launches estimated shorter are not masked"
        ),
        field!(
            ControlBlock,
            spatial_standing_ns,
            "uint64_t",
            "spatial_standing_ns",
            8,
            "blocks this long are masked while inference idles too; 0 = off"
        ),
        field!(ControlBlock, pad0, "uint64_t", "pad0[4]", 32, ""),
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
        field!(
            ControlBlock,
            spatial_state,
            "uint64_t",
            "spatial_state",
            8,
            "shim: the reservation's state (kind | version << 8)"
        ),
        field!(
            ControlBlock,
            masked_launches,
            "uint64_t",
            "masked_launches",
            8,
            "shim: launches that carried the mask"
        ),
        field!(ControlBlock, pad1, "uint64_t", "pad1[1]", 8, ""),
    ]
}
