//! tandem over MPS while tandemd runs: whether it is in force, what a
//! registering client is offered, and the `sharing` part of the stats.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use tandem_proto::mps::{MpsJoin, PRIORITY_NORMAL};
use tandem_proto::wire::ClientClass;
use tracing::warn;

use super::config::MpsConfig;
use super::daemon::{self, Bounds, Failure, Running};
use super::mode::{MpsInfo, MpsSnapshot, SharingMode, SharingSnapshot};

/// tandem over MPS as tandemd started it (fixed for the daemon's life:
/// `[mps] enabled` and the directories apply at a restart).
pub struct Mps {
    state: State,
    said_gone: AtomicBool,
}

enum State {
    /// `[mps] enabled = false`.
    Off,
    /// The control daemon tandemd started or found.
    On(Running),
    /// Enabled, but it could not be put in force (why).
    Failed(String),
}

/// What a client registering now may join (see [`Offer::join`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Offer {
    /// The pipe directory's bytes.
    pub pipe_dir: Vec<u8>,
    /// `[mps] training_priority`.
    pub training_priority: u8,
    /// `[mps] training_thread_percentage`, 0 for none.
    pub training_thread_percentage: u8,
}

impl Offer {
    /// How a client granted `class` joins: inference at normal priority and
    /// no cap, training at the configured priority and cap.
    #[must_use]
    pub fn join(&self, class: ClientClass) -> Option<MpsJoin> {
        let (priority, pct) = match class {
            ClientClass::Training => (self.training_priority, self.training_thread_percentage),
            ClientClass::Inference | ClientClass::Auto => (PRIORITY_NORMAL, 0),
        };
        MpsJoin::new(priority, pct, &self.pipe_dir).ok()
    }
}

fn priority_name(p: u32) -> &'static str {
    if p == u32::from(PRIORITY_NORMAL) {
        "normal"
    } else {
        "below-normal"
    }
}

impl Mps {
    /// Puts `[mps]` in force: nothing when it is off; else starts (or finds)
    /// the control daemon, directories defaulting beside `socket_dir`. A
    /// failure is said once and leaves plain time slicing.
    #[must_use]
    pub fn start(cfg: &MpsConfig, socket_dir: &Path) -> Mps {
        Self::start_bounded(cfg, socket_dir, Bounds::default())
    }

    /// [`start`](Self::start) with other bounds on its waits.
    #[must_use]
    pub fn start_bounded(cfg: &MpsConfig, socket_dir: &Path, bounds: Bounds) -> Mps {
        let state = if !cfg.enabled {
            State::Off
        } else {
            match daemon::start(cfg, socket_dir, bounds) {
                Ok(r) => State::On(r),
                Err(Failure(why)) => {
                    warn!(
                        "[mps] is enabled but tandem over MPS is not in force: {why}; tandemd \
                         runs in plain time slicing"
                    );
                    State::Failed(why)
                }
            }
        };
        Mps {
            state,
            said_gone: AtomicBool::new(false),
        }
    }

    /// `[mps] enabled = false`.
    #[must_use]
    pub fn off() -> Mps {
        Mps {
            state: State::Off,
            said_gone: AtomicBool::new(false),
        }
    }

    /// What a client registering now is offered (`cfg`: the `[mps]` in
    /// force, for the training values): `None` unless tandemd's control
    /// daemon runs and its control pipe is there (one `stat()`).
    pub fn offer(&self, cfg: &MpsConfig) -> Option<Offer> {
        let State::On(r) = &self.state else {
            return None;
        };
        if !r.is_live() {
            if !self.said_gone.swap(true, Ordering::Relaxed) {
                warn!(
                    "the MPS control daemon is gone ({}/control is missing): jobs that register \
                     now run in plain time slicing",
                    r.place.pipe_dir.display()
                );
            }
            return None;
        }
        use std::os::unix::ffi::OsStrExt;
        Some(Offer {
            pipe_dir: r.place.pipe_dir.as_os_str().as_bytes().to_vec(),
            training_priority: u8::try_from(cfg.training_priority).unwrap_or(1),
            training_thread_percentage: cfg
                .training_thread_percentage
                .and_then(|p| u8::try_from(p).ok())
                .unwrap_or(0),
        })
    }

    /// Stops the control daemon if tandemd started it (tandemd's exit).
    pub fn stop(&self) {
        if let State::On(r) = &self.state {
            r.stop();
        }
    }

