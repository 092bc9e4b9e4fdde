//! What the scheduler is told: [`Input`], about clients ([`ClientId`]) of a
//! [`Class`].

use serde::{Deserialize, Serialize};

/// The coordinator's id of a registered client.
pub type ClientId = u64;

/// A client's class, as the scheduler sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Class {
    /// Latency-sensitive: its gate is always open; its requests are measured.
    Inference,
    /// Throughput: its gate follows its budget.
    Training,
}

/// What the scheduler is told. Times (`ts_ns`) are the record's
/// `CLOCK_MONOTONIC` timestamps, taken by the shim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    /// A client registered (or registered again: class, GPU and SLO are updated).
    Register {
        /// Its id.
        client: ClientId,
        /// Class granted.
        class: Class,
        /// Hash of the device uuid; 0 = unknown.
        gpu: u64,
        /// Optional p99 latency target, ns (inference).
        slo_p99_ns: Option<u64>,
    },
    /// The operator changed a client's class.
    SetClass {
        /// Its id.
        client: ClientId,
        /// New class.
        class: Class,
    },
    /// A client left (no output is emitted for it).
    Depart {
        /// Its id.
        client: ClientId,
    },
    /// LAUNCH or LAUNCH_EX.
    Launch {
        /// Its id.
        client: ClientId,
        /// The record's stable function id.
        func_id: u64,
        /// The record's timestamp.
        ts_ns: u64,
    },
    /// GRAPH_LAUNCH.
    GraphLaunch {
        /// Its id.
        client: ClientId,
        /// Kernel nodes in the graph (0 = unknown, counted as 1).
        kernels: u32,
        /// The record's timestamp.
        ts_ns: u64,
    },
    /// SYNC_BEGIN.
    SyncBegin {
        /// Its id.
        client: ClientId,
        /// The record's timestamp.
        ts_ns: u64,
    },
    /// SYNC_END: the client's work had drained at `ts_ns`.
    SyncEnd {
        /// Its id.
        client: ClientId,
        /// The record's timestamp.
        ts_ns: u64,
    },
    /// REQUEST_BEGIN (`tandem_request_begin`).
    RequestBegin {
        /// Its id.
        client: ClientId,
        /// The record's timestamp.
        ts_ns: u64,
    },
    /// REQUEST_END (`tandem_request_end`).
    RequestEnd {
        /// Its id.
        client: ClientId,
        /// The record's timestamp.
        ts_ns: u64,
    },
    /// MARK: the client placed completion mark `seq` right after the launches
    /// it had made so far (`seq` rises per client, from 1).
    Mark {
        /// Its id.
        client: ClientId,
        /// The mark's sequence number (the record's `func_id`).
        seq: u64,
        /// The record's timestamp.
        ts_ns: u64,
    },
    /// MARK_DONE: the GPU had reached mark `seq` by `ts_ns`.
    MarkDone {
        /// Its id.
        client: ClientId,
        /// The mark's sequence number (the record's `func_id`).
        seq: u64,
        /// The record's timestamp.
        ts_ns: u64,
    },
}
