//! Registered clients: registration (region + Welcome), their rings, the
//! messages they send after registering, class changes, and reclaim.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use tandem_proto::ring::{self, Consumer, RingLayout};
use tandem_proto::shm::{self, Mapping};
use tandem_proto::wire::{ClientClass, Device, Hello, RejectReason, Welcome};
use tandem_proto::{monotonic_ns, ControlBlock, EventKind, Record};
use tracing::{debug, info, warn};

use crate::config::Config;
use crate::dedup::stats::ClientDedup;
use crate::follow::stats::ClientFollow;
use crate::limits::Limits;
use crate::policy::{decide, Decision, Who};
use crate::sched::{self, Class, Input, Output, SchedConfig, Scheduler};
use crate::state::{
    format_uuid, ClientSnapshot, ClientStats, GpuSnapshot, SchedStats, Totals, TOP_KERNELS,
};

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

    /// The control block (gate, heartbeat).
    pub fn control(&self) -> Option<&ControlBlock> {
        ring::control_block(&self.map, self.layout).ok()
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
    last_beat: Instant,
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
    /// Its trust group, when it was given the share flag (decided once, at
    /// registration).
    pub trust_group: Option<String>,
    /// Its follow group (the trust group rule of `[[dedup.group]]`, whether
    /// or not it shares weights), when it was granted follow mode (decided
    /// once, at registration).
    pub follow_group: Option<String>,
    warned_kind: bool,
}

/// A GPU seen in Device messages.
#[derive(Debug, Default)]
pub struct Gpu {
    /// Device name.
    pub name: String,
    /// Launches of clients that have left, while on this GPU.
    pub retired_launches: u64,
}

/// Every client, GPU and counter. Lives behind one mutex in [`crate::daemon::Shared`].
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
    sched: Scheduler,
    /// `[scheduler]` as configured (before the scheduler's clamping).
    sched_cfg: SchedConfig,
    /// Scratch for the scheduler's outputs (reused: no allocation per record).
    sched_out: Vec<Output>,
    /// The scheduler's launch allowances as stored launch limits.
    limits: Limits,
}

impl Default for Registry {
    fn default() -> Self {
        Registry::new(SchedConfig::default())
    }
}

/// What one [`Registry::poll`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Poll {
    /// Records consumed.
    pub records: usize,
    /// When (`CLOCK_MONOTONIC` ns) the scheduler next wants a tick, if ever
    /// before new records arrive.
    pub next_tick_ns: Option<u64>,
    /// Gates this pass opened (their clients launch at once: look again soon).
    pub gates_opened: usize,
}

/// Departed clients kept for `tandemctl run` and post-mortems.
pub const MAX_DEPARTED: usize = 64;

/// Why a registration failed: the Reject to send.
pub type Refusal = (RejectReason, String);

/// The scheduler's GPU group of a device uuid (never 0, which means unknown).
#[must_use]
pub fn gpu_key(uuid: &[u8; 16]) -> u64 {
    let (a, b) = uuid.split_at(8);
    let a = u64::from_le_bytes(a.try_into().unwrap_or_default());
    let b = u64::from_le_bytes(b.try_into().unwrap_or_default());
    (a ^ b.rotate_left(29)).max(1)
}

/// The scheduler's class of a granted class.
fn sched_class(c: ClientClass) -> Class {
    match c {
        ClientClass::Inference => Class::Inference,
        ClientClass::Training | ClientClass::Auto => Class::Training,
    }
}

/// The scheduler input a ring record is, if any. `ts` is the record's
/// timestamp as the caller bounded it.
fn sched_input(client: u64, r: &Record, ts_ns: u64) -> Option<Input> {
    Some(match r.kind().ok()? {
        EventKind::LAUNCH | EventKind::LAUNCH_EX => Input::Launch {
            client,
            func_id: r.func_id,
            ts_ns,
        },
        EventKind::GRAPH_LAUNCH => Input::GraphLaunch {
            client,
            kernels: u32::try_from(r.bytes).unwrap_or(u32::MAX),
            ts_ns,
        },
        EventKind::SYNC_BEGIN => Input::SyncBegin { client, ts_ns },
        EventKind::SYNC_END => Input::SyncEnd { client, ts_ns },
        EventKind::REQUEST_BEGIN => Input::RequestBegin { client, ts_ns },
        EventKind::REQUEST_END => Input::RequestEnd { client, ts_ns },
        EventKind::MARK => Input::Mark {
            client,
            seq: r.func_id,
            ts_ns,
        },
        EventKind::MARK_DONE => Input::MarkDone {
            client,
            seq: r.func_id,
            ts_ns,
        },
        _ => return None,
    })
}

