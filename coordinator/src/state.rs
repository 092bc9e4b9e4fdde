//! Per-client and per-GPU statistics, and the stats snapshot served as JSON
//! (and rendered as Prometheus text by [`crate::metrics`]).

use std::collections::HashMap;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use tandem_proto::record::FLAG_VMM_HANDLE;
use tandem_proto::wire::FuncAttrs;
use tandem_proto::{EventKind, Record};

use crate::dedup::stats::{ClientDedup, DedupTotals, GpuDedupStats};
use crate::follow::stats::{ClientFollow, FollowTotals};

/// Most distinct kernels tracked per client (more are counted, not named).
pub const MAX_KERNELS_PER_CLIENT: usize = 4096;
/// Most kernel names kept per client.
pub const MAX_NAMES_PER_CLIENT: usize = 4096;
/// Most live allocations tracked per client for `bytes_allocated`.
pub const MAX_LIVE_ALLOCS_PER_CLIENT: usize = 1 << 16;
/// Kernels listed in `top_kernels`.
pub const TOP_KERNELS: usize = 10;

/// What a live allocation is known by: a device address, or the handle of
/// a physical allocation the program made with `cuMemCreate` (a handle may
/// equal some address: they are kept apart).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum AllocKey {
    Address(u64),
    Handle(u64),
}

impl AllocKey {
    fn of(r: &Record) -> AllocKey {
        if r.flags & FLAG_VMM_HANDLE != 0 {
            AllocKey::Handle(r.addr)
        } else {
            AllocKey::Address(r.addr)
        }
    }
}

/// Counters derived from one client's ring records.
#[derive(Debug, Default)]
pub struct ClientStats {
    /// Records consumed (valid or not).
    pub records: u64,
    /// Launch records of every kind.
    pub launches: u64,
    /// `cuLaunchKernelEx` records.
    pub launches_ex: u64,
    /// `cuGraphLaunch` records.
    pub graph_launches: u64,
    /// Kernel nodes in launched graphs (sum of graph launch `bytes`).
    pub graph_kernels: u64,
    /// Records the coordinator could not use (unknown kind), plus ring faults.
    pub bad_records: u64,
    /// Allocations.
    pub allocs: u64,
    /// Frees.
    pub frees: u64,
    /// Bytes allocated and not yet freed (matched by address; memory the
    /// program creates through the VMM API by its handle).
    pub bytes_allocated: u64,
    /// Host-to-device copies.
    pub copies: u64,
    /// Bytes copied host to device.
    pub h2d_bytes: u64,
    /// Synchronisations (SYNC_BEGIN records).
    pub syncs: u64,
    /// Launches per func_id (LAUNCH and LAUNCH_EX only; graph ids are exec handles).
    kernels: HashMap<u64, u64>,
    /// Launches whose func_id did not fit in `kernels`.
    pub kernels_untracked: u64,
    /// Kernel names and attributes from FuncName messages.
    names: HashMap<u64, (String, Option<FuncAttrs>)>,
    live_allocs: HashMap<AllocKey, u64>,
    rate_hz: f64,
    rate_at: Option<(Instant, u64)>,
}

impl ClientStats {
    /// Account one record. Returns the raw kind if it is unknown (the caller warns once).
    pub fn apply(&mut self, r: &Record) -> Result<(), u16> {
        self.records += 1;
        let kind = match r.kind() {
            Ok(k) => k,
            Err(_) => {
                self.bad_records += 1;
                return Err(r.kind);
            }
        };
        if kind.is_launch() {
            self.launches += 1;
        }
        match kind {
            EventKind::LAUNCH | EventKind::LAUNCH_EX => {
                if kind == EventKind::LAUNCH_EX {
                    self.launches_ex += 1;
                }
                if let Some(n) = self.kernels.get_mut(&r.func_id) {
                    *n += 1;
                } else if self.kernels.len() < MAX_KERNELS_PER_CLIENT {
                    self.kernels.insert(r.func_id, 1);
                } else {
                    self.kernels_untracked += 1;
                }
            }
            EventKind::GRAPH_LAUNCH => {
                self.graph_launches += 1;
                self.graph_kernels = self.graph_kernels.saturating_add(r.bytes);
            }
            EventKind::ALLOC => {
                self.allocs += 1;
                let key = AllocKey::of(r);
                if self.live_allocs.len() < MAX_LIVE_ALLOCS_PER_CLIENT
                    || self.live_allocs.contains_key(&key)
                {
                    if let Some(old) = self.live_allocs.insert(key, r.bytes) {
                        self.bytes_allocated = self.bytes_allocated.saturating_sub(old);
                    }
                    self.bytes_allocated = self.bytes_allocated.saturating_add(r.bytes);
                }
            }
            EventKind::FREE => {
                self.frees += 1;
                if let Some(b) = self.live_allocs.remove(&AllocKey::of(r)) {
                    self.bytes_allocated = self.bytes_allocated.saturating_sub(b);
                }
            }
            EventKind::COPY_H2D => {
                self.copies += 1;
                self.h2d_bytes = self.h2d_bytes.saturating_add(r.bytes);
            }
            EventKind::SYNC_BEGIN => self.syncs += 1,
            _ => {}
        }
        Ok(())
    }

