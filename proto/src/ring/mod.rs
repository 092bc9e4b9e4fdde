//! The per-client single-producer/single-consumer ring in shared memory.
//!
//! # Region layout
//!
//! One shared region (a sealed memfd created by the coordinator) holds, in order:
//!
//! | offset | size            | what |
//! |-------:|----------------:|------|
//! | 0      | 128             | [`RingHeader`] line 0: magic, layout version, geometry (written once at init) |
//! | 128    | 128             | [`RingHeader`] line 1: `head`, drop counters (producer writes) |
//! | 256    | 128             | [`RingHeader`] line 2: `tail` (consumer writes) |
//! | 384    | 256             | [`ControlBlock`](crate::ControlBlock) (gate, heartbeat; client counters) |
//! | 640    | `capacity * 64` | the [`Record`](crate::Record) slots |
//!
//! [`RingLayout`] computes these numbers so both sides agree.
//!
//! # Protocol
//!
//! `head` and `tail` are free-running `u64` counts of records pushed and
//! popped; the slot of position `p` is `p & (capacity - 1)`. Only the producer
//! (the shim) writes `head`, only the consumer (the coordinator) writes `tail`.
//! Each side keeps its own authoritative copy of its index and of the capacity
//! and never re-reads them from shared memory, so a peer scribbling on the
//! header cannot steer either side out of bounds.
//!
//! Records are copied in and out as eight relaxed 64-bit atomic accesses:
//! these compile to plain moves, and they make a concurrent write by a
//! misbehaving peer a defined (if garbage-producing) race rather than UB.
//!
//! The producer never blocks: when the ring is full [`Producer::push`] bumps a
//! drop counter and returns `false`. The consumer treats everything in the
//! region as untrusted: impossible indices, a changed magic or geometry, or a
//! tail it did not write are reported as typed [`Error`](crate::Error)s, never as panics or
//! out-of-bounds reads.
//!
//! `ring/layout.rs` holds the region's geometry and checks, `ring/producer.rs` the
//! shim's end, `ring/consumer.rs` the coordinator's; every public name is
//! re-exported here, at `tandem_proto::ring::*`.

mod consumer;
mod layout;
mod producer;
#[cfg(test)]
mod tests;

pub use consumer::Consumer;
pub use layout::{
    control_block, estimates, region_size, RingHeader, RingLayout, RingStats, CONTROL_OFFSET,
    DEFAULT_CAPACITY, MAX_CAPACITY, MIN_CAPACITY, RECORDS_OFFSET, REGION_ALIGN, RING_HEADER_SIZE,
    RING_LAYOUT_VERSION, RING_MAGIC,
};
pub use producer::{Producer, SyncProducer};
