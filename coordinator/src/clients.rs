//! The client table: every registered client (its identity, class, ring and
//! counters), the GPUs they reported, and the scheduler that the table feeds.
//!
//! * this file — the table's types and its link to the scheduler (events in,
//!   their outputs applied through [`crate::grant`]);
//! * `lifecycle` — registration (region + Welcome), FuncName and Device
//!   messages, class changes, reloads and reclaim;
//! * `snapshot` — the clients and GPUs as `GET /stats` shows them.
//!
//! Draining the clients' rings is [`crate::drain`]; who may claim which class
//! is [`crate::admission`].

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use tandem_proto::estimates::EstimateTable;
use tandem_proto::ring::{self, Consumer, RingLayout, RingStats};
use tandem_proto::shm::{self, Mapping};
use tandem_proto::wire::{ClientClass, RejectReason};
use tandem_proto::{monotonic_ns, ControlBlock, Record};

use crate::admission::{Decision, Who};
use crate::board::NodeBoard;
use crate::grant::{self, Limits};
use crate::sched::{Class, Input, Output, SchedConfig, Scheduler};
use crate::state::{ClientSnapshot, ClientStats, Totals};

mod lifecycle;
mod snapshot;

/// One client's shared region and our consumer of its ring.
pub struct Ring {
    // Field order matters: `consumer` points into `map` and is dropped first.
    consumer: Consumer<'static>,
    map: Mapping,
    layout: RingLayout,
}

impl Ring {
    /// Create a sealed region for client `id` with `capacity` records.
    pub fn create(id: u64, capacity: u32) -> tandem_proto::Result<(OwnedFd, Ring)> {
        let layout = RingLayout::new(capacity)?;
        let name = CString::new(format!("tandem-client-{id}")).unwrap_or_default();
        let (fd, map) = shm::create(&name, layout.region_len())?;
        // SAFETY: `map` is a live shared mapping of `map.len()` bytes whose
        // address never changes while it exists; it is stored in the same Ring
        // and declared after `consumer`, so it outlives every use of the
        // consumer and is unmapped only after the consumer is dropped. This is
        // the only consumer of the region.
        let consumer = unsafe { Consumer::init_raw(map.as_ptr(), map.len(), layout, id)? };
        Ok((
            fd,
            Ring {
                consumer,
                map,
                layout,
            },
        ))
    }

    /// Consume every record published so far, oldest first ([`Consumer::drain`]).
    pub fn drain(&mut self, f: impl FnMut(&Record)) -> tandem_proto::Result<usize> {
        self.consumer.drain(f)
    }

    /// The ring's counters as the consumer reads them (drops included).
    #[must_use]
    pub fn stats(&self) -> RingStats {
        self.consumer.stats()
    }

    /// The control block (gate, heartbeat).
    pub fn control(&self) -> Option<&ControlBlock> {
        ring::control_block(&self.map, self.layout).ok()
    }

    /// The estimate table tandemd publishes into.
    pub fn estimates(&self) -> Option<&EstimateTable> {
        ring::estimates(&self.map, self.layout).ok()
    }
}