    /// Remember a kernel's name and attributes (bounded; a later name for
    /// the same id wins).
    pub fn set_name(&mut self, func_id: u64, name: &[u8], attrs: Option<FuncAttrs>) -> bool {
        if self.names.len() >= MAX_NAMES_PER_CLIENT && !self.names.contains_key(&func_id) {
            return false;
        }
        let name = String::from_utf8_lossy(name).into_owned();
        self.names.insert(func_id, (name, attrs));
        true
    }

    /// Whether the name table is full (a new function's name is dropped).
    #[must_use]
    pub fn names_full(&self) -> bool {
        self.names.len() >= MAX_NAMES_PER_CLIENT
    }

    /// The name of `func_id`, if the client sent one.
    #[must_use]
    pub fn name(&self, func_id: u64) -> Option<&str> {
        self.names.get(&func_id).map(|(n, _)| n.as_str())
    }

    /// The name and attributes of `func_id`, if the client sent them.
    #[must_use]
    pub fn func(&self, func_id: u64) -> Option<(&str, Option<FuncAttrs>)> {
        self.names.get(&func_id).map(|(n, a)| (n.as_str(), *a))
    }

    /// Update the launch-rate EWMA (time constant 1 s); call every tick.
    pub fn tick_rate(&mut self, now: Instant) {
        match self.rate_at {
            None => self.rate_at = Some((now, self.launches)),
            Some((t, n)) => {
                let dt = now.duration_since(t).as_secs_f64();
                if dt >= 0.05 {
                    let inst = (self.launches - n) as f64 / dt;
                    let alpha = 1.0 - (-dt).exp();
                    self.rate_hz += alpha * (inst - self.rate_hz);
                    self.rate_at = Some((now, self.launches));
                }
            }
        }
    }

    /// Launches per second, smoothed over about a second.
    #[must_use]
    pub fn rate_hz(&self) -> f64 {
        self.rate_hz
    }

    /// The `n` most launched kernels, most first (ties by id).
    #[must_use]
    pub fn top_kernels(&self, n: usize) -> Vec<KernelSnapshot> {
        let mut v: Vec<(u64, u64)> = self.kernels.iter().map(|(&k, &c)| (k, c)).collect();
        v.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v.truncate(n);
        v.into_iter()
            .map(|(id, launches)| KernelSnapshot {
                func_id: format!("{id:#x}"),
                name: self.name(id).map(str::to_string),
                launches,
            })
            .collect()
    }
}

