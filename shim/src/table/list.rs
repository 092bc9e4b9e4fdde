//! The one list of hooked CUDA driver functions.
//!
//! Each line is one exported driver symbol: its `cuGetProcAddress` name, the
//! first CUDA version that answers it (from `cudaTypedefs.h`), whether it is the
//! per-thread-default-stream form, what kind of call it is, its C signature
//! (from `cuda.h`) and, for a call the shim does more than count and forward,
//! the interposed operation that handles it. Everything else is generated from
//! this list: the [`Hook`](super::Hook) enum, the metadata table and so the
//! real-pointer slots and counters (`super`, expanded by `declare!`), and the
//! exported functions whose addresses answer `dlsym` and `cuGetProcAddress`
//! (`crate::hooks`, expanded by `exports!`). Driver functions not listed here
//! are never touched.
//!
//! Entry syntax:
//! `symbol("gpaName", since, legacy|per_thread) Kind fn(arg: Type, ...) [=> operation];`
//!
//! A plain entry counts the call and forwards it unchanged to the same variant
//! of the real driver. An entry with `=> module::function` counts it and calls
//! `module::function(hook, client, real, args...)` instead. The path is
//! resolved where the list is expanded into exports (`crate::hooks`, the top
//! layer, which imports those modules): this list is data, and the layers below
//! that only read its names, kinds and versions never call the operations.