    /// `sharing` in `GET /stats` (`cfg`: the `[mps]` in force).
    #[must_use]
    pub fn sharing(&self, cfg: &MpsConfig) -> SharingSnapshot {
        let snapshot = |in_force, running: Option<&Running>, error: Option<String>| MpsSnapshot {
            in_force,
            owned: running.is_some_and(|r| r.owned),
            pid: running.and_then(|r| r.pid),
            control_binary: running.map_or_else(
                || cfg.control_binary.clone(),
                |r| r.place.binary.display().to_string(),
            ),
            pipe_dir: running.map_or_else(
                || cfg.pipe_dir.clone(),
                |r| r.place.pipe_dir.display().to_string(),
            ),
            log_dir: running.map_or_else(
                || cfg.log_dir.clone(),
                |r| r.place.log_dir.display().to_string(),
            ),
            training_priority: cfg.training_priority,
            training_thread_percentage: cfg.training_thread_percentage,
            training_inflight_ns: cfg.training_inflight_ns,
            error,
        };
        match &self.state {
            State::Off => SharingSnapshot::current(),
            State::Failed(why) => {
                let base = SharingSnapshot::current();
                SharingSnapshot {
                    describe: format!(
                        "[mps] is enabled but tandem over MPS is not in force ({why}); {}",
                        base.describe
                    ),
                    mps: Some(snapshot(false, None, Some(why.clone()))),
                    ..base
                }
            }
            State::On(r) if !r.is_live() => {
                let why = format!(
                    "the MPS control daemon is gone ({}/control is missing)",
                    r.place.pipe_dir.display()
                );
                let base = SharingSnapshot::current();
                SharingSnapshot {
                    describe: format!(
                        "{why}: jobs that register now run in plain time slicing; {}",
                        base.describe
                    ),
                    mps: Some(snapshot(false, Some(r), Some(why))),
                    ..base
                }
            }
            State::On(r) => {
                let info = MpsInfo {
                    pipe_dir: r.place.pipe_dir.clone(),
                };
                let cap = cfg
                    .training_thread_percentage
                    .map_or_else(String::new, |p| {
                        format!(", capped at {p}% of each GPU's threads")
                    });
                SharingSnapshot {
                    mode: SharingMode::TandemOverMps.name().into(),
                    mps_pipe_dir: Some(info.pipe_dir.display().to_string()),
                    describe: format!(
                        "tandem over MPS: the MPS control daemon in {} ({}{}); jobs that register \
                         join it, training at {} priority{cap}, inference at normal priority; \
                         training below normal is bounded only by its in-flight limit; a fatal fault in one MPS job \
                         reaches the other MPS jobs on its GPU",
                        info.pipe_dir.display(),
                        if r.owned {
                            "started by tandemd"
                        } else {
                            "found running; tandemd will not stop it"
                        },
                        r.pid.map_or_else(String::new, |p| format!(", pid {p}")),
                        priority_name(cfg.training_priority),
                    ),
                    mps: Some(snapshot(true, Some(r), None)),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::time::Duration;
    use tandem_proto::mps::PRIORITY_BELOW_NORMAL;

    fn dir(tag: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("tandem-mpsrt-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    fn enabled(binary: &str) -> MpsConfig {
        MpsConfig {
            enabled: true,
            control_binary: binary.into(),
            training_thread_percentage: Some(30),
            ..MpsConfig::default()
        }
    }

    #[test]
    fn off_offers_nothing_and_reports_detection_only() {
        let m = Mps::off();
        assert_eq!(m.offer(&MpsConfig::default()), None);
        let s = m.sharing(&MpsConfig::default());
        assert_eq!(s.mps, None);
        assert_ne!(s.mode, "tandem_over_mps");
    }

    #[test]
    fn a_failed_start_is_plain_time_slicing_with_the_reason() {
        let d = dir("failed");
        let cfg = enabled("/nonexistent/nvidia-cuda-mps-control");
        let m = Mps::start(&cfg, &d);
        assert_eq!(m.offer(&cfg), None);
        let s = m.sharing(&cfg);
        assert_ne!(s.mode, "tandem_over_mps");
        assert!(
            s.describe
                .starts_with("[mps] is enabled but tandem over MPS is not in force (")
                && s.describe.contains("/nonexistent/nvidia-cuda-mps-control"),
            "{}",
            s.describe
        );
        let snap = s.mps.expect("[mps] shown");
        assert!(!snap.in_force && !snap.owned);
        assert!(snap.error.is_some_and(|e| e.contains("not an executable")));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn in_force_offers_by_class_and_says_so_until_the_daemon_goes() {
        let d = dir("on");
        let bin = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fake-mps-control/nvidia-cuda-mps-control"
        );
        let cfg = enabled(bin);
        let bounds = Bounds {
            exit: Duration::from_millis(300),
            ..Bounds::default()
        };
        let m = Mps::start_bounded(&cfg, &d, bounds);
        let offer = m.offer(&cfg).expect("offered while the daemon runs");
        let pipe = d.join("mps");
        assert_eq!(offer.pipe_dir, pipe.to_str().unwrap().as_bytes());
        let t = offer.join(ClientClass::Training).unwrap();
        assert_eq!(
            (t.priority, t.thread_percentage),
            (PRIORITY_BELOW_NORMAL, 30)
        );
        assert_eq!(t.pipe_dir(), offer.pipe_dir.as_slice());
        let i = offer.join(ClientClass::Inference).unwrap();
        assert_eq!((i.priority, i.thread_percentage), (PRIORITY_NORMAL, 0));
        let s = m.sharing(&cfg);
        assert_eq!(s.mode, "tandem_over_mps");
        assert_eq!(s.mps_pipe_dir.as_deref(), pipe.to_str());
        assert!(
            s.describe.contains("started by tandemd")
                && s.describe.contains("below-normal priority, capped at 30%"),
            "{}",
            s.describe
        );
        let snap = s.mps.unwrap();
        assert!(snap.in_force && snap.owned && snap.pid.is_some());
        assert_eq!(snap.training_inflight_ns, cfg.training_inflight_ns);
        // A reload's training values apply to the next offer.
        let reloaded = MpsConfig {
            training_priority: 0,
            training_thread_percentage: None,
            ..cfg.clone()
        };
        let t = m
            .offer(&reloaded)
            .unwrap()
            .join(ClientClass::Training)
            .unwrap();
        assert_eq!((t.priority, t.thread_percentage), (0, 0));
        // The daemon goes away behind tandemd's back: no more offers.
        m.stop();
        assert_eq!(m.offer(&cfg), None);
        let s = m.sharing(&cfg);
        assert_ne!(s.mode, "tandem_over_mps");
        assert!(s.describe.contains("is gone"), "{}", s.describe);
        assert!(!s.mps.unwrap().in_force);
        let _ = std::fs::remove_dir_all(&d);
    }
}
