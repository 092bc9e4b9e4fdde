//! `tandem-proto`: the one definition of every layout shared between the
//! `LD_PRELOAD`ed shim (`libtandem.so`) and the coordinator (`tandemd`).
//!
//! * [`record`]: the 64-byte [`Record`] and its [`EventKind`].
//! * [`ring`]: the lock-free SPSC ring in a shared region ([`Producer`],
//!   [`SyncProducer`], [`Consumer`], [`RingLayout`]).
//! * [`control`]: the per-client [`ControlBlock`] (gate, heartbeat) and the
//!   bounded futex wrappers; [`inflight`]: the budgets and counters of the
//!   shim's local in-flight bound in it.
//! * [`board`]: the per-node GPU board through which inference shims tell
//!   training shims they are active, with no coordinator in the loop.
//! * [`estimates`]: the per-client table of kernel duration estimates, keyed
//!   by function and grid, that the shim charges launches with.
//! * [`shm`]: sealed memfd regions and the owned [`Mapping`].
//! * [`wire`]: the Hello / Welcome / Reject messages and SCM_RIGHTS transport.
//! * [`dedup`]: the weight-deduplication message ([`wire`] type 8).
//! * [`follow`]: the follow-mode message ([`wire`] type 9).
//! * [`mps`]: tandem over MPS: the Welcome's MPS tail and the environment
//!   variables it becomes in the client.
//! * [`magic`]: the magic numbers, versions and bounds each layout is
//!   recognised by (a leaf: the layouts and [`error`] both quote them).
//! * [`header`]: renders `include/tandem.h`, the C mirror of the above.
//!
//! # Connection flow
//!
//! ```text
//! shim                                   tandemd
//! ----                                   -------
//! connect($TANDEM_SOCKET, SEQPACKET)
//! send Hello{pid, class, exe, cgroup} -> decode, check SO_PEERCRED and policy
//!                                        layout = RingLayout::new(cap)
//!                                        (fd, map) = shm::create(name, layout.region_len())
//!                                        consumer = Consumer::init(&map, layout, id)
//!                                     <- send Welcome{id, cap, region_len, ..} + fd
//! map = shm::map_received(fd, region_len)        (or Reject{reason, message})
//! producer = Producer::attach(&map, welcome.layout())
//! control  = ring::control_block(&map, layout)
//! per launch: control.gate_is_open() || control.wait_open(..); producer.push(&rec)
//! ```
//!
//! Everything on the shim's launch path (`push`, `gate_is_open`) is
//! allocation-free, lock-free and syscall-free; wire encoding and decoding
//! work on caller buffers and never allocate.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod board;
mod bytes;
pub mod control;
pub mod dedup;
pub mod error;
pub mod estimates;
pub mod follow;
pub mod header;
pub mod inflight;
pub mod magic;
pub mod mps;
pub mod paths;
pub mod record;
pub mod ring;
pub mod shm;
pub mod spatial;
mod sync;
pub mod wire;

pub use control::{ControlBlock, GateWait};
pub use error::{Error, Result};
pub use header::c_header;
pub use record::{func_id, monotonic_ns, EventKind, Record, FUNC_ID_UNNAMED};
pub use ring::{region_size, Consumer, Producer, RingLayout, RingStats, SyncProducer};
pub use shm::Mapping;
pub use wire::{ClientClass, Hello, Message, Reject, RejectReason, Welcome, PROTOCOL_VERSION};
