//! tandemd as the targets drive it: its shared state, built without a socket, a config file
//! or MPS.

/// tandemd's shared state over `cfg`, with paths that exist nowhere and MPS
/// off: what the targets drive tandemd's code through.
#[must_use]
pub fn shared_state(cfg: tandem_coordinator::config::Config) -> tandem_coordinator::shared::Shared {
    use std::path::PathBuf;
    tandem_coordinator::shared::Shared::new(
        cfg,
        PathBuf::from("/nonexistent/tandemd.toml"),
        PathBuf::from("/nonexistent/tandemd.sock"),
        PathBuf::from("/nonexistent/stats.sock"),
        0,
        tandem_coordinator::mps::Mps::off(),
    )
}