/// A registered client.
pub struct Client {
    /// Id (also in the control block).
    pub id: u64,
    /// Kernel-reported identity.
    pub who: Who,
    /// Executable shown in stats (/proc, else the Hello's claim marked as such).
    pub exe: String,
    /// cgroup shown in stats.
    pub cgroup: String,
    /// Claimed class.
    pub claimed: ClientClass,
    /// Granted class and why.
    pub decision: Decision,
    /// An operator set the class (policy reloads leave it alone).
    pub operator_set: bool,
    /// `auto_class = "detect"` saw a training kernel of this client.
    pub seen_training_kernel: bool,
    /// GPU from the Device message.
    pub gpu: Option<[u8; 16]>,
    /// The device ordinal the client reported with it (its own numbering).
    pub gpu_ordinal: Option<u32>,
    /// Registration time.
    pub connected: Instant,
    /// Heartbeat period announced in the Welcome.
    pub heartbeat: Duration,
    pub(crate) last_beat: Instant,
    /// Counters.
    pub stats: ClientStats,
    /// The ring; `None` once detached after garbage.
    pub ring: Option<Ring>,
    /// Records the client says it dropped (last value read from its ring).
    pub dropped: u64,
    /// Gate counters last read from the control block.
    pub gate_waits: u64,
    /// Gate counters last read from the control block.
    pub gate_timeouts: u64,
    /// Nanoseconds the client's launches waited at a closed gate (control block).
    pub gate_wait_ns: u64,
    /// Completion marks the shim placed (control block).
    pub marks_placed: u64,
    /// Completion marks the shim saw complete (control block).
    pub marks_done: u64,
    /// The shim's local-bound counters as last read (control block).
    pub local: tandem_proto::control::ClientCounters,
    /// Its trust group, when it was given the share flag (decided once, at
    /// registration).
    pub trust_group: Option<String>,
    /// Its follow group (the trust group rule of `[[dedup.group]]`, whether
    /// or not it shares weights), when it was granted follow mode (decided
    /// once, at registration).
    pub follow_group: Option<String>,
    /// How it was told to join tandem's MPS daemon (decided once, at
    /// registration: CUDA reads it when it initialises).
    pub mps: Option<tandem_proto::mps::MpsJoin>,
    /// Joined MPS at low priority: its local bound is this (`[mps]
    /// training_inflight_ns`; 0: none), and no gate or launch limit holds it
    /// ([`grant::mps_adjust`]).
    pub mps_inflight_ns: Option<u64>,
    /// The SM reservation asked of it (decided once, at registration).
    pub spatial: tandem_proto::spatial::Spatial,
    /// The reservation published to it now, thousandths of its GPU's TPCs
    /// (learnt from inference's widths, at most `spatial`'s).
    pub spatial_now: u64,
    /// The standing threshold published to it now: `spatial`'s while an
    /// inference client is on its GPU, else 0.
    pub spatial_standing_now: u64,
    pub(crate) warned_kind: bool,
    /// The GPU board its shim was sent: `None` before (and when its shim did
    /// not ask), else whether writable. A client granted the inference class
    /// after it got a read-only board is owed a writable one
    /// ([`Registry::take_owed_boards`]).
    pub(crate) board_sent: Option<bool>,
    /// Its recent records for `tandemctl trace` (empty when capture is off).
    pub capture: crate::capture::Window,
}

/// A GPU seen in Device messages.
#[derive(Debug, Default)]
pub struct Gpu {
    /// Device name.
    pub name: String,
    /// Launches of clients that have left, while on this GPU.
    pub retired_launches: u64,
    /// Its SMs, as its shims report them (the latest).
    pub shape: Option<tandem_proto::wire::DeviceShape>,
    /// Its inference launches' widths (scheduler v3's reservation).
    pub widths: Option<crate::spatial::GpuWidths>,
}

/// Every client, GPU and counter. Lives behind one mutex in [`crate::shared::Shared`].
pub struct Registry {
    /// By id.
    pub clients: BTreeMap<u64, Client>,
    /// By UUID.
    pub gpus: BTreeMap<[u8; 16], Gpu>,
    /// Counters (`clients`, `launches`, `dropped` are filled at snapshot).
    pub totals: Totals,
    retired_launches: u64,
    retired_dropped: u64,
    next_id: u64,
    /// Final snapshots of the last clients that left, newest last.
    pub departed: std::collections::VecDeque<ClientSnapshot>,
    /// The gate policy: fed every record and registry event; its gate
    /// changes are applied to the clients' control blocks.
    pub(crate) sched: Scheduler,
    /// `[scheduler]` as configured (before the scheduler's clamping).
    sched_cfg: SchedConfig,
    /// Scratch for the scheduler's outputs (reused: no allocation per record).
    pub(crate) sched_out: Vec<Output>,
    /// The scheduler's launch allowances as stored launch limits.
    pub(crate) limits: Limits,
    /// The node's GPU board (`None`: it could not be created; shims then
    /// have only the gates and limits).
    pub(crate) board: Option<NodeBoard>,
    /// Clients granted the inference class after their shim got a read-only
    /// board: the daemon sends each a writable one
    /// ([`Registry::take_owed_boards`]).
    boards_owed: Vec<u64>,
    /// Scratch for the GPUs an inference client is on (reused by every
    /// poll that publishes reservations: no allocation per poll).
    pub(crate) inference_gpus: Vec<[u8; 16]>,
    /// `[trace]` in force (its mark interval for clients the scheduler
    /// asks none of).
    pub(crate) trace_cfg: crate::capture::TraceConfig,
}

impl Default for Registry {
    fn default() -> Self {
        Registry::new(SchedConfig::default())
    }
}

/// Departed clients kept for `tandemctl run` and post-mortems.
pub const MAX_DEPARTED: usize = 64;

/// Most GPUs the table keeps (far more than a node has, MIG instances
/// included): a GPU is added by any client's Device message, a claim, and
/// GPUs no client is on make room for new ones.
pub const MAX_GPUS: usize = 256;

/// Why a registration failed: the Reject to send.
pub type Refusal = (RejectReason, String);

/// The scheduler's GPU group of a device uuid (never 0, which means unknown):
/// the board's key too, one function for shim and tandemd.
pub use tandem_proto::board::gpu_key;

