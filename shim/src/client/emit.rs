//! Ring records built on the hooks' fast path: no syscall (the clock is the
//! vDSO's), no lock, no allocation, no formatting. One record per event, pushed
//! through the session's `SyncProducer` (never blocks; a full ring drops).

use core::sync::atomic::Ordering;

use tandem_proto::record::FLAG_PER_THREAD_STREAM;
use tandem_proto::{monotonic_ns, EventKind, Record};

use super::session::Session;
use crate::table::Hook;
use crate::types::{CUfunction, CUgraphExec, CUstream};

/// `FLAG_PER_THREAD_STREAM` for `_ptsz`/`_ptds` variants (folds to a constant:
/// `hook` is a constant in every hook body).
#[inline(always)]
fn thread_flag(hook: Hook) -> u16 {
    if hook.info().per_thread {
        FLAG_PER_THREAD_STREAM
    } else {
        0
    }
}

/// Launch geometry.
#[derive(Clone, Copy)]
pub struct Dims {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem: u32,
}

/// First launch on a session: the Device message (cold, once).
#[inline(always)]
fn device_once(s: &Session) {
    if !s.device_sent.load(Ordering::Relaxed) {
        super::funcs::send_device(s);
    }
}

/// The stable id of function `f` (its name's hash once known), for the
/// gate's kernel key and the LAUNCH record.
#[inline(always)]
pub fn func_id(s: &Session, f: CUfunction) -> u64 {
    super::funcs::id(s, f)
}

/// A kernel launch that reached the GPU (LAUNCH or LAUNCH_EX) of function
/// `func_id` ([`func_id`]); `timing`: the token `marks::before_launch` gave
/// it.
#[inline(always)]
#[allow(clippy::too_many_arguments)] // the record's fields + hook, session, token
pub fn launch(
    s: &Session,
    hook: Hook,
    kind: EventKind,
    flags: u16,
    func_id: u64,
    dims: Dims,
    stream: CUstream,
    timing: u64,
) {
    device_once(s);
    let mut r = Record::new(kind, monotonic_ns());
    r.flags = flags | thread_flag(hook);
    r.shared_mem_bytes = dims.shared_mem;
    r.stream = stream as u64;
    r.func_id = func_id;
    r.set_dims(dims.grid, dims.block);
    s.push(&r);
    super::marks::after_launch(s, hook, stream, r.ts_ns, timing);
}

/// A graph launch: `func_id` = the executable graph's handle, `bytes` = its
/// kernel nodes (0 when unknown).
#[inline(always)]
pub fn graph_launch(
    s: &Session,
    hook: Hook,
    exec: CUgraphExec,
    kernels: Option<u32>,
    stream: CUstream,
) {
    device_once(s);
    let mut r = Record::new(EventKind::GRAPH_LAUNCH, monotonic_ns());
    r.flags = thread_flag(hook);
    r.stream = stream as u64;
    r.func_id = exec as u64;
    r.bytes = u64::from(kernels.unwrap_or(0));
    s.push(&r);
    super::marks::after_graph_launch(s, hook, stream, r.ts_ns);
}

/// ALLOC (bytes, addr), FREE (addr), COPY_H2D (bytes, destination).
#[inline(always)]
pub fn memory(
    s: &Session,
    hook: Hook,
    kind: EventKind,
    flags: u16,
    bytes: u64,
    addr: u64,
    stream: u64,
) {
    let mut r = Record::new(kind, monotonic_ns());
    r.flags = flags | thread_flag(hook);
    r.bytes = bytes;
    r.addr = addr;
    r.stream = stream;
    s.push(&r);
}

/// SYNC_BEGIN / SYNC_END.
#[inline(always)]
pub fn sync(s: &Session, hook: Hook, kind: EventKind, flags: u16, stream: u64) {
    let mut r = Record::new(kind, monotonic_ns());
    r.flags = flags | thread_flag(hook);
    r.stream = stream;
    s.push(&r);
}

/// REQUEST_BEGIN / REQUEST_END (explicit API; no tag: `func_id` 0).
#[inline]
pub fn request(s: &Session, kind: EventKind) {
    let r = Record::new(kind, monotonic_ns());
    s.push(&r);
}