/// Format a device UUID the way `nvidia-smi -L` does.
#[must_use]
pub fn format_uuid(u: &[u8; 16]) -> String {
    let h: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

// ---------------------------------------------------------------------------
// The snapshot (JSON shape of GET /stats)
// ---------------------------------------------------------------------------

/// `GET /stats`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Snapshot {
    /// tandemd version.
    pub version: String,
    /// Wire protocol version.
    pub protocol: u16,
    /// tandemd's pid.
    pub pid: u32,
    /// Seconds since start.
    pub uptime_s: f64,
    /// The GPU sharing mode in force (time slicing, or time slicing over
    /// MPS); null from daemons that predate it.
    #[serde(default)]
    pub sharing: Option<crate::mps::SharingSnapshot>,
    /// The main socket.
    pub socket: String,
    /// The configuration file (which may not exist: defaults).
    pub config_path: String,
    /// GPUs seen in Device messages.
    pub gpus: Vec<GpuSnapshot>,
    /// Registered clients.
    pub clients: Vec<ClientSnapshot>,
    /// Daemon-wide counters.
    pub totals: Totals,
    /// Final state of the most recent clients that left (newest last; not in
    /// the contract's list, an addition for `tandemctl run`).
    #[serde(default)]
    pub departed: Vec<ClientSnapshot>,
    /// Weight deduplication, all GPUs together.
    #[serde(default)]
    pub dedup: DedupTotals,
    /// Follow mode: the shared regions and their counters.
    #[serde(default)]
    pub follow: FollowTotals,
}

/// One GPU.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct GpuSnapshot {
    /// `GPU-xxxxxxxx-...`.
    pub uuid: String,
    /// Device name.
    pub name: String,
    /// Ids of the clients on it now.
    pub clients: Vec<u64>,
    /// Launches on it, by every client ever seen on it.
    pub launches: u64,
    /// Share (0..1) of the recent estimated GPU work on it that was training
    /// (the scheduler's view; null while it tracks no client there).
    #[serde(default)]
    pub training_share: Option<f64>,
    /// Whether an inference request is active on it now (the scheduler's
    /// view; null while it tracks no client there).
    #[serde(default)]
    pub inference_active: Option<bool>,
    /// The GPU board's slot of this GPU (what the training shims react to
    /// without tandemd): explicit requests the inference shims count open
    /// on it now, and their announcements so far. Null without a slot.
    #[serde(default)]
    pub board_requests_open: Option<u64>,
    /// See `board_requests_open`.
    #[serde(default)]
    pub board_announcements: Option<u64>,
    /// Its SMs, as its shims report them (null: none reported).
    #[serde(default)]
    pub sms: Option<u32>,
    /// The SMs scheduler v3's reservation leaves to inference on it, learnt
    /// from the widths of inference's kernels there (null: none learnt).
    #[serde(default)]
    pub spatial_reserve_sms: Option<u32>,
    /// Inference launches that reservation is learnt from (the last 128).
    #[serde(default)]
    pub spatial_widths: u64,
    /// Weight deduplication on it (`dedup_*` fields).
    #[serde(flatten)]
    pub dedup: GpuDedupStats,
}

/// One kernel of `top_kernels`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct KernelSnapshot {
    /// Hex string `0x...`.
    pub func_id: String,
    /// The name, if the client sent one.
    pub name: Option<String>,
    /// Launches.
    pub launches: u64,
}

