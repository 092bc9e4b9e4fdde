//! The state the daemon's threads share: the client table, the dedup
//! index, follow mode's regions and the configuration in force, each behind
//! its own lock, and the stats snapshot assembled from them.
//!
//! Lock order: the registry's lock is never held while the dedup index or
//! the follow regions are locked; nothing else is locked while the follow
//! regions are.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use tandem_proto::wire::PROTOCOL_VERSION;

use crate::clients::{gpu_key, Registry};
use crate::config::Config;
use crate::dedup::Index;
use crate::follow::report::Placement;
use crate::follow::Regions;
use crate::mps::Mps;
use crate::state::{format_uuid, Snapshot};

/// State shared by the daemon's threads.
pub struct Shared {
    registry: Mutex<Registry>,
    /// The dedup index (never locked while holding the registry's lock).
    dedup: Mutex<Index>,
    /// Follow mode's shared regions (never locked while holding another lock).
    follow: Mutex<Regions>,
    config: Mutex<Arc<Config>>,
    /// Start time.
    pub started: Instant,
    /// The main socket.
    pub socket: PathBuf,
    /// The stats socket.
    pub stats_socket: PathBuf,
    /// The configuration file.
    pub config_path: PathBuf,
    /// Set when stopping.
    pub stop: AtomicBool,
    /// tandemd's effective uid.
    pub euid: u32,
    /// tandem over MPS, as started (fixed for the daemon's life).
    mps: Mps,
}

impl Shared {
    /// Fresh state for a daemon started with `config` (read from
    /// `config_path`) on `socket` and `stats_socket`, running as `euid`,
    /// with `[mps]` put in force as `mps`.
    #[must_use]
    pub fn new(
        config: Config,
        config_path: PathBuf,
        socket: PathBuf,
        stats_socket: PathBuf,
        euid: u32,
        mps: Mps,
    ) -> Shared {
        Shared {
            registry: Mutex::new(Registry::new(config.scheduler.clone())),
            dedup: Mutex::new(Index::new(config.dedup.index_config())),
            follow: Mutex::new(Regions::new(config.follow.limits())),
            config: Mutex::new(Arc::new(config)),
            started: Instant::now(),
            socket,
            stats_socket,
            config_path,
            stop: AtomicBool::new(false),
            euid,
            mps,
        }
    }

    /// tandem over MPS as started.
    pub fn mps(&self) -> &Mps {
        &self.mps
    }

    /// Lock the registry (a poisoned lock is still used: the data stays consistent
    /// enough for statistics, and the daemon must not die of it).
    pub fn registry(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lock the dedup index (poisoning ignored, as for the registry). Never
    /// taken while the registry's lock is held.
    pub fn dedup(&self) -> MutexGuard<'_, Index> {
        self.dedup.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lock the registry of follow-mode regions (poisoning ignored, as for
    /// the registry). Never taken while another lock is held, and no other
    /// lock is taken while it is held.
    pub fn follow(&self) -> MutexGuard<'_, Regions> {
        self.follow.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The configuration in force.
    pub fn config(&self) -> Arc<Config> {
        Arc::clone(&self.config.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Put `c` in force (a reload).
    pub(crate) fn set_config(&self, c: Config) {
        *self.config.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(c);
    }

    /// The stats snapshot (GET /stats).
    pub fn snapshot(&self) -> Snapshot {
        let now = Instant::now();
        let reg = self.registry();
        let (mut gpus, mut clients, totals) = reg.snapshot(now);
        let departed = reg.departed.iter().cloned().collect();
        let gpu_keys: Vec<u64> = reg.gpus.keys().map(gpu_key).collect();
        let placement = Placement {
            gpus: reg
                .gpus
                .keys()
                .map(|u| (gpu_key(u), format_uuid(u)))
                .collect(),
            devices: reg
                .clients
                .values()
                .filter_map(|c| Some((c.id, (gpu_key(&c.gpu?), c.gpu_ordinal?))))
                .collect(),
        };
        drop(reg);
        let cfg = self.config();
        let dedup = crate::dedup::report::annotate(
            &self.dedup(),
            cfg.dedup.enabled,
            &gpu_keys,
            &mut gpus,
            &mut clients,
        );
        let follow = crate::follow::report::annotate(
            &self.follow(),
            cfg.follow.enabled,
            &placement,
            &mut clients,
        );
        Snapshot {
            version: env!("CARGO_PKG_VERSION").into(),
            protocol: PROTOCOL_VERSION,
            pid: std::process::id(),
            uptime_s: now.duration_since(self.started).as_secs_f64(),
            // One stat() per snapshot: MPS may start or stop while tandemd runs.
            sharing: Some(self.mps.sharing(&cfg.mps)),
            socket: self.socket.display().to_string(),
            config_path: self.config_path.display().to_string(),
            gpus,
            clients,
            totals,
            departed,
            dedup,
            follow,
        }
    }
}
