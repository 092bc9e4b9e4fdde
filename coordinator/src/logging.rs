//! Logging to stderr through `tracing` (journald picks stderr up under systemd).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use tracing::Level;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{fmt, reload};

/// The level from `TANDEM_LOG` if it is set and valid, else `configured`.
/// Returns a warning to log when `TANDEM_LOG` is set but invalid.
#[must_use]
pub fn choose_level(configured: Level) -> (Level, Option<String>) {
    match std::env::var("TANDEM_LOG") {
        Ok(v) if !v.is_empty() => match crate::config::parse_level(&v) {
            Some(l) => (l, None),
            None if v.eq_ignore_ascii_case("off") => (Level::ERROR, None),
            None => (
                configured,
                Some(format!(
                    "TANDEM_LOG={v:?} is not a level (error, warn, info, debug, trace); using {configured}"
                )),
            ),
        },
        _ => (configured, None),
    }
}

/// Whether stderr is the journal: `JOURNAL_STREAM` (set by systemd) names
/// the device and inode of stderr ("DEV:INO"), as systemd.exec(5) says to
/// check. The journal stamps each line with the time and the pid itself.
#[must_use]
pub fn under_journald() -> bool {
    use std::os::unix::fs::MetadataExt;
    let Some(v) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = v.to_str().and_then(|v| v.split_once(':')) else {
        return false;
    };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else {
        return false;
    };
    let stderr = std::os::fd::AsFd::as_fd(&std::io::stderr())
        .try_clone_to_owned()
        .map(std::fs::File::from);
    stderr
        .and_then(|f| f.metadata())
        .is_ok_and(|m| m.dev() == dev && m.ino() == ino)
}

/// Install the global subscriber at `level`; returns a setter for reloads.
/// Under journald ([`under_journald`]) lines carry no timestamp of their own.
pub fn init(level: Level) -> Box<dyn Fn(Level) + Send> {
    let (filter, handle) = reload::Layer::new(LevelFilter::from_level(level));
    // Plain text, whatever features tracing-subscriber was built with: a
    // workspace build unifies them (loom, in tests/models, turns on its
    // `ansi` default), and colour codes do not belong in the journal.
    let layer = fmt::layer()
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(false);
    let registry = tracing_subscriber::registry().with(filter);
    let _ = if under_journald() {
        registry.with(layer.without_time()).try_init()
    } else {
        registry.with(layer).try_init()
    };
    Box::new(move |l| {
        let _ = handle.modify(|f| *f = LevelFilter::from_level(l));
    })
}

/// Lines one cause may log per [`THROTTLE_WINDOW`] before the rest are
/// counted instead (the kernel's printk ratelimit: 10 per 5 s).
pub const THROTTLE_BURST: u32 = 10;
/// See [`THROTTLE_BURST`].
pub const THROTTLE_WINDOW: Duration = Duration::from_secs(5);

#[derive(Debug)]
struct Window {
    start: Instant,
    logged: u32,
    suppressed: u64,
}

/// Per-cause rate limits for warnings anyone can provoke (a garbage or
/// silent peer, a failed accept): [`THROTTLE_BURST`] lines per cause per
/// [`THROTTLE_WINDOW`], then one "N more ... suppressed" line when the
/// window ends. Time is given, for tests; [`warn_throttled`] and
/// [`flush_throttled`] use one for the whole process.
#[derive(Debug, Default)]
pub struct Throttle {
    causes: HashMap<&'static str, Window>,
}

impl Throttle {
    /// Whether a line for `cause` may be logged at `now`; also the
    /// suppressed-count lines of windows that ended (log them first).
    pub fn allow(&mut self, cause: &'static str, now: Instant) -> (bool, Vec<String>) {
        let summaries = self.flush(now);
        let w = self.causes.entry(cause).or_insert(Window {
            start: now,
            logged: 0,
            suppressed: 0,
        });
        if w.logged < THROTTLE_BURST {
            w.logged += 1;
            (true, summaries)
        } else {
            w.suppressed += 1;
            (false, summaries)
        }
    }

    /// Ends the windows that are over at `now`: one line for each that
    /// suppressed something.
    pub fn flush(&mut self, now: Instant) -> Vec<String> {
        let mut out = Vec::new();
        self.causes.retain(|cause, w| {
            if now.duration_since(w.start) < THROTTLE_WINDOW {
                return true;
            }
            if w.suppressed > 0 {
                out.push(format!(
                    "{} more \"{cause}\" warnings suppressed in the last {:.0} s",
                    w.suppressed,
                    now.duration_since(w.start).as_secs_f64()
                ));
            }
            false
        });
        out
    }

    /// When the next window with suppressed lines ends.
    #[must_use]
    pub fn next_flush(&self) -> Option<Instant> {
        self.causes
            .values()
            .filter(|w| w.suppressed > 0)
            .map(|w| w.start + THROTTLE_WINDOW)
            .min()
    }
}

fn throttle() -> std::sync::MutexGuard<'static, Throttle> {
    static T: OnceLock<Mutex<Throttle>> = OnceLock::new();
    T.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `warn!("{msg}")`, at most [`THROTTLE_BURST`] times per
/// [`THROTTLE_WINDOW`] for `cause`; the rest are counted and said in one line.
pub fn warn_throttled(cause: &'static str, msg: &str) {
    let (ok, summaries) = throttle().allow(cause, Instant::now());
    for s in summaries {
        tracing::warn!("{s}");
    }
    if ok {
        tracing::warn!("{msg}");
    }
}

/// Logs the suppressed counts of windows that ended; returns how long until
/// the next one ends (the event loop wakes then), if any is pending.
pub fn flush_throttled() -> Option<Duration> {
    let now = Instant::now();
    let (summaries, next) = {
        let mut t = throttle();
        (t.flush(now), t.next_flush())
    };
    for s in summaries {
        tracing::warn!("{s}");
    }
    next.map(|n| n.saturating_duration_since(now))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_logs_a_burst_per_window_then_says_how_many_it_suppressed() {
        let mut t = Throttle::default();
        let t0 = Instant::now();
        let allowed = (0..100).filter(|_| t.allow("garbage peer", t0).0).count();
        assert_eq!(allowed, THROTTLE_BURST as usize);
        assert!(
            t.allow("silent peer", t0).0,
            "each cause has its own budget"
        );
        assert_eq!(t.next_flush(), Some(t0 + THROTTLE_WINDOW));
        assert!(
            t.flush(t0 + Duration::from_secs(1)).is_empty(),
            "window not over"
        );
        let lines = t.flush(t0 + THROTTLE_WINDOW);
        assert_eq!(
            lines,
            ["90 more \"garbage peer\" warnings suppressed in the last 5 s"]
        );
        assert_eq!(t.next_flush(), None);
        assert!(
            t.allow("garbage peer", t0 + THROTTLE_WINDOW).0,
            "a new window"
        );
    }
}
