//! What the fit learns a duration for: a launch's key (function and
//! dimensions), and its position where several kernels share the key.

use tandem_proto::{EventKind, Record};

/// What a launch's duration is learnt for: its function (or graph) and
/// dimensions, as the record carries them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    /// The record's `func_id` (a graph launch's: its graph exec).
    pub func_id: u64,
    /// Grid x, y, z.
    pub grid: [u32; 3],
    /// Block x, y, z.
    pub block: [u16; 3],
}

impl Key {
    /// The key of a launch record.
    #[must_use]
    pub fn of(r: &Record) -> Key {
        Key {
            func_id: r.func_id,
            grid: [r.grid_x, u32::from(r.grid_y), u32::from(r.grid_z)],
            block: [r.block_x, r.block_y, r.block_z],
        }
    }
}

/// What the fit learns one duration for: a launch's key, and for the keys
/// several kernels share, its position in its request or step (the
/// launch's ordinal there), which tells them apart.
pub type Ident = (Key, Option<u32>);

/// Whether a record of `kind` is a launch (one op of the trace).
#[must_use]
pub fn is_launch(kind: u16) -> bool {
    EventKind::from_raw(kind).is_some_and(EventKind::is_launch)
}
