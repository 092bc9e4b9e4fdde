//! CUDA graphs: how many kernels a graph launch runs.
//!
//! When a graph is instantiated the shim counts its kernel nodes (through child
//! graphs) and remembers the count per executable graph in a fixed-size,
//! lock-free table, so a `cuGraphLaunch` adds the right number of kernels
//! without a lock or an allocation.

use crate::driver::{self, Support};
use crate::table::Hook;
use crate::types::{CUgraph, CUgraphExec, CUgraphNode, CUstream, CuResult};
use core::ffi::{c_char, c_void};
use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

const CAPACITY: usize = 4096;
const EMPTY: usize = 0;
const GONE: usize = usize::MAX;

struct Entry {
    exec: AtomicUsize,
    kernels: AtomicU32,
}

static EXECS: [Entry; CAPACITY] = [const {
    Entry {
        exec: AtomicUsize::new(EMPTY),
        kernels: AtomicU32::new(0),
    }
}; CAPACITY];

fn home(exec: usize) -> usize {
    // Fibonacci hashing; handles are pointers, so drop the alignment bits.
    ((exec >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 52) & (CAPACITY - 1)
}

fn remember(exec: usize, kernels: u32) {
    let start = home(exec);
    for i in 0..CAPACITY {
        let e = &EXECS[(start + i) & (CAPACITY - 1)];
        let cur = e.exec.load(Ordering::Acquire);
        if cur == exec {
            e.kernels.store(kernels, Ordering::Release);
            return;
        }
        if (cur == EMPTY || cur == GONE)
            && e.exec
                .compare_exchange(cur, exec, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            e.kernels.store(kernels, Ordering::Release);
            return;
        }
    }
    crate::log!(
        Warn,
        "more than {CAPACITY} live CUDA graphs; kernels of further graphs are not counted"
    );
}

fn find(exec: usize) -> Option<&'static Entry> {
    let start = home(exec);
    for i in 0..CAPACITY {
        let e = &EXECS[(start + i) & (CAPACITY - 1)];
        match e.exec.load(Ordering::Acquire) {
            EMPTY => return None,
            k if k == exec => return Some(e),
            _ => {}
        }
    }
    None
}

/// Kernels per launch of `exec`, if known.
pub fn kernels_of(exec: CUgraphExec) -> Option<u32> {
    find(exec as usize).map(|e| e.kernels.load(Ordering::Acquire))
}

const NODE_KERNEL: u32 = 0;
const NODE_CHILD_GRAPH: u32 = 4;
const MAX_DEPTH: u32 = 16;

type GetNodes = unsafe extern "C" fn(CUgraph, *mut CUgraphNode, *mut usize) -> CuResult;
type NodeGetType = unsafe extern "C" fn(CUgraphNode, *mut u32) -> CuResult;
type ChildGraph = unsafe extern "C" fn(CUgraphNode, *mut CUgraph) -> CuResult;

/// Kernel nodes in `graph`, through child graphs. Cold path: allocates.
fn count_kernels(graph: CUgraph, depth: u32) -> Option<u32> {
    if depth > MAX_DEPTH {
        return None;
    }
    // SAFETY: the driver's function of this name has exactly this signature (cuda.h).
    let get_nodes = unsafe {
        core::mem::transmute::<usize, GetNodes>(driver::support(Support::GraphGetNodes)?)
    };
    // SAFETY: the driver's function of this name has exactly this signature (cuda.h).
    let node_type = unsafe {
        core::mem::transmute::<usize, NodeGetType>(driver::support(Support::GraphNodeGetType)?)
    };
    let mut n = 0usize;
    crate::counters::support_call(Support::GraphGetNodes);
    // SAFETY: a NULL node array asks for the count only.
    if unsafe { get_nodes(graph, core::ptr::null_mut(), &mut n) } != CuResult::SUCCESS {
        return None;
    }
    let mut nodes: Vec<CUgraphNode> = vec![core::ptr::null_mut(); n];
    crate::counters::support_call(Support::GraphGetNodes);
    // SAFETY: `nodes` has room for `n` handles.
    if unsafe { get_nodes(graph, nodes.as_mut_ptr(), &mut n) } != CuResult::SUCCESS {
        return None;
    }
    nodes.truncate(n);
    let mut kernels = 0u32;
    for node in nodes {
        let mut t = u32::MAX;
        crate::counters::support_call(Support::GraphNodeGetType);
        // SAFETY: `node` came from the driver just now.
        if unsafe { node_type(node, &mut t) } != CuResult::SUCCESS {
            return None;
        }
        match t {
            NODE_KERNEL => kernels += 1,
            NODE_CHILD_GRAPH => {
                let child = driver::support(Support::GraphChildGraphNodeGetGraph)?;
                // SAFETY: as above.
                let child = unsafe { core::mem::transmute::<usize, ChildGraph>(child) };
                let mut g: CUgraph = core::ptr::null_mut();
                crate::counters::support_call(Support::GraphChildGraphNodeGetGraph);
                // SAFETY: `node` is a child-graph node of a live graph.
                if unsafe { child(node, &mut g) } != CuResult::SUCCESS {
                    return None;
                }
                kernels += count_kernels(g, depth + 1)?;
            }
            _ => {}
        }
    }
    Some(kernels)
}