/// Apply the scheduler's outputs to the clients' control blocks: mark
/// intervals and launch limits first (so a gate that opens finds its limit
/// in place), then gate changes. Returns how many gates it opened.
fn apply_gates(
    clients: &BTreeMap<u64, Client>,
    limits: &mut Limits,
    out: &mut Vec<Output>,
) -> usize {
    let control = |id: u64| {
        clients
            .get(&id)
            .and_then(|c| c.ring.as_ref())
            .and_then(Ring::control)
    };
    for o in out.iter() {
        match *o {
            Output::Limit { client, beyond } => limits.set(client, beyond),
            Output::Marks { client, every_ns } => {
                if let Some(cb) = control(client) {
                    cb.set_mark_every_ns(every_ns);
                }
            }
            Output::Gate { .. } => {}
        }
    }
    limits.store(control);
    let mut opened = 0;
    for o in out.drain(..) {
        let Output::Gate { client, open } = o else {
            continue;
        };
        let Some(cb) = control(client) else {
            continue;
        };
        if open {
            opened += 1;
            if let Err(e) = cb.open_gate() {
                debug!(client, "FUTEX_WAKE after opening the gate failed: {e}");
            }
        } else {
            cb.close_gate();
        }
    }
    opened
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
        }
    }

    /// Feed one input to the scheduler now and apply its gate changes.
    fn sched_event(&mut self, input: Input) {
        self.sched
            .handle(monotonic_ns(), input, &mut self.sched_out);
        // A gate opened here is looked at again at the reader's next pass.
        apply_gates(&self.clients, &mut self.limits, &mut self.sched_out);
    }

    /// The scheduler's view (for tests and the stats).
    #[must_use]
    pub fn scheduler(&self) -> &Scheduler {
        &self.sched
    }

    /// Register a client: decide its class, create its region, and return the
    /// Welcome to send with the region fd.
    pub fn register(
        &mut self,
        cfg: &Config,
        daemon_euid: u32,
        who: Who,
        hello: &Hello<'_>,
    ) -> Result<(Welcome, OwnedFd), Refusal> {
        if self.clients.len() >= cfg.max_clients as usize {
            return Err((
                RejectReason::TOO_MANY_CLIENTS,
                format!(
                    "tandemd serves at most {} clients (max_clients); this job runs unscheduled",
                    cfg.max_clients
                ),
            ));
        }
        self.next_id += 1;
        let id = self.next_id;
        let (fd, ring) = Ring::create(id, cfg.ring_capacity).map_err(|e| {
            warn!(
                pid = who.pid,
                "cannot create a ring region for a new client: {e}"
            );
            (
                RejectReason::INTERNAL,
                format!("tandemd could not create the shared ring: {e}"),
            )
        })?;
        let decision = decide(cfg, daemon_euid, &who, hello.class);
        let granted = decision.class;
        let exe = who
            .exe
            .clone()
            .unwrap_or_else(|| format!("{} (claimed)", String::from_utf8_lossy(hello.exe)));
        let cgroup = who
            .cgroup
            .clone()
            .unwrap_or_else(|| String::from_utf8_lossy(hello.cgroup).into_owned());
        let dedup_flags = cfg.dedup.welcome_flags(hello.flags, granted);
        let trust_group = (dedup_flags != 0).then(|| cfg.dedup.group_of(&who));
        let follow_flags = cfg.follow.welcome_flags(hello.flags);
        let follow_group = (follow_flags != 0).then(|| cfg.dedup.group_of(&who));
        let flags = dedup_flags | follow_flags;
        let welcome = Welcome {
            client_id: id,
            region_len: ring.layout.region_len() as u64,
            ring_capacity: ring.layout.capacity(),
            heartbeat_interval_ms: cfg.heartbeat_interval_ms,
            class: decision.class,
            flags,
        };
        info!(
            client = id,
            pid = who.pid,
            uid = who.uid,
            exe = %exe,
            class = decision.class.name(),
            reason = %decision.reason,
            share_weights = trust_group.as_deref().unwrap_or("no"),
            follow = follow_group.as_deref().unwrap_or("no"),
            "client registered"
        );
        let now = Instant::now();
        self.clients.insert(
            id,
            Client {
                id,
                exe,
                cgroup,
                claimed: hello.class,
                decision,
                operator_set: false,
                seen_training_kernel: false,
                gpu: None,
                gpu_ordinal: None,
                connected: now,
                heartbeat: Duration::from_millis(u64::from(cfg.heartbeat_interval_ms)),
                last_beat: now,
                stats: ClientStats::default(),
                ring: Some(ring),
                dropped: 0,
                gate_waits: 0,
                gate_timeouts: 0,
                gate_wait_ns: 0,
                marks_placed: 0,
                marks_done: 0,
                trust_group,
                follow_group,
                warned_kind: false,
                who,
            },
        );
        self.totals.clients_registered += 1;
        // The GPU comes with the Device message (then the client registers
        // again with the scheduler, in its GPU's group).
        let slo_p99_ns = self
            .clients
            .get(&id)
            .and_then(|c| slo_of(&self.sched_cfg, c));
        self.sched_event(Input::Register {
            client: id,
            class: sched_class(granted),
            gpu: 0,
            slo_p99_ns,
        });
        Ok((welcome, fd))
    }

    /// A FuncName from client `id`. For a client whose class is being
    /// detected (`auto_class = "detect"`), a training kernel makes it training.
    pub fn func_name(&mut self, id: u64, func_id: u64, name: &[u8]) {
        let Some(c) = self.clients.get_mut(&id) else {
            return;
        };
        if !c.stats.set_name(func_id, name) {
            debug!(client = id, "kernel name table full; name ignored");
        }
        if !c.decision.detecting {
            return;
        }
        let Some(marker) = crate::autoclass::training_marker(name) else {
            return;
        };
        let shown: String = String::from_utf8_lossy(name).chars().take(120).collect();
        c.decision = Decision {
            class: ClientClass::Training,
            reason: format!("auto: saw training kernel {shown:?} ({marker})"),
            detecting: false,
        };
        c.seen_training_kernel = true;
        info!(client = id, kernel = %shown, "auto: training kernel seen; class training");
        self.sched_event(Input::SetClass {
            client: id,
            class: sched_class(ClientClass::Training),
        });
    }

    /// A Device from client `id`.
    pub fn device(&mut self, id: u64, d: &Device<'_>) {
        let name = String::from_utf8_lossy(d.name).into_owned();
        if let Some(c) = self.clients.get_mut(&id) {
            if c.gpu.is_none() || c.gpu != Some(d.uuid) {
                info!(client = id, gpu = %format_uuid(&d.uuid), name = %name, ordinal = d.ordinal, "client device");
            }
            // Launches counted so far stay with the old GPU, if any.
            if let Some(old) = c.gpu.filter(|u| *u != d.uuid) {
                self.gpus.entry(old).or_default().retired_launches += c.stats.launches;
            }
            c.gpu = Some(d.uuid);
            c.gpu_ordinal = Some(d.ordinal);
            let class = sched_class(c.decision.class);
            let slo_p99_ns = slo_of(&self.sched_cfg, c);
            let g = self.gpus.entry(d.uuid).or_default();
            if g.name.is_empty() || !name.is_empty() {
                g.name = name;
            }
            self.sched_event(Input::Register {
                client: id,
                class,
                gpu: gpu_key(&d.uuid),
                slo_p99_ns,
            });
        }
    }

    /// Drain every attached ring (feeding the scheduler), beat heartbeats,
    /// update rates, tick the scheduler and apply its gate changes.
    pub fn poll(&mut self, now: Instant) -> Poll {
        let mut total = 0;
        for c in self.clients.values_mut() {
            // The launch counter before the records: see crate::limits.
            if let Some(cb) = c.ring.as_ref().and_then(Ring::control) {
                self.limits.observe(c.id, cb);
            }
            total += drain_client(c, &mut self.totals, &mut self.sched, &mut self.sched_out);
            if let Some(cb) = c.ring.as_ref().and_then(Ring::control) {
                if now.duration_since(c.last_beat) >= c.heartbeat {
                    cb.beat();
                    c.last_beat = now;
                }
            }
            c.stats.tick_rate(now);
        }
        let next_tick_ns = self.sched.tick(monotonic_ns(), &mut self.sched_out);
        let gates_opened = apply_gates(&self.clients, &mut self.limits, &mut self.sched_out);
        Poll {
            records: total,
            next_tick_ns,
            gates_opened,
        }
    }

    /// Remove client `id` (it hung up or misbehaved): final drain, account,
    /// unmap its region. Returns whether it existed.
    pub fn reclaim(&mut self, id: u64, why: &str) -> bool {
        let Some(mut c) = self.clients.remove(&id) else {
            return false;
        };
        drain_client(
            &mut c,
            &mut self.totals,
            &mut self.sched,
            &mut self.sched_out,
        );
        if self.departed.len() >= MAX_DEPARTED {
            self.departed.pop_front();
        }
        let sched = self.sched.snapshot();
        let mut snap = client_snapshot(&c, Instant::now());
        snap.sched = sched_stats(&sched, id);
        self.departed.push_back(snap);
        self.sched_event(Input::Depart { client: id });
        self.limits.forget(id);
        self.retired_launches += c.stats.launches;
        self.retired_dropped += c.dropped;
        if let Some(g) = c.gpu {
            self.gpus.entry(g).or_default().retired_launches += c.stats.launches;
        }
        self.totals.clients_reclaimed += 1;
        info!(
            client = id,
            pid = c.who.pid,
            launches = c.stats.launches,
            dropped = c.dropped,
            "client gone ({why}); ring reclaimed"
        );
        drop(c); // munmap
        true
    }

    /// Operator: set the class of `id` (`Auto` = back to the policy's decision).
    pub fn set_class(
        &mut self,
        cfg: &Config,
        daemon_euid: u32,
        id: u64,
        class: ClientClass,
        by_uid: u32,
    ) -> Result<String, String> {
        let c = self
            .clients
            .get_mut(&id)
            .ok_or_else(|| format!("no client with id {id} (see tandemctl status)"))?;
        if class == ClientClass::Auto {
            c.decision = decide(cfg, daemon_euid, &c.who, c.claimed);
            c.operator_set = false;
        } else {
            c.decision = Decision {
                class,
                reason: format!("set by operator (uid {by_uid})"),
                detecting: false,
            };
            c.operator_set = true;
        }
        info!(client = id, class = c.decision.class.name(), reason = %c.decision.reason, "class changed");
        let msg = format!(
            "client {id} is now {} ({})",
            c.decision.class.name(),
            c.decision.reason
        );
        let class = sched_class(c.decision.class);
        self.sched_event(Input::SetClass { client: id, class });
        Ok(msg)
    }

    /// A new configuration: re-decide every class the operator did not set,
    /// and hand the scheduler its new parameters.
    pub fn reapply_policy(&mut self, cfg: &Config, daemon_euid: u32) {
        let mut changed = Vec::new();
        for c in self.clients.values_mut().filter(|c| !c.operator_set) {
            let d = decide(cfg, daemon_euid, &c.who, c.claimed);
            // What the kernel stream showed stays true under a new config that
            // still detects.
            if d.detecting && c.decision.class == ClientClass::Training && c.seen_training_kernel {
                continue;
            }
            if d != c.decision {
                info!(client = c.id, class = d.class.name(), reason = %d.reason, "class changed by new configuration");
                changed.push((c.id, sched_class(d.class)));
                c.decision = d;
            }
        }
        for (client, class) in changed {
            self.sched_event(Input::SetClass { client, class });
        }
        if cfg.scheduler != self.sched_cfg {
            info!(enabled = cfg.scheduler.enabled, "scheduler reconfigured");
            self.sched_cfg = cfg.scheduler.clone();
            self.sched
                .reconfigure(cfg.scheduler.clone(), &mut self.sched_out);
            // SLO targets may have changed: register every placed client again.
            for c in self.clients.values() {
                if let Some(uuid) = c.gpu {
                    let input = Input::Register {
                        client: c.id,
                        class: sched_class(c.decision.class),
                        gpu: gpu_key(&uuid),
                        slo_p99_ns: slo_of(&self.sched_cfg, c),
                    };
                    self.sched
                        .handle(monotonic_ns(), input, &mut self.sched_out);
                }
            }
            apply_gates(&self.clients, &mut self.limits, &mut self.sched_out);
        }
    }

    /// Client and GPU snapshots plus totals.
    #[must_use]
    pub fn snapshot(&self, now: Instant) -> (Vec<GpuSnapshot>, Vec<ClientSnapshot>, Totals) {
        let sched = self.sched.snapshot();
        let clients: Vec<ClientSnapshot> = self
            .clients
            .values()
            .map(|c| {
                let mut s = client_snapshot(c, now);
                s.sched = sched_stats(&sched, c.id);
                s
            })
            .collect();
        let gpus = self
            .gpus
            .iter()
            .map(|(uuid, g)| {
                let on: Vec<&Client> = self
                    .clients
                    .values()
                    .filter(|c| c.gpu == Some(*uuid))
                    .collect();
                GpuSnapshot {
                    uuid: format_uuid(uuid),
                    name: g.name.clone(),
                    clients: on.iter().map(|c| c.id).collect(),
                    launches: g.retired_launches + on.iter().map(|c| c.stats.launches).sum::<u64>(),
                    training_share: sched
                        .gpus
                        .iter()
                        .find(|s| s.gpu == gpu_key(uuid))
                        .map(|s| s.training_share),
                    dedup: Default::default(),
                }
            })
            .collect();
        let mut totals = self.totals.clone();
        totals.clients = self.clients.len() as u64;
        totals.launches = self.retired_launches + clients.iter().map(|c| c.launches).sum::<u64>();
        totals.dropped = self.retired_dropped + clients.iter().map(|c| c.dropped).sum::<u64>();
        (gpus, clients, totals)
    }
}