/// One client.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ClientSnapshot {
    /// Client id.
    pub id: u64,
    /// pid (SO_PEERCRED).
    pub pid: u32,
    /// uid (SO_PEERCRED).
    pub uid: u32,
    /// Executable.
    pub exe: String,
    /// cgroup.
    pub cgroup: String,
    /// Its parent, grandparent and so on at registration, nearest first
    /// (pid 1 left out): how `tandemctl run` finds the processes of a job
    /// started through a wrapper such as `sh -c`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ancestors: Vec<u32>,
    /// Class granted.
    pub class: String,
    /// Class claimed.
    pub class_claimed: String,
    /// Why this class.
    pub class_reason: String,
    /// GPU uuid, if known.
    pub gpu: Option<String>,
    /// Seconds since registration.
    pub connected_s: f64,
    /// Launch records of every kind.
    pub launches: u64,
    /// cuLaunchKernelEx.
    pub launches_ex: u64,
    /// cuGraphLaunch.
    pub graph_launches: u64,
    /// Kernel nodes in launched graphs.
    pub graph_kernels: u64,
    /// Launches per second (1 s EWMA).
    pub launch_rate_hz: f64,
    /// Records consumed.
    pub records: u64,
    /// Records the client dropped (ring full or busy; the client's own count).
    pub dropped: u64,
    /// Records or ring states the coordinator rejected.
    pub bad_records: u64,
    /// Whether the ring was detached after garbage was found in it.
    pub ring_detached: bool,
    /// Live device bytes (alloc minus free by address; the program's own
    /// `cuMemCreate` minus `cuMemRelease` by handle).
    pub bytes_allocated: u64,
    /// Allocations.
    pub allocs: u64,
    /// Frees.
    pub frees: u64,
    /// Host-to-device copies.
    pub copies: u64,
    /// Host-to-device bytes.
    pub h2d_bytes: u64,
    /// Synchronisations.
    pub syncs: u64,
    /// Time launches waited on the gate, ns (0 until the control block carries it).
    pub gate_wait_ns: u64,
    /// Launches that found the gate closed (client's count).
    pub gate_waits: u64,
    /// Gate waits that hit their bound (client's count).
    pub gate_timeouts: u64,
    /// Completion marks placed (client's count; 0 while none are asked for).
    #[serde(default)]
    pub marks_placed: u64,
    /// Completion marks seen complete (client's count).
    #[serde(default)]
    pub marks_done: u64,
    /// Estimated ns of work the client launched and has not seen complete
    /// (its local in-flight bound's measure; client's count).
    #[serde(default)]
    pub inflight_ns: u64,
    /// Launches that waited at the local in-flight bound (client's count).
    #[serde(default)]
    pub local_waits: u64,
    /// Nanoseconds they waited (client's count).
    #[serde(default)]
    pub local_wait_ns: u64,
    /// Most launched kernels.
    pub top_kernels: Vec<KernelSnapshot>,
    /// The scheduler's view of the client (absent when it does not track it).
    #[serde(default)]
    pub sched: Option<SchedStats>,
    /// Weight sharing.
    #[serde(default)]
    pub dedup: ClientDedup,
    /// Follow mode.
    #[serde(default)]
    pub follow: ClientFollow,
    /// The pod and container it runs in (null: a host process).
    #[serde(default)]
    pub pod: Option<crate::containers::PodSnapshot>,
    /// The Slurm job it runs in (null: none).
    #[serde(default)]
    pub slurm: Option<crate::slurm::SlurmJob>,
    /// The `CUDA_MPS_CLIENT_PRIORITY` it was told to join tandem's MPS
    /// daemon with (0 normal, 1 below normal); null: not told to join.
    #[serde(default)]
    pub mps_priority: Option<u8>,
    /// Scheduler v3's SM reservation (null: not asked of this client).
    #[serde(default)]
    pub spatial: Option<ClientSpatial>,
}

/// A client's SM reservation (`"spatial"` of a client in `GET /stats`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ClientSpatial {
    /// The share of its GPU's TPCs it is asked to leave to inference while
    /// inference is active, now: learnt from inference's kernel widths on
    /// its GPU (`spatial_reserve_sms` of the GPU), at most `reserve_max`.
    pub reserve: f64,
    /// The most it may be asked (`[scheduler] spatial_reserve`).
    #[serde(default)]
    pub reserve_max: f64,
    /// Launches whose blocks hold their SMs shorter than this (their
    /// estimate over their waves) are not masked, ns.
    pub min_kernel_ns: u64,
    /// Launches whose blocks hold their SMs at least this long carry the
    /// mask while inference is idle too, ns (published while an inference
    /// client is on its GPU; 0: only while inference is active).
    #[serde(default)]
    pub standing_kernel_ns: u64,
    /// What the shim made of it (its claim): `idle` (no launch has asked
    /// yet), `armed`, or why it runs unmasked: `no_callback_table`,
    /// `callback_refused`, `no_sm_count`, `unsupported_gpu`,
    /// `unknown_descriptor`, `no_descriptor`, `no_callback_on_thread`,
    /// `descriptor_mismatch` (`tandem_proto::spatial::SpatialState`).
    pub state: String,
    /// With `unknown_descriptor` and `descriptor_mismatch`: the descriptor
    /// version the shim met.
    pub descriptor_version: Option<u8>,
    /// Launches that carried the mask (the shim's count).
    pub masked_launches: u64,
}

