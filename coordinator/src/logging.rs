//! Logging to stderr through `tracing` (journald picks stderr up under systemd).

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

/// Install the global subscriber at `level`; returns a setter for reloads.
pub fn init(level: Level) -> Box<dyn Fn(Level) + Send> {
    let (filter, handle) = reload::Layer::new(LevelFilter::from_level(level));
    let _ = tracing_subscriber::registry()
        .with(filter)
        // Plain text, whatever features tracing-subscriber was built with: a
        // workspace build unifies them (loom, in tests/models, turns on its
        // `ansi` default), and colour codes do not belong in the journal.
        .with(
            fmt::layer()
                .with_writer(std::io::stderr)
                .with_target(false)
                .with_ansi(false),
        )
        .try_init();
    Box::new(move |l| {
        let _ = handle.modify(|f| *f = LevelFilter::from_level(l));
    })
}
