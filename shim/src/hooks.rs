//! The one table of hooked CUDA driver functions.
//!
//! Each line is one exported driver symbol: its `cuGetProcAddress` name, the
//! first CUDA version that answers it (from `cudaTypedefs.h`), whether it is the
//! per-thread-default-stream form, what kind of call it is, and its C signature
//! (from `cuda.h`). Everything else — exports, `dlsym` and `cuGetProcAddress`
//! answers, real-pointer slots, counters — is generated from this list.
//! Driver functions not listed here are never touched.

use crate::types::*;
use core::ffi::{c_char, c_int, c_uint, c_ushort, c_void};

/// Declares every hooked driver function once: invoked below, once.
///
/// It expands to the top of the shim: each exported function counts the
/// call (`crate::counters`), loads the session (`crate::client`), stays out
/// of dedup's remaps (`crate::dedup::quiesce`) and forwards to the real
/// driver (`crate::driver`) or to its custom body.
///
/// Entry syntax:
/// `symbol("gpaName", since, legacy|per_thread) Kind fn(arg: Type, ...) [=> custom_body];`
///
/// A plain entry counts the call and forwards it unchanged to the same variant of
/// the real driver. An entry with `=> path` counts it and calls
/// `path(hook, client, real, args...)` instead, where `client` is the
/// coordinator session ([`crate::client::Client`]: `None` without one).
#[macro_export]
macro_rules! hook_table {
    ($(
        $sym:ident ($gpa:literal, $since:literal, $stream:ident) $kind:ident
            fn($($arg:ident : $ty:ty),* $(,)?) $(=> $custom:path)?;
    )*) => {
        /// One value per hooked driver variant, in table order.
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(usize)]
        pub enum Hook { $($sym,)* }

        impl Hook {
            pub const ALL: [Hook; HOOK_COUNT] = [$(Hook::$sym,)*];
        }

        pub const HOOK_COUNT: usize = [$(stringify!($sym),)*].len();

        pub static TABLE: [$crate::table::HookInfo; HOOK_COUNT] = [$(
            $crate::table::HookInfo {
                symbol: match ::core::ffi::CStr::from_bytes_with_nul(
                    concat!(stringify!($sym), "\0").as_bytes(),
                ) {
                    Ok(s) => s,
                    Err(_) => panic!("symbol names are NUL-free"),
                },
                gpa_name: $gpa,
                since: $since,
                per_thread: $crate::hook_table!(@per_thread $stream),
                kind: $crate::table::Kind::$kind,
                hook: $crate::table::HookFn(exports::$sym as *const ::core::ffi::c_void),
            },
        )*];

        /// The exported driver entry points.
        pub mod exports {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[doc = concat!("Interposes `", stringify!($sym), "`.")]
                ///
                /// # Safety
                /// Called by the host with the argument contract of the CUDA driver
                /// function of the same name; the arguments are passed on unchanged.
                #[no_mangle]
                pub unsafe extern "C" fn $sym($($arg: $ty),*) -> $crate::types::CuResult {
                    const ID: Hook = Hook::$sym;
                    let Some(real) = $crate::driver::real(ID) else {
                        return $crate::driver::unavailable(ID);
                    };
                    type Real = unsafe extern "C" fn($($ty),*) -> $crate::types::CuResult;
                    // SAFETY: the slot for ID only ever holds the real driver's own
                    // `$sym` (or what its cuGetProcAddress returned for that variant),
                    // whose C signature is the one declared in this table.
                    let real = unsafe { ::core::mem::transmute::<usize, Real>(real) };
                    $crate::counters::hit(ID);
                    // One load: the coordinator session, or None (fail-open). The
                    // first hooked call of a process connects (cold, bounded).
                    let client = $crate::client::current();
                    const KIND: $crate::table::Kind = $crate::table::Kind::$kind;
                    // Submissions stay out of dedup's remaps (a relaxed load when
                    // this process has no dedup-backed memory; nothing for other kinds).
                    let bracket = if KIND.submits() {
                        $crate::dedup::quiesce::Bracket::enter()
                    } else {
                        None
                    };
                    let rc = $crate::hook_table!(@call ID client real ($($arg),*) $($custom)?);
                    drop(bracket);
                    if KIND.reports_faults() && rc == $crate::types::CuResult::ILLEGAL_ADDRESS {
                        $crate::dedup::illegal_address();
                        $crate::follow::illegal_address();
                    }
                    rc
                }
            )*
        }
    };
    (@per_thread legacy) => { false };
    (@per_thread per_thread) => { true };
    (@call $id:ident $client:ident $real:ident ($($arg:ident),*)) => {{
        let _ = $client;
        // SAFETY: forwarding the caller's arguments, unchanged, to the same variant.
        unsafe { $real($($arg),*) }
    }};
    (@call $id:ident $client:ident $real:ident ($($arg:ident),*) $custom:path) => {
        // SAFETY: the custom body receives the session, the real function and the
        // caller's arguments.
        unsafe { $custom($id, $client, $real, $($arg),*) }
    };
}