/// Client `c`'s p99 target from `[[scheduler.slo]]` (the kernel's view of
/// who it is), ns.
fn slo_of(cfg: &SchedConfig, c: &Client) -> Option<u64> {
    cfg.slo_for(c.who.uid, c.who.exe.as_deref(), c.who.cgroup.as_deref())
        .map(|m| m.p99_ns)
}

/// The scheduler's statistics of client `id` in the stats' shape.
fn sched_stats(s: &sched::SchedSnapshot, id: u64) -> Option<SchedStats> {
    let c = s.clients.iter().find(|c| c.client == id)?;
    let ms = |ns: u64| ns as f64 / 1e6;
    Some(SchedStats {
        backlog_ns: c.backlog_ns,
        gate_open: c.gate_open,
        requests: c.requests,
        p50_ms: c.p50_ns.map(ms),
        p99_ms: c.p99_ns.map(ms),
        slo_p99_target_ms: c.slo_p99_ns.map(ms),
        train_share: c.train_share,
        launch_allowance: match c.allowance {
            sched::Allowance::Unlimited => None,
            sched::Allowance::Launches(n) => Some(n),
        },
        marks_measured: c.marks_measured,
        mark_every_ns: c.mark_every_ns,
    })
}

/// Drain one client's ring into its stats and the scheduler (gate changes
/// are left in `out`); on garbage, warn once, count, and detach the ring.
fn drain_client(
    c: &mut Client,
    totals: &mut Totals,
    sched: &mut Scheduler,
    out: &mut Vec<Output>,
) -> usize {
    let Some(ring) = c.ring.as_mut() else {
        return 0;
    };
    let stats = &mut c.stats;
    let id = c.id;
    let mut unknown: Option<u16> = None;
    let mut bad = 0u64;
    let mut now = monotonic_ns();
    let res = ring.consumer.drain(|r| {
        if let Err(raw) = stats.apply(r) {
            bad += 1;
            unknown.get_or_insert(raw);
            return;
        }
        // The timestamp is the client's claim: never later than our clock
        // (re-read once if the record was pushed after we last read it), so
        // one client cannot push the scheduler's time ahead.
        if r.ts_ns > now {
            now = monotonic_ns();
        }
        if let Some(input) = sched_input(id, r, r.ts_ns.min(now)) {
            sched.handle(now, input, out);
        }
    });
    totals.bad_records += bad;
    if let (Some(raw), false) = (unknown, c.warned_kind) {
        c.warned_kind = true;
        warn!(
            client = c.id,
            pid = c.who.pid,
            "client wrote a record of unknown kind {raw} into its ring; such records are counted in bad_records and skipped (warned once)"
        );
    }
    match res {
        Ok(n) => {
            let s = ring.consumer.stats();
            c.dropped = s.dropped_full.saturating_add(s.dropped_busy);
            if let Some(cb) = ring.control() {
                let k = cb.client_counters();
                c.gate_waits = k.gate_waits;
                c.gate_timeouts = k.gate_timeouts;
                c.gate_wait_ns = k.gate_wait_ns;
                c.marks_placed = k.marks_placed;
                c.marks_done = k.marks_done;
            }
            n
        }
        Err(e) => {
            c.stats.bad_records += 1;
            totals.bad_records += 1;
            warn!(
                client = c.id,
                pid = c.who.pid,
                exe = %c.exe,
                "garbage in the client's ring: {e}; ring detached, the client keeps running unscheduled"
            );
            c.ring = None;
            0
        }
    }
}

