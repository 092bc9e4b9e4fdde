//! Contexts: the primary context's reference count, the created ones, and each thread's
//! current context.

use std::cell::Cell;
use std::collections::BTreeSet;

use crate::types::*;

/// The primary context's handle: constant, below every handle `State::new_handle` gives out.
pub(crate) const PRIMARY_CTX: usize = 0x7000;

thread_local! {
    /// The calling thread's current context (0 = none), as `cuCtxSetCurrent` sets it.
    static CURRENT: Cell<usize> = const { Cell::new(0) };
}

/// The calling thread's current context; none while the thread's TLS is being torn down.
pub(crate) fn current() -> usize {
    CURRENT.try_with(Cell::get).unwrap_or(0)
}

pub(crate) fn set_current(ctx: usize) {
    // During TLS teardown there is nothing left to set.
    let _ = CURRENT.try_with(|c| c.set(ctx));
}

pub struct Contexts {
    pub(crate) primary_refs: u32,
    pub(crate) created: BTreeSet<usize>,
}

impl Contexts {
    pub const fn new() -> Self {
        Self {
            primary_refs: 0,
            created: BTreeSet::new(),
        }
    }

    pub(crate) fn is_valid(&self, ctx: usize) -> bool {
        ctx == PRIMARY_CTX || self.created.contains(&ctx)
    }

    /// The calling thread's current context, or `CUDA_ERROR_INVALID_CONTEXT` if it has none (or
    /// it has been destroyed).
    pub fn require_current(&self) -> CuResult<usize> {
        let ctx = current();
        if ctx != 0 && self.is_valid(ctx) {
            Ok(ctx)
        } else {
            Err(CUDA_ERROR_INVALID_CONTEXT)
        }
    }

    /// Validates a context handle given explicitly (e.g. in graph node parameters).
    pub fn check(&self, ctx: usize) -> CuResult<()> {
        if self.is_valid(ctx) {
            Ok(())
        } else {
            Err(CUDA_ERROR_INVALID_CONTEXT)
        }
    }
}