/// The scheduler's view of one client (`"sched"` in `GET /stats`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SchedStats {
    /// Estimated GPU work the client has queued, ns.
    pub backlog_ns: u64,
    /// Whether its gate is open (inference gates always are).
    pub gate_open: bool,
    /// Inference requests completed (0 for training).
    pub requests: u64,
    /// Median request latency over the recent window, ms.
    pub p50_ms: Option<f64>,
    /// p99 request latency over the recent window, ms.
    pub p99_ms: Option<f64>,
    /// The p99 target from `[[scheduler.slo]]`, ms (none configured: null).
    pub slo_p99_target_ms: Option<f64>,
    /// Share (0..1) of the recent GPU work on the client's GPU that was
    /// training.
    pub train_share: f64,
    /// Launches the client may start beyond those the scheduler has seen
    /// (its launch limit is its launch counter plus this); null: unlimited.
    #[serde(default)]
    pub launch_allowance: Option<u64>,
    /// Completion marks of the client that measured its launches.
    #[serde(default)]
    pub marks_measured: u64,
    /// The mark interval tandemd asks of the client, ns (0: no marks;
    /// training clients only).
    #[serde(default)]
    pub mark_every_ns: u64,
    /// The local in-flight bound tandemd set, ns, while no inference is
    /// active on the GPU (null: no bound).
    #[serde(default)]
    pub local_idle_ns: Option<u64>,
    /// The same while inference is active.
    #[serde(default)]
    pub local_active_ns: Option<u64>,
    /// Completed requests since registration, cumulative per latency bound
    /// (`tandem_sched::LATENCY_BUCKETS_NS`, then +Inf).
    #[serde(default)]
    pub latency_buckets: Vec<u64>,
    /// Sum of those requests' latencies, ns.
    #[serde(default)]
    pub latency_sum_ns: u64,
}

/// Daemon-wide counters.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Totals {
    /// Clients registered now.
    pub clients: u64,
    /// Launches by every client since start (departed ones included).
    pub launches: u64,
    /// Records dropped by every client since start.
    pub dropped: u64,
    /// Clients whose resources were reclaimed after they went away.
    pub clients_reclaimed: u64,
    /// Connections refused (malformed, wrong version, too many, timeouts, ...).
    pub rejected: u64,
    /// Clients registered since start.
    pub clients_registered: u64,
    /// Connections that sent nothing within the handshake timeout.
    pub handshake_timeouts: u64,
    /// Bad records and ring faults, all clients, since start.
    pub bad_records: u64,
    /// Control operations refused for lack of privilege.
    pub control_denied: u64,
    /// Configuration reloads that succeeded.
    pub reloads: u64,
    /// Configuration reloads that failed (old configuration kept).
    pub reload_failures: u64,
    /// Connections refused for a protocol version other than tandemd's, by
    /// the peer's version (a shim from another release: rolling upgrades).
    #[serde(default)]
    pub version_mismatches: std::collections::BTreeMap<String, u64>,
}

/// A client row for tests, as the stats socket's JSON: every field at a
/// neutral value, then the JSON fields in `set` over it.
#[cfg(test)]
pub fn test_client_json(id: u64, set: serde_json::Value) -> serde_json::Value {
    let mut v = serde_json::json!({
        "id": id, "pid": 10 + id, "uid": 0, "exe": "/x", "cgroup": "/",
        "class": "training", "class_claimed": "auto", "class_reason": "r", "gpu": null,
        "connected_s": 1.0, "launches": 0, "launches_ex": 0, "graph_launches": 0,
        "graph_kernels": 0, "launch_rate_hz": 0.0, "records": 0, "dropped": 0,
        "bad_records": 0, "ring_detached": false, "bytes_allocated": 0, "allocs": 0,
        "frees": 0, "copies": 0, "h2d_bytes": 0, "syncs": 0, "gate_wait_ns": 0,
        "gate_waits": 0, "gate_timeouts": 0, "top_kernels": []
    });
    let serde_json::Value::Object(fields) = set else {
        panic!("test_client_json: `set` must be a JSON object");
    };
    v.as_object_mut().unwrap().extend(fields);
    v
}

