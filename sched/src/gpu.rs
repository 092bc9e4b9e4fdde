//! The scheduler's state of one GPU: its clients, its adaptive active
//! budget, whether inference is active on it, and the share windows its work
//! is counted in.

use crate::input::ClientId;

/// Period of the windows over which shares of GPU work are counted (the share
/// covers the current and the previous window).
pub const SHARE_WINDOW_NS: u64 = 1_000_000_000;

#[derive(Clone, Debug)]
pub(crate) struct Gpu {
    /// Clients on this GPU, ascending ids.
    pub(crate) members: Vec<ClientId>,
    pub(crate) active_budget_ns: u64,
    pub(crate) inference_active: bool,
    pub(crate) n_training: u32,
    pub(crate) window_start: u64,
    pub(crate) work_cur: u64,
    pub(crate) work_prev: u64,
    pub(crate) train_cur: u64,
    pub(crate) train_prev: u64,
}

/// The work of a pair of share windows (the current one from
/// `window_start`, the one before) that still counts at `now`: both within
/// the first window, the current one alone (it has become the previous)
/// within the second, none after. Windows roll only on events, so a
/// snapshot ages them itself.
pub(crate) fn recent(window_start: u64, now: u64, cur: u64, prev: u64) -> u64 {
    let age = now.saturating_sub(window_start);
    if age >= 2 * SHARE_WINDOW_NS {
        0
    } else if age >= SHARE_WINDOW_NS {
        cur
    } else {
        cur.saturating_add(prev)
    }
}