fn instantiated(rc: CuResult, exec: *mut CUgraphExec, graph: CUgraph) -> CuResult {
    if rc != CuResult::SUCCESS || exec.is_null() {
        return rc;
    }
    // SAFETY: the driver wrote the new executable graph there on success.
    let exec = unsafe { *exec };
    match count_kernels(graph, 0) {
        Some(k) => {
            remember(exec as usize, k);
            crate::log!(Debug, "graph instantiated with {k} kernel nodes");
        }
        None => crate::log!(
            Debug,
            "could not count the kernels of an instantiated graph"
        ),
    }
    rc
}

/// `cuGraphInstantiateWithFlags`.
///
/// # Safety
/// Arguments as the driver function requires.
pub unsafe fn instantiate_with_flags(
    _: Hook,
    _: crate::client::Client,
    real: unsafe extern "C" fn(*mut CUgraphExec, CUgraph, u64) -> CuResult,
    exec: *mut CUgraphExec,
    graph: CUgraph,
    flags: u64,
) -> CuResult {
    // SAFETY: forwarded unchanged.
    instantiated(unsafe { real(exec, graph, flags) }, exec, graph)
}

/// `cuGraphInstantiateWithParams` and its `_ptsz` form.
///
/// # Safety
/// Arguments as the driver function requires.
pub unsafe fn instantiate_with_params(
    _: Hook,
    _: crate::client::Client,
    real: unsafe extern "C" fn(*mut CUgraphExec, CUgraph, *mut c_void) -> CuResult,
    exec: *mut CUgraphExec,
    graph: CUgraph,
    params: *mut c_void,
) -> CuResult {
    // SAFETY: forwarded unchanged.
    instantiated(unsafe { real(exec, graph, params) }, exec, graph)
}

type InstantiateV2 = unsafe extern "C" fn(
    *mut CUgraphExec,
    CUgraph,
    *mut CUgraphNode,
    *mut c_char,
    usize,
) -> CuResult;

/// `cuGraphInstantiate_v2` (CUDA 11 signature).
///
/// # Safety
/// Arguments as the driver function requires.
pub unsafe fn instantiate_v2(
    _: Hook,
    _: crate::client::Client,
    real: InstantiateV2,
    exec: *mut CUgraphExec,
    graph: CUgraph,
    error_node: *mut CUgraphNode,
    log: *mut c_char,
    log_size: usize,
) -> CuResult {
    // SAFETY: forwarded unchanged.
    let rc = unsafe { real(exec, graph, error_node, log, log_size) };
    instantiated(rc, exec, graph)
}

/// `cuGraphExecDestroy`.
///
/// # Safety
/// Arguments as the driver function requires.
pub unsafe fn exec_destroy(
    _: Hook,
    _: crate::client::Client,
    real: unsafe extern "C" fn(CUgraphExec) -> CuResult,
    exec: CUgraphExec,
) -> CuResult {
    // SAFETY: forwarded unchanged.
    let rc = unsafe { real(exec) };
    if rc == CuResult::SUCCESS {
        if let Some(e) = find(exec as usize) {
            e.exec.store(GONE, Ordering::Release);
        }
    }
    rc
}

/// `cuGraphLaunch` and its `_ptsz` form: counts the graph's kernels and, with a
/// coordinator, obeys its gate and reports the launch.
///
/// # Safety
/// Arguments as the driver function requires.
pub unsafe fn launch(
    hook: Hook,
    client: crate::client::Client,
    real: unsafe extern "C" fn(CUgraphExec, CUstream) -> CuResult,
    exec: CUgraphExec,
    stream: CUstream,
) -> CuResult {
    if let Some(s) = client {
        // A graph launch is keyed by its executable graph, grid 0.
        s.gate(tandem_proto::estimates::kernel_key(exec as u64, [0; 3]));
    }
    // SAFETY: forwarded unchanged.
    let rc = unsafe { real(exec, stream) };
    if rc == CuResult::SUCCESS && !crate::capture::is_capturing(stream, hook.info().per_thread) {
        let kernels = kernels_of(exec);
        crate::counters::graph_launched(kernels);
        if let Some(s) = client {
            crate::client::emit::graph_launch(s, hook, exec, kernels, stream);
        }
    }
    rc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_forgets_and_reuses_slots() {
        let a = 0x7f00_0000_1000usize;
        let b = a + 0x40;
        remember(a, 3);
        remember(b, 5);
        assert_eq!(kernels_of(a as CUgraphExec), Some(3));
        assert_eq!(kernels_of(b as CUgraphExec), Some(5));
        remember(a, 4); // re-instantiated handle: updated in place
        assert_eq!(kernels_of(a as CUgraphExec), Some(4));
        find(a).unwrap().exec.store(GONE, Ordering::Release);
        assert_eq!(kernels_of(a as CUgraphExec), None);
        assert_eq!(
            kernels_of(b as CUgraphExec),
            Some(5),
            "b survives a's removal"
        );
        assert_eq!(kernels_of(0x1234_5670 as CUgraphExec), None);
    }

    #[test]
    fn colliding_handles_are_all_found() {
        // Many handles in a row exercise probing past occupied slots.
        let base = 0x5500_0000_0000usize;
        for i in 0..200 {
            remember(base + i * 16, i as u32);
        }
        for i in 0..200 {
            assert_eq!(kernels_of((base + i * 16) as CUgraphExec), Some(i as u32));
        }
    }
}
