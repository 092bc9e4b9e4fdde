//! The configuration loader: `tandemd.toml` text through [`Config::parse`]
//! (TOML, then validation, then trust-group users resolved), its error
//! message, and, for a configuration it accepts, the state tandemd builds
//! from it at start (the scheduler, the dedup index, follow's limits) and
//! its first stats snapshot.
//!
//! Input: the file's bytes (not UTF-8: skipped, as `read_to_string` fails
//! before parsing).
//!
//! Oracle: nothing panics; an accepted configuration passes the checks the
//! daemon relies on later (a valid ring layout, a heartbeat in range).

use std::path::Path;

use tandem_coordinator::config::Config;
use tandem_proto::wire::MAX_HEARTBEAT_INTERVAL_MS;
use tandem_proto::RingLayout;

/// One input.
pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let cfg = match Config::parse(text, Path::new("/etc/tandem/tandemd.toml")) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    assert!(RingLayout::new(cfg.ring_capacity).is_ok());
    assert!((1..=MAX_HEARTBEAT_INTERVAL_MS).contains(&cfg.heartbeat_interval_ms));
    let _ = (cfg.stats_tcp(), cfg.level());
    let shared = crate::tandemd::shared_state(cfg);
    let _ = shared.snapshot();
}