/// [`test_client_json`] as a [`ClientSnapshot`].
#[cfg(test)]
pub fn test_client(id: u64, set: serde_json::Value) -> ClientSnapshot {
    serde_json::from_value(test_client_json(id, set)).unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(kind: EventKind, func_id: u64, bytes: u64, addr: u64) -> Record {
        Record {
            func_id,
            bytes,
            addr,
            ..Record::new(kind, 1)
        }
    }

    #[test]
    fn program_vmm_memory_is_counted_by_handle_apart_from_addresses() {
        let vmm = |kind, bytes, handle| Record {
            flags: FLAG_VMM_HANDLE,
            ..rec(kind, 0, bytes, handle)
        };
        let mut s = ClientStats::default();
        // A handle whose value equals a live address: two allocations.
        s.apply(&rec(EventKind::ALLOC, 0, 100, 0x1000)).unwrap();
        s.apply(&vmm(EventKind::ALLOC, 2 << 20, 0x1000)).unwrap();
        assert_eq!(s.bytes_allocated, 100 + (2 << 20));
        // cuMemFree of the address leaves the handle's memory counted...
        s.apply(&rec(EventKind::FREE, 0, 0, 0x1000)).unwrap();
        assert_eq!(s.bytes_allocated, 2 << 20);
        // ...and a release of an unknown handle changes nothing.
        s.apply(&vmm(EventKind::FREE, 0, 0x2000)).unwrap();
        assert_eq!(s.bytes_allocated, 2 << 20);
        s.apply(&vmm(EventKind::FREE, 0, 0x1000)).unwrap();
        assert_eq!(s.bytes_allocated, 0);
        assert_eq!((s.allocs, s.frees), (2, 3));
    }

    #[test]
    fn counts_by_kind() {
        let mut s = ClientStats::default();
        for _ in 0..3 {
            s.apply(&rec(EventKind::LAUNCH, 7, 0, 0)).unwrap();
        }
        s.apply(&rec(EventKind::LAUNCH_EX, 9, 0, 0)).unwrap();
        s.apply(&rec(EventKind::GRAPH_LAUNCH, 0x55, 12, 0)).unwrap();
        s.apply(&rec(EventKind::ALLOC, 0, 100, 0x1000)).unwrap();
        s.apply(&rec(EventKind::ALLOC, 0, 50, 0x2000)).unwrap();
        s.apply(&rec(EventKind::FREE, 0, 0, 0x1000)).unwrap();
        s.apply(&rec(EventKind::FREE, 0, 0, 0x9999)).unwrap();
        s.apply(&rec(EventKind::COPY_H2D, 0, 4096, 0x2000)).unwrap();
        s.apply(&rec(EventKind::SYNC_BEGIN, 0, 0, 0)).unwrap();
        s.apply(&rec(EventKind::SYNC_END, 0, 0, 0)).unwrap();
        let bad = Record {
            kind: 999,
            ..Record::ZERO
        };
        assert_eq!(s.apply(&bad), Err(999));
        assert_eq!(s.records, 13);
        assert_eq!(s.launches, 5);
        assert_eq!(s.launches_ex, 1);
        assert_eq!(s.graph_launches, 1);
        assert_eq!(s.graph_kernels, 12);
        assert_eq!(s.bytes_allocated, 50);
        assert_eq!((s.allocs, s.frees), (2, 2));
        assert_eq!((s.copies, s.h2d_bytes), (1, 4096));
        assert_eq!(s.syncs, 1);
        assert_eq!(s.bad_records, 1);
        assert!(s.set_name(7, b"k7", None));
        let top = s.top_kernels(10);
        assert_eq!(top.len(), 2);
        assert_eq!(top[0].func_id, "0x7");
        assert_eq!(top[0].name.as_deref(), Some("k7"));
        assert_eq!(top[0].launches, 3);
        assert_eq!(top[1].name, None);
    }

    #[test]
    fn kernel_table_is_bounded() {
        let mut s = ClientStats::default();
        for i in 0..(MAX_KERNELS_PER_CLIENT as u64 + 10) {
            s.apply(&rec(EventKind::LAUNCH, i, 0, 0)).unwrap();
        }
        assert_eq!(s.kernels_untracked, 10);
        assert_eq!(s.top_kernels(TOP_KERNELS).len(), TOP_KERNELS);
    }

    #[test]
    fn uuid_format() {
        let u = [
            0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0, 1, 2, 3, 4, 5, 6, 7,
        ];
        assert_eq!(format_uuid(&u), "GPU-12345678-9abc-def0-0001-020304050607");
    }
}
