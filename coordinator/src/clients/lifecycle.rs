//! A client's life in the table: registration (its class, its region and
//! the Welcome), the FuncName and Device messages it sends after, class
//! changes by the operator or a new configuration, and reclaim.

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use tandem_proto::monotonic_ns;
use tandem_proto::mps::MpsJoin;
use tandem_proto::wire::{
    ClientClass, Device, FuncAttrs, Hello, RejectReason, Welcome, HELLO_FLAG_MPS,
    WELCOME_FLAG_DEVICE_SHAPE, WELCOME_FLAG_FUNC_ATTRS, WELCOME_FLAG_MPS,
};
use tracing::{debug, info, warn};

use super::snapshot::{client_snapshot, sched_stats};
use super::{
    gpu_key, sched_class, slo_of, Client, Refusal, Registry, Ring, MAX_DEPARTED, MAX_GPUS,
};
use crate::admission::{decide, Decision, Who};
use crate::config::Config;
use crate::drain::drain_client;
use crate::mps::Offer;
use crate::sched::Input;
use crate::spatial::GpuWidths;
use crate::state::{format_uuid, ClientStats};
use tandem_sched::SpatialMode;

impl Registry {
    /// Register a client: decide its class, create its region, and return the
    /// Welcome to send with the region fd. `mps`: what tandem over MPS offers
    /// now (`None` when it is not in force).
    pub fn register(
        &mut self,
        cfg: &Config,
        daemon_euid: u32,
        who: Who,
        hello: &Hello<'_>,
        mps: Option<&Offer>,
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
            if crate::sock::out_of_fds(e.errno()) {
                return (
                    RejectReason::TOO_MANY_CLIENTS,
                    crate::sock::client_limit_message(),
                );
            }
            warn!(
                pid = who.pid,
                "cannot create a ring region for a new client: {e}"
            );
            (
                RejectReason::INTERNAL,
                format!("tandemd could not create the shared ring: {e}"),
            )
        })?;
        self.trace_cfg = cfg.trace.clone();
        // Until the scheduler says otherwise (training clients), the marks
        // the capture asks for.
        if let Some(cb) = ring.control() {
            cb.set_mark_every_ns(cfg.trace.marks(0));
        }
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
        let mps_join = mps
            .filter(|_| hello.flags & HELLO_FLAG_MPS != 0)
            .and_then(|offer| self.mps_join(offer, &who, granted));
        // Scheduler v3's SM reservation, for a training job that joined MPS
        // below normal priority: outside MPS its kernels never run beside
        // inference's, and a mask would only cost it SMs.
        let spatial = spatial_request(
            &cfg.scheduler,
            mps_join.is_some_and(|j| j.priority == tandem_proto::mps::PRIORITY_BELOW_NORMAL),
        );
        if let Some(cb) = ring.control() {
            // The standing threshold only once an inference client is on
            // its GPU (`drain`'s `publish_reserves`).
            cb.set_spatial(tandem_proto::spatial::Spatial {
                standing_ns: 0,
                ..spatial
            });
        }
        // Under MPS a stray write into a shared read-only mapping would fail
        // every MPS job on the GPU, not only the writer (contract 6).
        let (dedup_flags, follow_flags) = if mps_join.is_some() {
            (0, 0)
        } else {
            (
                cfg.dedup.welcome_flags(hello.flags, granted),
                cfg.follow.welcome_flags(hello.flags),
            )
        };
        let trust_group = (dedup_flags != 0).then(|| cfg.dedup.group_of(&who));
        let follow_group = (follow_flags != 0).then(|| cfg.dedup.group_of(&who));
        // A capture writes a function's registers and shared memory into
        // its trace, and the SM reservation sizes itself by inference's
        // kernel widths: ask for them (the shim sends them only on this
        // flag), and for the GPU's SMs.
        let attrs_flag = if cfg.trace.window > 0 || cfg.scheduler.spatial == SpatialMode::Auto {
            WELCOME_FLAG_FUNC_ATTRS
        } else {
            0
        };
        let flags = dedup_flags
            | follow_flags
            | mps_join.map_or(0, |_| WELCOME_FLAG_MPS)
            | attrs_flag
            | WELCOME_FLAG_DEVICE_SHAPE;
        let welcome = Welcome {
            client_id: id,
            region_len: ring.layout.region_len() as u64,
            ring_capacity: ring.layout.capacity(),
            heartbeat_interval_ms: cfg.heartbeat_interval_ms,
            class: decision.class,
            flags,
            mps: mps_join,
        };
        info!(
            client = id,
            pid = who.pid,
            uid = who.uid,
            contained = who.contained(),
            pod = who.container.placement.as_ref().and_then(|p| p.pod_uid.as_deref()).unwrap_or("-"),
            container = who.container.placement.as_ref().and_then(|p| p.short_id()).unwrap_or("-"),
            slurm_job = %who.slurm.as_ref().map_or_else(|| "-".to_string(), |j| j.job.to_string()),
            exe = %exe,
            class = decision.class.name(),
            reason = %decision.reason,
            share_weights = trust_group.as_deref().unwrap_or("no"),
            follow = follow_group.as_deref().unwrap_or("no"),
            mps_priority = ?mps_join.map(|m| m.priority),
            spatial_reserve_permille = spatial.reserve_permille,
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
                local: Default::default(),
                trust_group,
                follow_group,
                mps: mps_join,
                mps_inflight_ns: mps_join
                    .filter(|j| j.priority == tandem_proto::mps::PRIORITY_BELOW_NORMAL)
                    .map(|_| cfg.mps.training_inflight_ns),
                spatial,
                spatial_now: spatial.reserve_permille,
                spatial_standing_now: 0,
                warned_kind: false,
                board_sent: None,
                capture: crate::capture::Window::new(cfg.trace.window),
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

    /// A descriptor of the GPU board for client `id` and the Board message
    /// flags: writable only for a client granted the inference class (it
    /// announces itself there; a training client only reads). `None`: no
    /// board, or no such client. Remembered as sent: a client given a
    /// read-only board and later the inference class is owed a writable one.
    pub fn board_for(&mut self, id: u64) -> Option<(OwnedFd, u8)> {
        let board = self.board.as_ref()?;
        let c = self.clients.get_mut(&id)?;
        let writable = c.decision.class == ClientClass::Inference;
        match board.descriptor(writable) {
            Ok(fd) => {
                c.board_sent = Some(writable);
                Some((
                    fd,
                    if writable {
                        tandem_proto::wire::BOARD_FLAG_WRITABLE
                    } else {
                        0
                    },
                ))
            }
            Err(e) => {
                warn!(client = id, "cannot hand out the GPU board: {e}");
                None
            }
        }
    }

    /// How a client of `who`, granted `class`, joins tandem's MPS daemon:
    /// not at all while jobs of another uid are in it (MPS runs one user's
    /// server at a time; a client of another uid would wait in `cuInit`
    /// until they are done), else as `offer` says for its class.
    fn mps_join(&self, offer: &Offer, who: &Who, class: ClientClass) -> Option<MpsJoin> {
        if let Some(other) = self
            .clients
            .values()
            .filter(|c| c.mps.is_some())
            .map(|c| c.who.uid)
            .find(|&u| u != who.uid)
        {
            info!(
                pid = who.pid,
                uid = who.uid,
                "runs outside MPS: MPS serves one user's jobs at a time, and jobs of uid {other} are in it"
            );
            return None;
        }
        offer.join(class)
    }

    /// A FuncName from client `id`. For a client whose class is being
    /// detected (`auto_class = "detect"`), a training kernel makes it training.
    pub fn func_name(&mut self, id: u64, func_id: u64, name: &[u8], attrs: Option<FuncAttrs>) {
        let Some(c) = self.clients.get_mut(&id) else {
            return;
        };
        if !c.stats.set_name(func_id, name, attrs) {
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
        // Its launches so far were counted as inference's: the reservation
        // must not keep sizing itself on a training job's forward pass.
        let gpu = c.gpu;
        if let Some(w) = gpu
            .and_then(|g| self.gpus.get_mut(&g))
            .and_then(|g| g.widths.as_mut())
        {
            let n = w.forget(id);
            if n > 0 {
                debug!(
                    client = id,
                    widths = n,
                    "auto: its launch widths taken out of the SM reservation"
                );
            }
        }
        self.sched_event(Input::SetClass {
            client: id,
            class: sched_class(ClientClass::Training),
        });
    }

    /// A Device from client `id`. Returns whether it was taken: `false` for
    /// an unknown client, or a GPU not seen yet while [`MAX_GPUS`] others
    /// have clients on them (the client stays where it was).
    pub fn device(&mut self, id: u64, d: &Device<'_>) -> bool {
        if !self.clients.contains_key(&id) {
            return false;
        }
        if !self.gpus.contains_key(&d.uuid) && !self.room_for_a_gpu() {
            crate::logging::warn_throttled(
                "too many gpus",
                &format!(
                    "client {id} reported GPU {}, and {MAX_GPUS} GPUs with clients on them are known already; its Device is ignored",
                    format_uuid(&d.uuid)
                ),
            );
            return false;
        }
        let name = String::from_utf8_lossy(d.name).into_owned();
        if let Some(c) = self.clients.get_mut(&id) {
            if c.gpu.is_none() || c.gpu != Some(d.uuid) {
                info!(client = id, gpu = %format_uuid(&d.uuid), name = %name, ordinal = d.ordinal, "client device");
            }
            // Launches counted so far stay with the old GPU, if any.
            let moved_from = c.gpu.filter(|u| *u != d.uuid);
            if let Some(old) = moved_from {
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
            if let Some(shape) = d.shape.filter(|s| g.shape != Some(*s)) {
                g.shape = Some(shape);
                g.widths = GpuWidths::new(shape, self.sched_cfg.spatial_reserve);
            }
            // The GPU's board slot exists from its first client on, so that a
            // training shim (whose board is read-only) finds it.
            if let Some(b) = &self.board {
                if b.claim(gpu_key(&d.uuid)).is_none() {
                    debug!(client = id, "the GPU board is full; this GPU has no slot");
                }
            }
            self.sched_event(Input::Register {
                client: id,
                class,
                gpu: gpu_key(&d.uuid),
                slo_p99_ns,
            });
            if let Some(old) = moved_from {
                self.release_board_slot_if_unused(old);
            }
        }
        true
    }

    /// Releases GPU `uuid`'s board slot once no client is on that GPU (the
    /// last one left or moved): each client then holds at most one slot,
    /// however many GPUs it reports, and a slot comes back for the next GPU.
    fn release_board_slot_if_unused(&mut self, uuid: [u8; 16]) {
        if self.clients.values().any(|c| c.gpu == Some(uuid)) {
            return;
        }
        if let Some(i) = self.board.as_ref().and_then(|b| b.release(gpu_key(&uuid))) {
            debug!(gpu = %format_uuid(&uuid), slot = i, "no client on this GPU any more; its board slot is free");
        }
    }

    /// Whether the GPU table may take one more GPU, after forgetting those
    /// no client is on now when it is full (their launches stay in the
    /// totals).
    fn room_for_a_gpu(&mut self) -> bool {
        if self.gpus.len() < MAX_GPUS {
            return true;
        }
        let on: std::collections::BTreeSet<[u8; 16]> =
            self.clients.values().filter_map(|c| c.gpu).collect();
        self.gpus.retain(|uuid, _| on.contains(uuid));
        self.gpus.len() < MAX_GPUS
    }

    /// Remove client `id` (it hung up or misbehaved): final drain, account,
    /// unmap its region. Returns whether it existed.
    pub fn reclaim(&mut self, id: u64, why: &str) -> bool {
        let Some(mut c) = self.clients.remove(&id) else {
            return false;
        };
        drain_client(
            &mut c,
            None,
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
        // Requests it left open on the board would hold its GPU's training
        // at the active budget for good. The slot and the count are its
        // control block's claims: only a client sent a writable board can
        // have counted any (a shim counts only there), and any other would
        // have tandemd clear, for it, what inference counts on the board
        // it may only read.
        if let (Some(b), Some(cb), Some(true)) = (
            &self.board,
            c.ring.as_ref().and_then(Ring::control),
            c.board_sent,
        ) {
            b.repair(cb.board_slot(), cb.requests_open());
        }
        if let Some(g) = c.gpu {
            self.release_board_slot_if_unused(g);
        }
        self.retired_launches += c.stats.launches;
        // A claim from the client's ring header: saturate, never overflow.
        self.retired_dropped = self.retired_dropped.saturating_add(c.dropped);
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
        self.trace_cfg = cfg.trace.clone();
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
            if cfg.scheduler.spatial_reserve != self.sched_cfg.spatial_reserve {
                // The reservation's cap: learn the widths again under it.
                for g in self.gpus.values_mut() {
                    g.widths = g
                        .shape
                        .and_then(|s| GpuWidths::new(s, cfg.scheduler.spatial_reserve));
                }
            }
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
            self.apply_gates();
        }
    }
}

/// The SM reservation tandemd asks of a new client: `[scheduler] spatial`'s
/// when it is `auto` and the client is a training job that joined MPS below
/// normal priority (`low_priority_mps`); otherwise none.
#[must_use]
pub fn spatial_request(
    cfg: &tandem_sched::SchedConfig,
    low_priority_mps: bool,
) -> tandem_proto::spatial::Spatial {
    if cfg.spatial != tandem_sched::SpatialMode::Auto || !low_priority_mps {
        return tandem_proto::spatial::Spatial::default();
    }
    tandem_proto::spatial::Spatial {
        reserve_permille: ((cfg.spatial_reserve * 1000.0).round() as u64).max(1),
        min_ns: cfg.spatial_min_kernel_ns,
        // Published only while an inference client is on the GPU (`drain`).
        standing_ns: cfg.spatial_standing_kernel_ns,
    }
}

#[cfg(test)]
mod tests;
