//! CUDA graphs as ordered lists of kernel nodes.
//!
//! `cuGraphAddKernelNode_v2` copies the kernel's op, duration and argument VALUES at add time
//! (the caller's parameter storage may be gone by launch); `cuGraphInstantiateWithFlags`
//! snapshots the node list; `cuGraphLaunch` runs the nodes in order on the stream, each counting
//! as one executed kernel.
//!
//! Stream capture: between `cuStreamBeginCapture*` and `cuStreamEndCapture` a launch on the
//! capturing stream does not run; it becomes the next kernel node of the capture's graph.

use std::ffi::{c_uint, c_ulonglong};

use crate::execute::execute;
use crate::kernel_args::{check_dims, decode_args};
use crate::state::modules::{Dims, Work};
use crate::state::streams::StreamKey;
use crate::state::{lock, State};
use crate::types::*;

/// `CU_GRAPH_NODE_TYPE_KERNEL`.
const CU_GRAPH_NODE_TYPE_KERNEL: c_uint = 0;
/// AUTO_FREE_ON_LAUNCH | UPLOAD | DEVICE_LAUNCH | USE_NODE_PRIORITY.
const INSTANTIATE_FLAGS: c_ulonglong = 0x1 | 0x2 | 0x4 | 0x8;

/// Appends `work` as a kernel node of the capturing graph `graph`.
pub fn record_captured(st: &mut State, graph: usize, work: Work) -> CuResult<()> {
    let n = st.new_handle();
    st.graphs.nodes.insert(n, (graph, work));
    st.graphs
        .graphs
        .get_mut(&graph)
        .ok_or(CUDA_ERROR_INVALID_HANDLE)?
        .push(n);
    Ok(())
}

/// `cuStreamBeginCapture{,_v2}` and `_ptsz` forms: the legacy stream cannot be captured.
pub fn begin_capture(stream: Handle, per_thread_default: bool) -> CuResult<()> {
    let mut st = lock();
    st.require_ctx()?;
    let s = st.streams.resolve(stream, per_thread_default)?;
    if s == StreamKey::Legacy {
        return Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    }
    if st.graphs.capture_target(s).is_some() {
        return Err(CUDA_ERROR_ILLEGAL_STATE);
    }
    let g = st.new_handle();
    st.graphs.graphs.insert(g, Vec::new());
    st.graphs.capturing.push((s, g));
    Ok(())
}

/// `cuStreamEndCapture` and its `_ptsz` form.
///
/// # Safety
/// `out` must be NULL or valid for a write.
pub unsafe fn end_capture(
    stream: Handle,
    per_thread_default: bool,
    out: *mut Handle,
) -> CuResult<()> {
    let mut st = lock();
    st.require_ctx()?;
    let s = st.streams.resolve(stream, per_thread_default)?;
    let i = st
        .graphs
        .capturing
        .iter()
        .position(|(c, _)| *c == s)
        .ok_or(CUDA_ERROR_ILLEGAL_STATE)?;
    let (_, g) = st.graphs.capturing.remove(i);
    // SAFETY: forwarded caller contract.
    unsafe { write_out(out, handle(g)) }
}

/// `cuStreamIsCapturing` and its `_ptsz` form: 1 (ACTIVE) or 0 (NONE).
///
/// # Safety
/// `out` must be NULL or valid for a write.
pub unsafe fn is_capturing(
    stream: Handle,
    per_thread_default: bool,
    out: *mut c_uint,
) -> CuResult<()> {
    let st = lock();
    st.require_ctx()?;
    let s = st.streams.resolve(stream, per_thread_default)?;
    let status = c_uint::from(st.graphs.capture_target(s).is_some());
    // SAFETY: forwarded caller contract.
    unsafe { write_out(out, status) }
}

thread_local! {
    /// The calling thread's stream-capture interaction mode (GLOBAL 0,
    /// THREAD_LOCAL 1, RELAXED 2).
    static CAPTURE_MODE: std::cell::Cell<c_uint> = const { std::cell::Cell::new(0) };
}

/// `cuThreadExchangeStreamCaptureMode`: swaps the calling thread's mode. The
/// fake enforces no capture rules; it keeps the mode so that a swap reads
/// back what was set.
///
/// # Safety
/// `mode` must be NULL or valid for a read and a write.
pub unsafe fn exchange_capture_mode(mode: *mut c_uint) -> CuResult<()> {
    if mode.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-NULL, caller contract.
    let new = unsafe { mode.read() };
    if new > 2 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let old = CAPTURE_MODE.with(|m| m.replace(new));
    // SAFETY: as above.
    unsafe { write_out(mode, old) }
}

/// # Safety
/// `out` must be NULL or valid for a write.
pub unsafe fn graph_create(out: *mut Handle, flags: c_uint) -> CuResult<()> {
    if out.is_null() || flags != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let mut st = lock();
    let g = st.new_handle();
    st.graphs.graphs.insert(g, Vec::new());
    // SAFETY: non-NULL, caller contract.
    unsafe { write_out(out, handle(g)) }
}