/// The scheduler's class of a granted class.
fn sched_class(c: ClientClass) -> Class {
    match c {
        ClientClass::Inference => Class::Inference,
        ClientClass::Training | ClientClass::Auto => Class::Training,
    }
}

impl Registry {
    /// An empty registry whose scheduler uses `sched_cfg`.
    #[must_use]
    pub fn new(sched_cfg: SchedConfig) -> Self {
        Registry {
            clients: BTreeMap::new(),
            gpus: BTreeMap::new(),
            totals: Totals::default(),
            retired_launches: 0,
            retired_dropped: 0,
            next_id: 0,
            departed: std::collections::VecDeque::new(),
            sched: Scheduler::new(sched_cfg.clone()),
            sched_cfg,
            sched_out: Vec::new(),
            limits: Limits::default(),
            board: match NodeBoard::create() {
                Ok(b) => Some(b),
                Err(e) => {
                    tracing::warn!(
                        "cannot create the GPU board: {e}; training jobs will yield to inference only through tandemd's gates (slower)"
                    );
                    None
                }
            },
            boards_owed: Vec::new(),
            inference_gpus: Vec::new(),
            trace_cfg: crate::capture::TraceConfig::default(),
        }
    }

    /// The clients owed a board since the last call: a writable one (granted
    /// the inference class after their shim got a read-only one), or any
    /// (the last could not be sent). No allocation when there are none.
    pub(crate) fn take_owed_boards(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.boards_owed)
    }

    /// Whether a client is owed a board.
    pub(crate) fn owes_boards(&self) -> bool {
        !self.boards_owed.is_empty()
    }

    /// Client `id`'s board could not be sent: it has none, and is owed one.
    pub(crate) fn board_unsent(&mut self, id: u64) {
        if let Some(c) = self.clients.get_mut(&id) {
            c.board_sent = None;
            if !self.boards_owed.contains(&id) {
                self.boards_owed.push(id);
            }
        }
    }

    /// Feed one input to the scheduler now and apply its gate changes.
    pub(crate) fn sched_event(&mut self, input: Input) {
        // The shim learns its class from its control block (scheduler v2:
        // inference announces itself on the board, training bounds itself).
        if let Input::Register { client, class, .. } | Input::SetClass { client, class } = input {
            if let Some(c) = self.clients.get(&client) {
                if let Some(cb) = c.ring.as_ref().and_then(Ring::control) {
                    cb.set_class(match class {
                        Class::Inference => tandem_proto::inflight::CLASS_INFERENCE,
                        Class::Training => tandem_proto::inflight::CLASS_TRAINING,
                    });
                }
                // Its shim announces itself on the board only through a
                // writable mapping (an operator's set-class, a reload).
                if class == Class::Inference
                    && c.board_sent == Some(false)
                    && !self.boards_owed.contains(&client)
                {
                    self.boards_owed.push(client);
                }
            }
        }
        self.sched
            .handle(monotonic_ns(), input, &mut self.sched_out);
        // A gate opened here is looked at again at the reader's next pass.
        self.apply_gates();
    }

    /// Apply the scheduler's pending outputs to the clients' control blocks
    /// ([`grant::apply`]). Returns how many gates it opened.
    pub(crate) fn apply_gates(&mut self) -> usize {
        // Capture: clients the scheduler asks no marks of get `[trace]`'s.
        for o in &mut self.sched_out {
            if let Output::Marks { every_ns, .. } = o {
                *every_ns = self.trace_cfg.marks(*every_ns);
            }
        }
        let clients = &self.clients;
        let ring = |id: u64| clients.get(&id).and_then(|c| c.ring.as_ref());
        grant::apply(
            &mut self.sched_out,
            &mut self.limits,
            |id| ring(id).and_then(Ring::control),
            |id| ring(id).and_then(Ring::estimates),
            |id| clients.get(&id).and_then(|c| c.mps_inflight_ns),
        )
    }

    /// `[scheduler]` as configured.
    #[must_use]
    pub fn sched_cfg(&self) -> &SchedConfig {
        &self.sched_cfg
    }

    /// The scheduler's view (for tests and the stats).
    #[must_use]
    pub fn scheduler(&self) -> &Scheduler {
        &self.sched
    }
}

/// Client `c`'s p99 target from `[[scheduler.slo]]` (the kernel's view of
/// who it is), ns.
fn slo_of(cfg: &SchedConfig, c: &Client) -> Option<u64> {
    cfg.slo_for(c.who.uid, c.who.exe.as_deref(), c.who.cgroup.as_deref())
        .map(|m| m.p99_ns)
}