/// Hands the list to `$expand`, a macro of the caller's taking the entries.
macro_rules! hook_list {
    ($expand:ident) => {
        $expand! {
            cuInit("cuInit", 2000, legacy) Init fn(flags: c_uint) => client::mps::init;

            cuLaunchKernel("cuLaunchKernel", 4000, legacy) Launch fn(
                f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint,
                shared_mem: c_uint, stream: CUstream, params: *mut *mut c_void, extra: *mut *mut c_void)
                => launch::kernel;
            cuLaunchKernel_ptsz("cuLaunchKernel", 7000, per_thread) Launch fn(
                f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint,
                shared_mem: c_uint, stream: CUstream, params: *mut *mut c_void, extra: *mut *mut c_void)
                => launch::kernel;
            cuLaunchKernelEx("cuLaunchKernelEx", 11060, legacy) Launch fn(
                config: *const CUlaunchConfig, f: CUfunction, params: *mut *mut c_void, extra: *mut *mut c_void)
                => launch::kernel_ex;
            cuLaunchKernelEx_ptsz("cuLaunchKernelEx", 11060, per_thread) Launch fn(
                config: *const CUlaunchConfig, f: CUfunction, params: *mut *mut c_void, extra: *mut *mut c_void)
                => launch::kernel_ex;
            cuLaunchCooperativeKernel("cuLaunchCooperativeKernel", 9000, legacy) Launch fn(
                f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint,
                shared_mem: c_uint, stream: CUstream, params: *mut *mut c_void)
                => launch::cooperative;
            cuLaunchCooperativeKernel_ptsz("cuLaunchCooperativeKernel", 9000, per_thread) Launch fn(
                f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint,
                shared_mem: c_uint, stream: CUstream, params: *mut *mut c_void)
                => launch::cooperative;
            cuGraphLaunch("cuGraphLaunch", 10000, legacy) GraphLaunch fn(exec: CUgraphExec, stream: CUstream)
                => graphs::launch;
            cuGraphLaunch_ptsz("cuGraphLaunch", 10000, per_thread) GraphLaunch fn(exec: CUgraphExec, stream: CUstream)
                => graphs::launch;
            cuGraphInstantiateWithFlags("cuGraphInstantiateWithFlags", 11040, legacy) Graph fn(
                exec: *mut CUgraphExec, graph: CUgraph, flags: u64) => graphs::instantiate_with_flags;
            cuGraphInstantiateWithParams("cuGraphInstantiateWithParams", 12000, legacy) Graph fn(
                exec: *mut CUgraphExec, graph: CUgraph, params: *mut c_void) => graphs::instantiate_with_params;
            cuGraphInstantiateWithParams_ptsz("cuGraphInstantiateWithParams", 12000, per_thread) Graph fn(
                exec: *mut CUgraphExec, graph: CUgraph, params: *mut c_void) => graphs::instantiate_with_params;
            cuGraphInstantiate_v2("cuGraphInstantiate", 11000, legacy) Graph fn(
                exec: *mut CUgraphExec, graph: CUgraph, error_node: *mut CUgraphNode, log: *mut c_char, log_size: usize)
                => graphs::instantiate_v2;
            cuGraphExecDestroy("cuGraphExecDestroy", 10000, legacy) Graph fn(exec: CUgraphExec)
                => graphs::exec_destroy;
            cuStreamBeginCapture("cuStreamBeginCapture", 10000, legacy) Capture fn(stream: CUstream)
                => capture::begin_v1;
            cuStreamBeginCapture_ptsz("cuStreamBeginCapture", 10000, per_thread) Capture fn(stream: CUstream)
                => capture::begin_v1;
            cuStreamBeginCapture_v2("cuStreamBeginCapture", 10010, legacy) Capture fn(stream: CUstream, mode: c_uint)
                => capture::begin_v2;
            cuStreamBeginCapture_v2_ptsz("cuStreamBeginCapture", 10010, per_thread) Capture fn(
                stream: CUstream, mode: c_uint) => capture::begin_v2;
            cuStreamBeginCaptureToGraph("cuStreamBeginCaptureToGraph", 12030, legacy) Capture fn(
                stream: CUstream, graph: CUgraph, deps: *const CUgraphNode, edges: *const c_void, n: usize, mode: c_uint)
                => capture::begin_to_graph;
            cuStreamBeginCaptureToGraph_ptsz("cuStreamBeginCaptureToGraph", 12030, per_thread) Capture fn(
                stream: CUstream, graph: CUgraph, deps: *const CUgraphNode, edges: *const c_void, n: usize, mode: c_uint)
                => capture::begin_to_graph;
            cuStreamEndCapture("cuStreamEndCapture", 10000, legacy) Capture fn(stream: CUstream, graph: *mut CUgraph)
                => capture::end;
            cuStreamEndCapture_ptsz("cuStreamEndCapture", 10000, per_thread) Capture fn(
                stream: CUstream, graph: *mut CUgraph) => capture::end;

            cuMemAlloc_v2("cuMemAlloc", 3020, legacy) Alloc fn(dptr: *mut CUdeviceptr, bytes: usize)
                => memops::alloc;
            cuMemAllocPitch_v2("cuMemAllocPitch", 3020, legacy) Alloc fn(
                dptr: *mut CUdeviceptr, pitch: *mut usize, width: usize, height: usize, elem: c_uint)
                => memops::alloc_pitch;
            cuMemAllocAsync("cuMemAllocAsync", 11020, legacy) Alloc fn(
                dptr: *mut CUdeviceptr, bytes: usize, stream: CUstream)
                => memops::alloc_async;
            cuMemAllocAsync_ptsz("cuMemAllocAsync", 11020, per_thread) Alloc fn(
                dptr: *mut CUdeviceptr, bytes: usize, stream: CUstream)
                => memops::alloc_async;
            cuMemAllocFromPoolAsync("cuMemAllocFromPoolAsync", 11020, legacy) Alloc fn(
                dptr: *mut CUdeviceptr, bytes: usize, pool: CUmemoryPool, stream: CUstream)
                => memops::alloc_from_pool;
            cuMemAllocFromPoolAsync_ptsz("cuMemAllocFromPoolAsync", 11020, per_thread) Alloc fn(
                dptr: *mut CUdeviceptr, bytes: usize, pool: CUmemoryPool, stream: CUstream)
                => memops::alloc_from_pool;
            cuMemFree_v2("cuMemFree", 3020, legacy) Free fn(dptr: CUdeviceptr)
                => memops::free;
            cuMemFreeAsync("cuMemFreeAsync", 11020, legacy) Free fn(dptr: CUdeviceptr, stream: CUstream)
                => memops::free_async;
            cuMemFreeAsync_ptsz("cuMemFreeAsync", 11020, per_thread) Free fn(dptr: CUdeviceptr, stream: CUstream)
                => memops::free_async;
            cuMemCreate("cuMemCreate", 10020, legacy) Vmm fn(
                handle: *mut CUmemGenericAllocationHandle, size: usize, prop: *const CUmemAllocationProp, flags: u64)
                => memops::create;
            cuMemRelease("cuMemRelease", 10020, legacy) Vmm fn(handle: CUmemGenericAllocationHandle)
                => memops::release;
            cuMemMap("cuMemMap", 10020, legacy) Vmm fn(
                ptr: CUdeviceptr, size: usize, offset: usize, handle: CUmemGenericAllocationHandle, flags: u64);
            cuMemUnmap("cuMemUnmap", 10020, legacy) Vmm fn(ptr: CUdeviceptr, size: usize);
            cuMemGetInfo_v2("cuMemGetInfo", 3020, legacy) MemInfo fn(free: *mut usize, total: *mut usize);

            cuMemcpyHtoD_v2("cuMemcpyHtoD", 3020, legacy) CopyToDevice fn(
                dst: CUdeviceptr, src: *const c_void, bytes: usize)
                => memops::copies::copy_h2d;
            cuMemcpyHtoD_v2_ptds("cuMemcpyHtoD", 7000, per_thread) CopyToDevice fn(
                dst: CUdeviceptr, src: *const c_void, bytes: usize)
                => memops::copies::copy_h2d;
            cuMemcpyHtoDAsync_v2("cuMemcpyHtoDAsync", 3020, legacy) CopyToDevice fn(
                dst: CUdeviceptr, src: *const c_void, bytes: usize, stream: CUstream)
                => memops::copies::copy_h2d_async;
            cuMemcpyHtoDAsync_v2_ptsz("cuMemcpyHtoDAsync", 7000, per_thread) CopyToDevice fn(
                dst: CUdeviceptr, src: *const c_void, bytes: usize, stream: CUstream)
                => memops::copies::copy_h2d_async;
            cuMemcpyDtoD_v2("cuMemcpyDtoD", 3020, legacy) CopyOnDevice fn(
                dst: CUdeviceptr, src: CUdeviceptr, bytes: usize) => memops::copies::copy_d2d;
            cuMemcpyDtoD_v2_ptds("cuMemcpyDtoD", 7000, per_thread) CopyOnDevice fn(
                dst: CUdeviceptr, src: CUdeviceptr, bytes: usize) => memops::copies::copy_d2d;
            cuMemcpyDtoDAsync_v2("cuMemcpyDtoDAsync", 3020, legacy) CopyOnDevice fn(
                dst: CUdeviceptr, src: CUdeviceptr, bytes: usize, stream: CUstream)
                => memops::copies::copy_d2d_async;
            cuMemcpyDtoDAsync_v2_ptsz("cuMemcpyDtoDAsync", 7000, per_thread) CopyOnDevice fn(
                dst: CUdeviceptr, src: CUdeviceptr, bytes: usize, stream: CUstream)
                => memops::copies::copy_d2d_async;
            cuMemcpy("cuMemcpy", 4000, legacy) CopyOnDevice fn(dst: CUdeviceptr, src: CUdeviceptr, bytes: usize)
                => memops::copies::copy_d2d;
            cuMemcpy_ptds("cuMemcpy", 7000, per_thread) CopyOnDevice fn(
                dst: CUdeviceptr, src: CUdeviceptr, bytes: usize) => memops::copies::copy_d2d;
            cuMemcpyAsync("cuMemcpyAsync", 4000, legacy) CopyOnDevice fn(
                dst: CUdeviceptr, src: CUdeviceptr, bytes: usize, stream: CUstream)
                => memops::copies::copy_d2d_async;
            cuMemcpyAsync_ptsz("cuMemcpyAsync", 7000, per_thread) CopyOnDevice fn(
                dst: CUdeviceptr, src: CUdeviceptr, bytes: usize, stream: CUstream)
                => memops::copies::copy_d2d_async;
            cuMemsetD8_v2("cuMemsetD8", 3020, legacy) Memset fn(dst: CUdeviceptr, value: u8, n: usize)
                => memops::copies::memset;
            cuMemsetD8_v2_ptds("cuMemsetD8", 7000, per_thread) Memset fn(dst: CUdeviceptr, value: u8, n: usize)
                => memops::copies::memset;
            cuMemsetD16_v2("cuMemsetD16", 3020, legacy) Memset fn(dst: CUdeviceptr, value: c_ushort, n: usize)
                => memops::copies::memset;
            cuMemsetD16_v2_ptds("cuMemsetD16", 7000, per_thread) Memset fn(
                dst: CUdeviceptr, value: c_ushort, n: usize) => memops::copies::memset;
            cuMemsetD32_v2("cuMemsetD32", 3020, legacy) Memset fn(dst: CUdeviceptr, value: c_uint, n: usize)
                => memops::copies::memset;
            cuMemsetD32_v2_ptds("cuMemsetD32", 7000, per_thread) Memset fn(
                dst: CUdeviceptr, value: c_uint, n: usize) => memops::copies::memset;
            cuMemsetD8Async("cuMemsetD8Async", 3020, legacy) Memset fn(
                dst: CUdeviceptr, value: u8, n: usize, stream: CUstream) => memops::copies::memset_async;
            cuMemsetD8Async_ptsz("cuMemsetD8Async", 7000, per_thread) Memset fn(
                dst: CUdeviceptr, value: u8, n: usize, stream: CUstream) => memops::copies::memset_async;
            cuMemsetD16Async("cuMemsetD16Async", 3020, legacy) Memset fn(
                dst: CUdeviceptr, value: c_ushort, n: usize, stream: CUstream) => memops::copies::memset_async;
            cuMemsetD16Async_ptsz("cuMemsetD16Async", 7000, per_thread) Memset fn(
                dst: CUdeviceptr, value: c_ushort, n: usize, stream: CUstream) => memops::copies::memset_async;
            cuMemsetD32Async("cuMemsetD32Async", 3020, legacy) Memset fn(
                dst: CUdeviceptr, value: c_uint, n: usize, stream: CUstream) => memops::copies::memset_async;
            cuMemsetD32Async_ptsz("cuMemsetD32Async", 7000, per_thread) Memset fn(
                dst: CUdeviceptr, value: c_uint, n: usize, stream: CUstream) => memops::copies::memset_async;
            cuMemcpyPeer("cuMemcpyPeer", 4000, legacy) CopyOnDevice fn(
                dst: CUdeviceptr, dst_ctx: CUcontext, src: CUdeviceptr, src_ctx: CUcontext, bytes: usize)
                => memops::copies::copy_peer;
            cuMemcpyPeer_ptds("cuMemcpyPeer", 7000, per_thread) CopyOnDevice fn(
                dst: CUdeviceptr, dst_ctx: CUcontext, src: CUdeviceptr, src_ctx: CUcontext, bytes: usize)
                => memops::copies::copy_peer;
            cuMemcpyPeerAsync("cuMemcpyPeerAsync", 4000, legacy) CopyOnDevice fn(
                dst: CUdeviceptr, dst_ctx: CUcontext, src: CUdeviceptr, src_ctx: CUcontext, bytes: usize,
                stream: CUstream) => memops::copies::copy_peer_async;
            cuMemcpyPeerAsync_ptsz("cuMemcpyPeerAsync", 7000, per_thread) CopyOnDevice fn(
                dst: CUdeviceptr, dst_ctx: CUcontext, src: CUdeviceptr, src_ctx: CUcontext, bytes: usize,
                stream: CUstream) => memops::copies::copy_peer_async;

            cuMemcpy2D_v2("cuMemcpy2D", 3020, legacy) CopyPitched fn(copy: *const Memcpy2D)
                => memops::pitched::copy;
            cuMemcpy2D_v2_ptds("cuMemcpy2D", 7000, per_thread) CopyPitched fn(copy: *const Memcpy2D)
                => memops::pitched::copy;
            cuMemcpy2DUnaligned_v2("cuMemcpy2DUnaligned", 3020, legacy) CopyPitched fn(copy: *const Memcpy2D)
                => memops::pitched::copy;
            cuMemcpy2DUnaligned_v2_ptds("cuMemcpy2DUnaligned", 7000, per_thread) CopyPitched fn(
                copy: *const Memcpy2D) => memops::pitched::copy;
            cuMemcpy2DAsync_v2("cuMemcpy2DAsync", 3020, legacy) CopyPitched fn(
                copy: *const Memcpy2D, stream: CUstream) => memops::pitched::copy_async;
            cuMemcpy2DAsync_v2_ptsz("cuMemcpy2DAsync", 7000, per_thread) CopyPitched fn(
                copy: *const Memcpy2D, stream: CUstream) => memops::pitched::copy_async;
            cuMemcpy3D_v2("cuMemcpy3D", 3020, legacy) CopyPitched fn(copy: *const Memcpy3D)
                => memops::pitched::copy;
            cuMemcpy3D_v2_ptds("cuMemcpy3D", 7000, per_thread) CopyPitched fn(copy: *const Memcpy3D)
                => memops::pitched::copy;
            cuMemcpy3DAsync_v2("cuMemcpy3DAsync", 3020, legacy) CopyPitched fn(
                copy: *const Memcpy3D, stream: CUstream) => memops::pitched::copy_async;
            cuMemcpy3DAsync_v2_ptsz("cuMemcpy3DAsync", 7000, per_thread) CopyPitched fn(
                copy: *const Memcpy3D, stream: CUstream) => memops::pitched::copy_async;
            cuMemsetD2D8_v2("cuMemsetD2D8", 3020, legacy) Memset fn(
                dst: CUdeviceptr, pitch: usize, value: u8, width: usize, height: usize) => memops::pitched::memset;
            cuMemsetD2D8_v2_ptds("cuMemsetD2D8", 7000, per_thread) Memset fn(
                dst: CUdeviceptr, pitch: usize, value: u8, width: usize, height: usize) => memops::pitched::memset;
            cuMemsetD2D16_v2("cuMemsetD2D16", 3020, legacy) Memset fn(
                dst: CUdeviceptr, pitch: usize, value: c_ushort, width: usize, height: usize)
                => memops::pitched::memset;
            cuMemsetD2D16_v2_ptds("cuMemsetD2D16", 7000, per_thread) Memset fn(
                dst: CUdeviceptr, pitch: usize, value: c_ushort, width: usize, height: usize)
                => memops::pitched::memset;
            cuMemsetD2D32_v2("cuMemsetD2D32", 3020, legacy) Memset fn(
                dst: CUdeviceptr, pitch: usize, value: c_uint, width: usize, height: usize)
                => memops::pitched::memset;
            cuMemsetD2D32_v2_ptds("cuMemsetD2D32", 7000, per_thread) Memset fn(
                dst: CUdeviceptr, pitch: usize, value: c_uint, width: usize, height: usize)
                => memops::pitched::memset;
            cuMemsetD2D8Async("cuMemsetD2D8Async", 3020, legacy) Memset fn(
                dst: CUdeviceptr, pitch: usize, value: u8, width: usize, height: usize, stream: CUstream)
                => memops::pitched::memset_async;
            cuMemsetD2D8Async_ptsz("cuMemsetD2D8Async", 7000, per_thread) Memset fn(
                dst: CUdeviceptr, pitch: usize, value: u8, width: usize, height: usize, stream: CUstream)
                => memops::pitched::memset_async;
            cuMemsetD2D16Async("cuMemsetD2D16Async", 3020, legacy) Memset fn(
                dst: CUdeviceptr, pitch: usize, value: c_ushort, width: usize, height: usize, stream: CUstream)
                => memops::pitched::memset_async;
            cuMemsetD2D16Async_ptsz("cuMemsetD2D16Async", 7000, per_thread) Memset fn(
                dst: CUdeviceptr, pitch: usize, value: c_ushort, width: usize, height: usize, stream: CUstream)
                => memops::pitched::memset_async;
            cuMemsetD2D32Async("cuMemsetD2D32Async", 3020, legacy) Memset fn(
                dst: CUdeviceptr, pitch: usize, value: c_uint, width: usize, height: usize, stream: CUstream)
                => memops::pitched::memset_async;
            cuMemsetD2D32Async_ptsz("cuMemsetD2D32Async", 7000, per_thread) Memset fn(
                dst: CUdeviceptr, pitch: usize, value: c_uint, width: usize, height: usize, stream: CUstream)
                => memops::pitched::memset_async;

            cuMemcpyDtoH_v2("cuMemcpyDtoH", 3020, legacy) CopyToHost fn(
                dst: *mut c_void, src: CUdeviceptr, bytes: usize)
                => memops::copies::copy_d2h;
            cuMemcpyDtoH_v2_ptds("cuMemcpyDtoH", 7000, per_thread) CopyToHost fn(
                dst: *mut c_void, src: CUdeviceptr, bytes: usize)
                => memops::copies::copy_d2h;
            cuMemcpyDtoHAsync_v2("cuMemcpyDtoHAsync", 3020, legacy) CopyToHost fn(
                dst: *mut c_void, src: CUdeviceptr, bytes: usize, stream: CUstream);
            cuMemcpyDtoHAsync_v2_ptsz("cuMemcpyDtoHAsync", 7000, per_thread) CopyToHost fn(
                dst: *mut c_void, src: CUdeviceptr, bytes: usize, stream: CUstream);
            cuStreamSynchronize("cuStreamSynchronize", 2000, legacy) Sync fn(stream: CUstream)
                => memops::stream_sync;
            cuStreamSynchronize_ptsz("cuStreamSynchronize", 7000, per_thread) Sync fn(stream: CUstream)
                => memops::stream_sync;
            cuCtxSynchronize("cuCtxSynchronize", 2000, legacy) Sync fn()
                => memops::ctx_sync;
            cuCtxSynchronize_v2("cuCtxSynchronize", 13000, legacy) Sync fn(ctx: CUcontext)
                => memops::ctx_sync_v2;
            cuEventSynchronize("cuEventSynchronize", 2000, legacy) Sync fn(event: CUevent)
                => memops::event_sync;
            cuStreamQuery("cuStreamQuery", 2000, legacy) Query fn(stream: CUstream)
                => memops::query;
            cuStreamQuery_ptsz("cuStreamQuery", 7000, per_thread) Query fn(stream: CUstream)
                => memops::query;
            cuEventQuery("cuEventQuery", 2000, legacy) Query fn(event: CUevent)
                => memops::query;

            cuGetProcAddress("cuGetProcAddress", 11030, legacy) ProcAddress fn(
                symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: u64)
                => proc_address::answer_v1;
            cuGetProcAddress_v2("cuGetProcAddress", 12000, legacy) ProcAddress fn(
                symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: u64, status: *mut c_void)
                => proc_address::answer_v2;
        }
    };
}
pub(crate) use hook_list;