fn client_snapshot(c: &Client, now: Instant) -> ClientSnapshot {
    ClientSnapshot {
        id: c.id,
        pid: c.who.pid,
        uid: c.who.uid,
        exe: c.exe.clone(),
        cgroup: c.cgroup.clone(),
        class: c.decision.class.name().into(),
        class_claimed: c.claimed.name().into(),
        class_reason: c.decision.reason.clone(),
        gpu: c.gpu.as_ref().map(format_uuid),
        connected_s: now.duration_since(c.connected).as_secs_f64(),
        launches: c.stats.launches,
        launches_ex: c.stats.launches_ex,
        graph_launches: c.stats.graph_launches,
        graph_kernels: c.stats.graph_kernels,
        launch_rate_hz: c.stats.rate_hz(),
        records: c.stats.records,
        dropped: c.dropped,
        bad_records: c.stats.bad_records,
        ring_detached: c.ring.is_none(),
        bytes_allocated: c.stats.bytes_allocated,
        allocs: c.stats.allocs,
        frees: c.stats.frees,
        copies: c.stats.copies,
        h2d_bytes: c.stats.h2d_bytes,
        syncs: c.stats.syncs,
        gate_wait_ns: c.gate_wait_ns,
        gate_waits: c.gate_waits,
        gate_timeouts: c.gate_timeouts,
        marks_placed: c.marks_placed,
        marks_done: c.marks_done,
        top_kernels: c.stats.top_kernels(TOP_KERNELS),
        sched: None,
        dedup: ClientDedup {
            share_weights: c.trust_group.is_some(),
            trust_group: c.trust_group.clone(),
            shared_bytes: 0,
            candidate_granules: 0,
            private_bytes: c.stats.bytes_allocated,
        },
        follow: ClientFollow {
            granted: c.follow_group.is_some(),
            group: c.follow_group.clone(),
            shared_bytes: 0,
            mapped_bytes: 0,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tandem_proto::wire::{
        HELLO_FLAG_FOLLOW, HELLO_FLAG_SHARE_WEIGHTS, WELCOME_FLAG_FOLLOW,
        WELCOME_FLAG_SHARE_WEIGHTS,
    };

    fn register(cfg: &Config, flags: u8) -> (u8, Option<String>, Option<String>) {
        let mut r = Registry::default();
        let who = Who {
            pid: 42,
            uid: 1234,
            ..Who::default()
        };
        let hello = Hello {
            pid: 42,
            class: ClientClass::Training,
            flags,
            exe: b"/x",
            cgroup: b"/",
        };
        let (w, _fd) = r.register(cfg, 0, who, &hello).unwrap();
        let c = &r.clients[&w.client_id];
        (w.flags, c.trust_group.clone(), c.follow_group.clone())
    }

    #[test]
    fn follow_is_granted_only_when_asked_and_enabled_with_its_own_group() {
        let cfg = Config::default();
        let uid = Some("uid:1234".to_string());
        // Follow alone: the follow flag and group, no weight sharing.
        assert_eq!(
            register(&cfg, HELLO_FLAG_FOLLOW),
            (WELCOME_FLAG_FOLLOW, None, uid.clone())
        );
        // Not asked: no follow bit (an older shim rejects unknown bits).
        assert_eq!(register(&cfg, 0), (0, None, None));
        assert_eq!(
            register(&cfg, HELLO_FLAG_SHARE_WEIGHTS),
            (WELCOME_FLAG_SHARE_WEIGHTS, uid.clone(), None)
        );
        assert_eq!(
            register(&cfg, HELLO_FLAG_SHARE_WEIGHTS | HELLO_FLAG_FOLLOW),
            (
                WELCOME_FLAG_SHARE_WEIGHTS | WELCOME_FLAG_FOLLOW,
                uid.clone(),
                uid.clone()
            )
        );
        // Disabled: never granted.
        let mut off = Config::default();
        off.follow.enabled = false;
        assert_eq!(register(&off, HELLO_FLAG_FOLLOW), (0, None, None));
        // The group follows [[dedup.group]], even with weight sharing off.
        let mut grouped = Config::default();
        grouped.dedup.enabled = false;
        grouped.dedup.groups.push(crate::dedup::TrustGroup {
            name: "models".into(),
            uids: vec![1234],
            ..Default::default()
        });
        assert_eq!(
            register(&grouped, HELLO_FLAG_FOLLOW | HELLO_FLAG_SHARE_WEIGHTS),
            (WELCOME_FLAG_FOLLOW, None, Some("models".into()))
        );
    }
}