crate::hook_table! {
    cuInit("cuInit", 2000, legacy) Init fn(flags: c_uint) => crate::client::mps::init;

    cuLaunchKernel("cuLaunchKernel", 4000, legacy) Launch fn(
        f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint,
        shared_mem: c_uint, stream: CUstream, params: *mut *mut c_void, extra: *mut *mut c_void)
        => crate::launch::kernel;
    cuLaunchKernel_ptsz("cuLaunchKernel", 7000, per_thread) Launch fn(
        f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint,
        shared_mem: c_uint, stream: CUstream, params: *mut *mut c_void, extra: *mut *mut c_void)
        => crate::launch::kernel;
    cuLaunchKernelEx("cuLaunchKernelEx", 11060, legacy) Launch fn(
        config: *const CUlaunchConfig, f: CUfunction, params: *mut *mut c_void, extra: *mut *mut c_void)
        => crate::launch::kernel_ex;
    cuLaunchKernelEx_ptsz("cuLaunchKernelEx", 11060, per_thread) Launch fn(
        config: *const CUlaunchConfig, f: CUfunction, params: *mut *mut c_void, extra: *mut *mut c_void)
        => crate::launch::kernel_ex;
    cuLaunchCooperativeKernel("cuLaunchCooperativeKernel", 9000, legacy) Launch fn(
        f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint,
        shared_mem: c_uint, stream: CUstream, params: *mut *mut c_void)
        => crate::launch::cooperative;
    cuLaunchCooperativeKernel_ptsz("cuLaunchCooperativeKernel", 9000, per_thread) Launch fn(
        f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint,
        shared_mem: c_uint, stream: CUstream, params: *mut *mut c_void)
        => crate::launch::cooperative;
    cuGraphLaunch("cuGraphLaunch", 10000, legacy) GraphLaunch fn(exec: CUgraphExec, stream: CUstream)
        => crate::graphs::launch;
    cuGraphLaunch_ptsz("cuGraphLaunch", 10000, per_thread) GraphLaunch fn(exec: CUgraphExec, stream: CUstream)
        => crate::graphs::launch;
    cuGraphInstantiateWithFlags("cuGraphInstantiateWithFlags", 11040, legacy) Graph fn(
        exec: *mut CUgraphExec, graph: CUgraph, flags: u64) => crate::graphs::instantiate_with_flags;
    cuGraphInstantiateWithParams("cuGraphInstantiateWithParams", 12000, legacy) Graph fn(
        exec: *mut CUgraphExec, graph: CUgraph, params: *mut c_void) => crate::graphs::instantiate_with_params;
    cuGraphInstantiateWithParams_ptsz("cuGraphInstantiateWithParams", 12000, per_thread) Graph fn(
        exec: *mut CUgraphExec, graph: CUgraph, params: *mut c_void) => crate::graphs::instantiate_with_params;
    cuGraphInstantiate_v2("cuGraphInstantiate", 11000, legacy) Graph fn(
        exec: *mut CUgraphExec, graph: CUgraph, error_node: *mut CUgraphNode, log: *mut c_char, log_size: usize)
        => crate::graphs::instantiate_v2;
    cuGraphExecDestroy("cuGraphExecDestroy", 10000, legacy) Graph fn(exec: CUgraphExec)
        => crate::graphs::exec_destroy;
    cuStreamBeginCapture("cuStreamBeginCapture", 10000, legacy) Capture fn(stream: CUstream)
        => crate::capture::begin_v1;
    cuStreamBeginCapture_ptsz("cuStreamBeginCapture", 10000, per_thread) Capture fn(stream: CUstream)
        => crate::capture::begin_v1;
    cuStreamBeginCapture_v2("cuStreamBeginCapture", 10010, legacy) Capture fn(stream: CUstream, mode: c_uint)
        => crate::capture::begin_v2;
    cuStreamBeginCapture_v2_ptsz("cuStreamBeginCapture", 10010, per_thread) Capture fn(
        stream: CUstream, mode: c_uint) => crate::capture::begin_v2;
    cuStreamBeginCaptureToGraph("cuStreamBeginCaptureToGraph", 12030, legacy) Capture fn(
        stream: CUstream, graph: CUgraph, deps: *const CUgraphNode, edges: *const c_void, n: usize, mode: c_uint)
        => crate::capture::begin_to_graph;
    cuStreamBeginCaptureToGraph_ptsz("cuStreamBeginCaptureToGraph", 12030, per_thread) Capture fn(
        stream: CUstream, graph: CUgraph, deps: *const CUgraphNode, edges: *const c_void, n: usize, mode: c_uint)
        => crate::capture::begin_to_graph;
    cuStreamEndCapture("cuStreamEndCapture", 10000, legacy) Capture fn(stream: CUstream, graph: *mut CUgraph)
        => crate::capture::end;
    cuStreamEndCapture_ptsz("cuStreamEndCapture", 10000, per_thread) Capture fn(
        stream: CUstream, graph: *mut CUgraph) => crate::capture::end;

    cuMemAlloc_v2("cuMemAlloc", 3020, legacy) Alloc fn(dptr: *mut CUdeviceptr, bytes: usize)
        => crate::memops::alloc;
    cuMemAllocPitch_v2("cuMemAllocPitch", 3020, legacy) Alloc fn(
        dptr: *mut CUdeviceptr, pitch: *mut usize, width: usize, height: usize, elem: c_uint)
        => crate::memops::alloc_pitch;
    cuMemAllocAsync("cuMemAllocAsync", 11020, legacy) Alloc fn(
        dptr: *mut CUdeviceptr, bytes: usize, stream: CUstream)
        => crate::memops::alloc_async;
    cuMemAllocAsync_ptsz("cuMemAllocAsync", 11020, per_thread) Alloc fn(
        dptr: *mut CUdeviceptr, bytes: usize, stream: CUstream)
        => crate::memops::alloc_async;
    cuMemAllocFromPoolAsync("cuMemAllocFromPoolAsync", 11020, legacy) Alloc fn(
        dptr: *mut CUdeviceptr, bytes: usize, pool: CUmemoryPool, stream: CUstream)
        => crate::memops::alloc_from_pool;
    cuMemAllocFromPoolAsync_ptsz("cuMemAllocFromPoolAsync", 11020, per_thread) Alloc fn(
        dptr: *mut CUdeviceptr, bytes: usize, pool: CUmemoryPool, stream: CUstream)
        => crate::memops::alloc_from_pool;
    cuMemFree_v2("cuMemFree", 3020, legacy) Free fn(dptr: CUdeviceptr)
        => crate::memops::free;
    cuMemFreeAsync("cuMemFreeAsync", 11020, legacy) Free fn(dptr: CUdeviceptr, stream: CUstream)
        => crate::memops::free_async;
    cuMemFreeAsync_ptsz("cuMemFreeAsync", 11020, per_thread) Free fn(dptr: CUdeviceptr, stream: CUstream)
        => crate::memops::free_async;
    cuMemCreate("cuMemCreate", 10020, legacy) Vmm fn(
        handle: *mut CUmemGenericAllocationHandle, size: usize, prop: *const CUmemAllocationProp, flags: u64)
        => crate::memops::create;
    cuMemRelease("cuMemRelease", 10020, legacy) Vmm fn(handle: CUmemGenericAllocationHandle)
        => crate::memops::release;
    cuMemMap("cuMemMap", 10020, legacy) Vmm fn(
        ptr: CUdeviceptr, size: usize, offset: usize, handle: CUmemGenericAllocationHandle, flags: u64);
    cuMemUnmap("cuMemUnmap", 10020, legacy) Vmm fn(ptr: CUdeviceptr, size: usize);
    cuMemGetInfo_v2("cuMemGetInfo", 3020, legacy) MemInfo fn(free: *mut usize, total: *mut usize);

    cuMemcpyHtoD_v2("cuMemcpyHtoD", 3020, legacy) CopyToDevice fn(
        dst: CUdeviceptr, src: *const c_void, bytes: usize)
        => crate::memops::copy_h2d;
    cuMemcpyHtoD_v2_ptds("cuMemcpyHtoD", 7000, per_thread) CopyToDevice fn(
        dst: CUdeviceptr, src: *const c_void, bytes: usize)
        => crate::memops::copy_h2d;
    cuMemcpyHtoDAsync_v2("cuMemcpyHtoDAsync", 3020, legacy) CopyToDevice fn(
        dst: CUdeviceptr, src: *const c_void, bytes: usize, stream: CUstream)
        => crate::memops::copy_h2d_async;
    cuMemcpyHtoDAsync_v2_ptsz("cuMemcpyHtoDAsync", 7000, per_thread) CopyToDevice fn(
        dst: CUdeviceptr, src: *const c_void, bytes: usize, stream: CUstream)
        => crate::memops::copy_h2d_async;
    cuMemcpyDtoD_v2("cuMemcpyDtoD", 3020, legacy) CopyOnDevice fn(
        dst: CUdeviceptr, src: CUdeviceptr, bytes: usize) => crate::memops::copy_d2d;
    cuMemcpyDtoD_v2_ptds("cuMemcpyDtoD", 7000, per_thread) CopyOnDevice fn(
        dst: CUdeviceptr, src: CUdeviceptr, bytes: usize) => crate::memops::copy_d2d;
    cuMemcpyDtoDAsync_v2("cuMemcpyDtoDAsync", 3020, legacy) CopyOnDevice fn(
        dst: CUdeviceptr, src: CUdeviceptr, bytes: usize, stream: CUstream)
        => crate::memops::copy_d2d_async;
    cuMemcpyDtoDAsync_v2_ptsz("cuMemcpyDtoDAsync", 7000, per_thread) CopyOnDevice fn(
        dst: CUdeviceptr, src: CUdeviceptr, bytes: usize, stream: CUstream)
        => crate::memops::copy_d2d_async;
    cuMemcpy("cuMemcpy", 4000, legacy) CopyOnDevice fn(dst: CUdeviceptr, src: CUdeviceptr, bytes: usize)
        => crate::memops::copy_d2d;
    cuMemcpy_ptds("cuMemcpy", 7000, per_thread) CopyOnDevice fn(
        dst: CUdeviceptr, src: CUdeviceptr, bytes: usize) => crate::memops::copy_d2d;
    cuMemcpyAsync("cuMemcpyAsync", 4000, legacy) CopyOnDevice fn(
        dst: CUdeviceptr, src: CUdeviceptr, bytes: usize, stream: CUstream)
        => crate::memops::copy_d2d_async;
    cuMemcpyAsync_ptsz("cuMemcpyAsync", 7000, per_thread) CopyOnDevice fn(
        dst: CUdeviceptr, src: CUdeviceptr, bytes: usize, stream: CUstream)
        => crate::memops::copy_d2d_async;
    cuMemsetD8_v2("cuMemsetD8", 3020, legacy) Memset fn(dst: CUdeviceptr, value: u8, n: usize)
        => crate::memops::memset;
    cuMemsetD8_v2_ptds("cuMemsetD8", 7000, per_thread) Memset fn(dst: CUdeviceptr, value: u8, n: usize)
        => crate::memops::memset;
    cuMemsetD16_v2("cuMemsetD16", 3020, legacy) Memset fn(dst: CUdeviceptr, value: c_ushort, n: usize)
        => crate::memops::memset;
    cuMemsetD16_v2_ptds("cuMemsetD16", 7000, per_thread) Memset fn(
        dst: CUdeviceptr, value: c_ushort, n: usize) => crate::memops::memset;
    cuMemsetD32_v2("cuMemsetD32", 3020, legacy) Memset fn(dst: CUdeviceptr, value: c_uint, n: usize)
        => crate::memops::memset;
    cuMemsetD32_v2_ptds("cuMemsetD32", 7000, per_thread) Memset fn(
        dst: CUdeviceptr, value: c_uint, n: usize) => crate::memops::memset;
    cuMemsetD8Async("cuMemsetD8Async", 3020, legacy) Memset fn(
        dst: CUdeviceptr, value: u8, n: usize, stream: CUstream) => crate::memops::memset_async;
    cuMemsetD8Async_ptsz("cuMemsetD8Async", 7000, per_thread) Memset fn(
        dst: CUdeviceptr, value: u8, n: usize, stream: CUstream) => crate::memops::memset_async;
    cuMemsetD16Async("cuMemsetD16Async", 3020, legacy) Memset fn(
        dst: CUdeviceptr, value: c_ushort, n: usize, stream: CUstream) => crate::memops::memset_async;
    cuMemsetD16Async_ptsz("cuMemsetD16Async", 7000, per_thread) Memset fn(
        dst: CUdeviceptr, value: c_ushort, n: usize, stream: CUstream) => crate::memops::memset_async;
    cuMemsetD32Async("cuMemsetD32Async", 3020, legacy) Memset fn(
        dst: CUdeviceptr, value: c_uint, n: usize, stream: CUstream) => crate::memops::memset_async;
    cuMemsetD32Async_ptsz("cuMemsetD32Async", 7000, per_thread) Memset fn(
        dst: CUdeviceptr, value: c_uint, n: usize, stream: CUstream) => crate::memops::memset_async;

    cuMemcpyDtoH_v2("cuMemcpyDtoH", 3020, legacy) CopyToHost fn(
        dst: *mut c_void, src: CUdeviceptr, bytes: usize)
        => crate::memops::copy_d2h;
    cuMemcpyDtoH_v2_ptds("cuMemcpyDtoH", 7000, per_thread) CopyToHost fn(
        dst: *mut c_void, src: CUdeviceptr, bytes: usize)
        => crate::memops::copy_d2h;
    cuStreamSynchronize("cuStreamSynchronize", 2000, legacy) Sync fn(stream: CUstream)
        => crate::memops::stream_sync;
    cuStreamSynchronize_ptsz("cuStreamSynchronize", 7000, per_thread) Sync fn(stream: CUstream)
        => crate::memops::stream_sync;
    cuCtxSynchronize("cuCtxSynchronize", 2000, legacy) Sync fn()
        => crate::memops::ctx_sync;
    cuCtxSynchronize_v2("cuCtxSynchronize", 13000, legacy) Sync fn(ctx: CUcontext)
        => crate::memops::ctx_sync_v2;
    cuEventSynchronize("cuEventSynchronize", 2000, legacy) Sync fn(event: CUevent)
        => crate::memops::event_sync;
    cuStreamQuery("cuStreamQuery", 2000, legacy) Query fn(stream: CUstream);
    cuStreamQuery_ptsz("cuStreamQuery", 7000, per_thread) Query fn(stream: CUstream);
    cuEventQuery("cuEventQuery", 2000, legacy) Query fn(event: CUevent);

    cuGetProcAddress("cuGetProcAddress", 11030, legacy) ProcAddress fn(
        symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: u64)
        => crate::proc_address::answer_v1;
    cuGetProcAddress_v2("cuGetProcAddress", 12000, legacy) ProcAddress fn(
        symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: u64, status: *mut c_void)
        => crate::proc_address::answer_v2;
}
