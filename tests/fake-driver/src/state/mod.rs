//! The one global driver state (a test double: one `Mutex` is plenty) and `cuInit`'s flag.
//!
//! Its parts, each in a file of its own here, hold data and answer questions about it; the
//! driver functions that lock the state and change it are the crate's other modules, above.

pub mod contexts;
pub mod events;
pub mod graphs;
pub mod memory;
pub mod modules;
pub mod streams;
pub mod vmm;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::types::{CUresult, CuResult};
use contexts::Contexts;
use events::Events;
use graphs::Graphs;
use memory::{Access, Memory, RangeFault};
use modules::Modules;
use streams::Streams;
use vmm::Vmm;

/// First value handed out as an opaque handle. Far above `CU_STREAM_LEGACY`/`CU_STREAM_PER_THREAD`
/// and the primary context, so no handle can be mistaken for one of those.
const FIRST_HANDLE: usize = 0x10_0000;
/// Handles are spaced like small heap objects; unique across every kind, so a handle of one kind
/// passed where another is expected is never found and yields `CUDA_ERROR_INVALID_HANDLE`.
const HANDLE_STRIDE: usize = 0x10;

static INITIALIZED: AtomicBool = AtomicBool::new(false);

/// Whether `cuInit` has succeeded in this process.
pub fn initialized() -> bool {
    INITIALIZED.load(Ordering::Acquire)
}

/// Marks the driver initialised (`cuInit`).
pub fn set_initialized() {
    INITIALIZED.store(true, Ordering::Release);
}

pub struct State {
    next_handle: usize,
    /// Bytes of device memory this process owns: `cuMemAlloc*` plus `cuMemCreate` handles
    /// (imported VMM handles cost nothing, as on the real driver).
    pub bytes_allocated: u64,
    /// A sticky context error (`CUDA_ERROR_ILLEGAL_ADDRESS` after a kernel wrote into memory it
    /// may only read): once set, every context-bound call returns it, as on the real driver.
    pub sticky_error: Option<CUresult>,
    pub contexts: Contexts,
    pub memory: Memory,
    pub streams: Streams,
    pub events: Events,
    pub modules: Modules,
    pub graphs: Graphs,
    pub vmm: Vmm,
}

impl State {
    const fn new() -> Self {
        Self {
            next_handle: FIRST_HANDLE,
            bytes_allocated: 0,
            sticky_error: None,
            contexts: Contexts::new(),
            memory: Memory::new(),
            streams: Streams::new(),
            events: Events::new(),
            modules: Modules::new(),
            graphs: Graphs::new(),
            vmm: Vmm::new(),
        }
    }

    /// A fresh opaque handle value, unique for the life of the process.
    pub fn new_handle(&mut self) -> usize {
        self.next_handle = self.next_handle.wrapping_add(HANDLE_STRIDE);
        if self.next_handle < FIRST_HANDLE {
            self.next_handle = FIRST_HANDLE;
        }
        self.next_handle
    }

    /// Fails with the sticky error if the context has been poisoned.
    pub fn check_sticky(&self) -> CuResult<()> {
        match self.sticky_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The checks every context-bound call makes first: a usable current context and no
    /// sticky error.
    pub fn require_ctx(&self) -> CuResult<()> {
        self.contexts.require_current()?;
        self.check_sticky()
    }
}

static STATE: Mutex<State> = Mutex::new(State::new());

/// Locks the global state. A poisoned lock cannot happen (`panic = "abort"`), but is tolerated.
pub fn lock() -> MutexGuard<'static, State> {
    STATE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Checks that `[addr, addr + len)` may be accessed as `access`. A zero-length range is fine.
pub fn check_range(st: &State, addr: u64, len: usize, access: Access) -> Result<(), RangeFault> {
    if len == 0 || st.memory.contains(addr, len) {
        return Ok(());
    }
    st.vmm.check_range(addr, len, access)
}
