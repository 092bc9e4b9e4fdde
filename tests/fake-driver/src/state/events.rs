//! The events that exist and what each last recorded.

use std::collections::BTreeMap;
use std::ffi::c_uint;

use crate::types::*;

pub(crate) struct Event {
    pub(crate) flags: c_uint,
    /// When the work captured by the last record completes; `None` until first recorded.
    pub(crate) completes_at: Option<u64>,
}

pub struct Events {
    pub(crate) events: BTreeMap<usize, Event>,
}

impl Events {
    pub const fn new() -> Self {
        Self {
            events: BTreeMap::new(),
        }
    }

    pub(crate) fn get(&self, ev: Handle) -> CuResult<&Event> {
        self.events.get(&key(ev)).ok_or(CUDA_ERROR_INVALID_HANDLE)
    }
}