/// # Safety
/// `out` NULL or valid for a write; `deps` valid for `num_deps` reads when `num_deps > 0`;
/// `params` NULL or valid for a read, with its `kernelParams`/`extra` as in `cuLaunchKernel`.
pub unsafe fn add_kernel_node(
    out: *mut Handle,
    graph: Handle,
    deps: *const Handle,
    num_deps: usize,
    params: *const KernelNodeParamsV2,
) -> CuResult<()> {
    if out.is_null() || (num_deps > 0 && deps.is_null()) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: forwarded caller contract.
    let p = unsafe { read_in(params) }?;
    let mut st = lock();
    let g = key(graph);
    if !st.graphs.graphs.contains_key(&g) {
        return Err(CUDA_ERROR_INVALID_HANDLE);
    }
    for i in 0..num_deps {
        // SAFETY: `deps` is valid for `num_deps` reads (caller contract), `i < num_deps`.
        let d = key(unsafe { deps.add(i).read() });
        match st.graphs.nodes.get(&d) {
            Some((dg, _)) if *dg == g => {}
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        }
    }
    if p.func.is_null() {
        // A CUkernel (`kern`) needs cuLibrary*, which the fake does not implement.
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if !p.ctx.is_null() {
        st.contexts.check(key(p.ctx))?;
    }
    let (op, duration_ns, max_dynamic) = st.modules.function(p.func)?;
    check_dims(
        &Dims {
            grid: [p.grid_dim_x, p.grid_dim_y, p.grid_dim_z],
            block: [p.block_dim_x, p.block_dim_y, p.block_dim_z],
            shared: p.shared_mem_bytes,
        },
        max_dynamic,
    )?;
    // SAFETY: forwarded caller contract. The values are copied now.
    let args = unsafe { decode_args(op, p.kernel_params, p.extra) }?;
    let n = st.new_handle();
    let work = Work {
        op,
        duration_ns,
        args,
        blocks: [p.grid_dim_x, p.grid_dim_y, p.grid_dim_z]
            .iter()
            .map(|&g| u64::from(g.max(1)))
            .product(),
        sms: None,
    };
    st.graphs.nodes.insert(n, (g, work));
    if let Some(list) = st.graphs.graphs.get_mut(&g) {
        list.push(n);
    }
    // SAFETY: non-NULL, caller contract.
    unsafe { write_out(out, handle(n)) }
}

/// `cuGraphGetNodes`: with `nodes` NULL, reports the count; otherwise fills up to `*num` entries
/// (NULL-padding beyond the real count) and stores the number actually written.
///
/// # Safety
/// `num` NULL or valid for read/write; `nodes` NULL or valid for `*num` writes.
pub unsafe fn graph_get_nodes(graph: Handle, nodes: *mut Handle, num: *mut usize) -> CuResult<()> {
    // SAFETY: forwarded caller contract.
    let capacity = unsafe { read_in(num) }?;
    let st = lock();
    let list = st
        .graphs
        .graphs
        .get(&key(graph))
        .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
    if nodes.is_null() {
        // SAFETY: `num` is non-NULL (read above) and writable (caller contract).
        return unsafe { write_out(num, list.len()) };
    }
    for i in 0..capacity {
        let v = list.get(i).map_or(std::ptr::null_mut(), |&n| handle(n));
        // SAFETY: `nodes` is valid for `capacity` writes (caller contract).
        unsafe { nodes.add(i).write(v) };
    }
    // SAFETY: as above.
    unsafe { write_out(num, capacity.min(list.len())) }
}

/// # Safety
/// `out` must be NULL or valid for a write.
pub unsafe fn node_get_type(node: Handle, out: *mut c_uint) -> CuResult<()> {
    if !lock().graphs.nodes.contains_key(&key(node)) {
        return Err(CUDA_ERROR_INVALID_HANDLE);
    }
    // SAFETY: forwarded caller contract.
    unsafe { write_out(out, CU_GRAPH_NODE_TYPE_KERNEL) }
}

/// # Safety
/// `out` must be NULL or valid for a write.
pub unsafe fn instantiate(out: *mut Handle, graph: Handle, flags: c_ulonglong) -> CuResult<()> {
    if out.is_null() || flags & !INSTANTIATE_FLAGS != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let mut st = lock();
    st.require_ctx()?;
    let list = st
        .graphs
        .graphs
        .get(&key(graph))
        .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
    let snapshot: Vec<Work> = list
        .iter()
        .filter_map(|n| st.graphs.nodes.get(n).map(|(_, w)| *w))
        .collect();
    let e = st.new_handle();
    st.graphs.execs.insert(e, snapshot);
    // SAFETY: non-NULL, caller contract.
    unsafe { write_out(out, handle(e)) }
}

/// `cuGraphInstantiateWithParams`: the first field of CUDA_GRAPH_INSTANTIATE_PARAMS is the flags.
///
/// # Safety
/// `out` NULL or valid for a write; `params` NULL or valid for a read of one u64.
pub unsafe fn instantiate_with_params(
    out: *mut Handle,
    graph: Handle,
    params: *const c_ulonglong,
) -> CuResult<()> {
    // SAFETY: forwarded caller contract.
    let flags = unsafe { read_in(params) }?;
    // SAFETY: forwarded caller contract.
    unsafe { instantiate(out, graph, flags) }
}

pub fn graph_launch(exec: Handle, stream: Handle, per_thread_default: bool) -> CuResult<()> {
    let mut st = lock();
    st.require_ctx()?;
    let works = st
        .graphs
        .execs
        .get(&key(exec))
        .ok_or(CUDA_ERROR_INVALID_HANDLE)?
        .clone();
    let s = st.streams.resolve(stream, per_thread_default)?;
    execute(&mut st, &works, s)
}

pub fn exec_destroy(exec: Handle) -> CuResult<()> {
    match lock().graphs.execs.remove(&key(exec)) {
        Some(_) => Ok(()),
        None => Err(CUDA_ERROR_INVALID_HANDLE),
    }
}

pub fn graph_destroy(graph: Handle) -> CuResult<()> {
    let mut st = lock();
    let list = st
        .graphs
        .graphs
        .remove(&key(graph))
        .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
    for n in list {
        st.graphs.nodes.remove(&n);
    }
    Ok(())
}
