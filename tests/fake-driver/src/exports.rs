//! Every exported driver entry point, in one table:
//! `symbol[cuGetProcAddress name, first CUDA version, legacy|per_thread, init|noinit](args) => impl;`
//!
//! Signatures are those of cuda.h; a `_ptsz`/`_ptds` row has its legacy form's signature and
//! passes `true` as "stream 0 is the per-thread default stream".

use std::ffi::{c_char, c_float, c_int, c_uchar, c_uint, c_ulonglong, c_ushort, c_void};
use std::ptr::null_mut;

use crate::copies::CopyKind;
use crate::state::modules::Dims;
use crate::types::*;
use crate::{
    address_space, copies, device, events, graphs, kernels, memory, pitched, streams, table, vmm,
};

driver_api! {
    // ---- initialisation, versions, cuGetProcAddress -------------------------------------------
    cuInit["cuInit", 2000, legacy, noinit](flags: c_uint) => device::init(flags);
    cuDriverGetVersion["cuDriverGetVersion", 2020, legacy, noinit](version: *mut c_int)
        => device::driver_get_version(version);
    cuGetProcAddress["cuGetProcAddress", 11030, legacy, noinit](
        symbol: *const c_char, pfn: *mut *mut c_void, cuda_version: c_int, flags: u64,
    ) => table::get_proc_address(TABLE, symbol, pfn, cuda_version, flags, null_mut());
    cuGetProcAddress_v2["cuGetProcAddress", 12000, legacy, noinit](
        symbol: *const c_char, pfn: *mut *mut c_void, cuda_version: c_int, flags: u64,
        symbol_status: *mut c_int,
    ) => table::get_proc_address(TABLE, symbol, pfn, cuda_version, flags, symbol_status);
    cuGetExportTable["cuGetExportTable", 3000, legacy, init](
        pp_export_table: *mut *const c_void, table_id: *const CUuuid,
    ) => device::get_export_table(pp_export_table, table_id);
    cuGetErrorName["cuGetErrorName", 6000, legacy, init](error: CUresult, p_str: *mut *const c_char)
        => device::error_text(error, p_str, true);
    cuGetErrorString["cuGetErrorString", 6000, legacy, init](error: CUresult, p_str: *mut *const c_char)
        => device::error_text(error, p_str, false);

    // ---- device -------------------------------------------------------------------------------
    cuDeviceGet["cuDeviceGet", 2000, legacy, init](device_out: *mut CUdevice, ordinal: c_int)
        => device::device_get(device_out, ordinal);
    cuDeviceGetCount["cuDeviceGetCount", 2000, legacy, init](count: *mut c_int)
        => device::device_get_count(count);
    cuDeviceGetName["cuDeviceGetName", 2000, legacy, init](name: *mut c_char, len: c_int, dev: CUdevice)
        => device::device_get_name(name, len, dev);
    cuDeviceGetAttribute["cuDeviceGetAttribute", 2000, legacy, init](
        pi: *mut c_int, attrib: c_int, dev: CUdevice,
    ) => device::device_get_attribute(pi, attrib, dev);
    cuDeviceTotalMem_v2["cuDeviceTotalMem", 3020, legacy, init](bytes: *mut usize, dev: CUdevice)
        => device::device_total_mem(bytes, dev);
    cuDeviceGetUuid["cuDeviceGetUuid", 9020, legacy, init](uuid: *mut CUuuid, dev: CUdevice)
        => device::device_get_uuid(uuid, dev);
    cuDeviceGetUuid_v2["cuDeviceGetUuid", 11040, legacy, init](uuid: *mut CUuuid, dev: CUdevice)
        => device::device_get_uuid(uuid, dev);
    cuDeviceGetDefaultMemPool["cuDeviceGetDefaultMemPool", 11020, legacy, init](
        pool: *mut Handle, dev: CUdevice,
    ) => memory::device_get_default_mem_pool(pool, dev);

    // ---- contexts -----------------------------------------------------------------------------
    cuDevicePrimaryCtxRetain["cuDevicePrimaryCtxRetain", 7000, legacy, init](
        pctx: *mut Handle, dev: CUdevice,
    ) => device::primary_ctx_retain(pctx, dev);
    cuDevicePrimaryCtxRelease_v2["cuDevicePrimaryCtxRelease", 11000, legacy, init](dev: CUdevice)
        => device::primary_ctx_release(dev);
    cuCtxCreate_v2["cuCtxCreate", 3020, legacy, init](pctx: *mut Handle, flags: c_uint, dev: CUdevice)
        => device::ctx_create(pctx, flags, dev);
    cuCtxDestroy_v2["cuCtxDestroy", 4000, legacy, init](ctx: Handle) => device::ctx_destroy(ctx);
    cuCtxSetCurrent["cuCtxSetCurrent", 4000, legacy, init](ctx: Handle) => device::ctx_set_current(ctx);
    cuCtxGetCurrent["cuCtxGetCurrent", 4000, legacy, init](pctx: *mut Handle)
        => device::ctx_get_current(pctx);
    cuCtxGetDevice["cuCtxGetDevice", 2000, legacy, init](dev: *mut CUdevice)
        => device::ctx_get_device(dev);
    cuCtxSynchronize["cuCtxSynchronize", 2000, legacy, init]() => streams::ctx_synchronize();
    cuCtxSynchronize_v2["cuCtxSynchronize", 13000, legacy, init](_ctx: Handle) => streams::ctx_synchronize();

    // ---- modules ------------------------------------------------------------------------------
    cuModuleLoadData["cuModuleLoadData", 2000, legacy, init](module: *mut Handle, image: *const c_void)
        => kernels::module_load_data(module, image);
    cuModuleUnload["cuModuleUnload", 2000, legacy, init](module: Handle) => kernels::module_unload(module);
    cuModuleGetFunction["cuModuleGetFunction", 2000, legacy, init](
        func: *mut Handle, module: Handle, name: *const c_char,
    ) => kernels::module_get_function(func, module, name);
    cuFuncGetName["cuFuncGetName", 12030, legacy, init](name: *mut *const c_char, func: Handle)
        => kernels::func_get_name(name, func);
    cuFuncGetAttribute["cuFuncGetAttribute", 2020, legacy, init](
        pi: *mut c_int, attrib: c_int, func: Handle,
    ) => kernels::func_get_attribute(pi, attrib, func);
    cuFuncSetAttribute["cuFuncSetAttribute", 9000, legacy, init](
        func: Handle, attrib: c_int, value: c_int,
    ) => kernels::func_set_attribute(func, attrib, value);

    // ---- launches -----------------------------------------------------------------------------
    cuLaunchKernel["cuLaunchKernel", 4000, legacy, init](
        f: Handle, grid_x: c_uint, grid_y: c_uint, grid_z: c_uint,
        block_x: c_uint, block_y: c_uint, block_z: c_uint, shared_mem_bytes: c_uint,
        stream: Handle, kernel_params: *mut *mut c_void, extra: *mut *mut c_void,
    ) => kernels::launch(
        f,
        Dims { grid: [grid_x, grid_y, grid_z], block: [block_x, block_y, block_z], shared: shared_mem_bytes },
        stream, false, kernel_params, extra,
    );
    cuLaunchKernel_ptsz["cuLaunchKernel", 7000, per_thread, init](
        f: Handle, grid_x: c_uint, grid_y: c_uint, grid_z: c_uint,
        block_x: c_uint, block_y: c_uint, block_z: c_uint, shared_mem_bytes: c_uint,
        stream: Handle, kernel_params: *mut *mut c_void, extra: *mut *mut c_void,
    ) => kernels::launch(
        f,
        Dims { grid: [grid_x, grid_y, grid_z], block: [block_x, block_y, block_z], shared: shared_mem_bytes },
        stream, true, kernel_params, extra,
    );
    cuLaunchKernelEx["cuLaunchKernelEx", 11060, legacy, init](
        config: *const CUlaunchConfig, f: Handle, kernel_params: *mut *mut c_void, extra: *mut *mut c_void,
    ) => kernels::launch_ex(config, f, kernel_params, extra, false);
    cuLaunchKernelEx_ptsz["cuLaunchKernelEx", 11060, per_thread, init](
        config: *const CUlaunchConfig, f: Handle, kernel_params: *mut *mut c_void, extra: *mut *mut c_void,
    ) => kernels::launch_ex(config, f, kernel_params, extra, true);
    cuLaunchCooperativeKernel["cuLaunchCooperativeKernel", 9000, legacy, init](
        f: Handle, grid_x: c_uint, grid_y: c_uint, grid_z: c_uint,
        block_x: c_uint, block_y: c_uint, block_z: c_uint, shared_mem_bytes: c_uint,
        stream: Handle, kernel_params: *mut *mut c_void,
    ) => kernels::launch(
        f,
        Dims { grid: [grid_x, grid_y, grid_z], block: [block_x, block_y, block_z], shared: shared_mem_bytes },
        stream, false, kernel_params, null_mut(),
    );
    cuLaunchCooperativeKernel_ptsz["cuLaunchCooperativeKernel", 9000, per_thread, init](
        f: Handle, grid_x: c_uint, grid_y: c_uint, grid_z: c_uint,
        block_x: c_uint, block_y: c_uint, block_z: c_uint, shared_mem_bytes: c_uint,
        stream: Handle, kernel_params: *mut *mut c_void,
    ) => kernels::launch(
        f,
        Dims { grid: [grid_x, grid_y, grid_z], block: [block_x, block_y, block_z], shared: shared_mem_bytes },
        stream, true, kernel_params, null_mut(),
    );

    // ---- graphs -------------------------------------------------------------------------------
    cuGraphCreate["cuGraphCreate", 10000, legacy, init](graph: *mut Handle, flags: c_uint)
        => graphs::graph_create(graph, flags);
    cuGraphAddKernelNode_v2["cuGraphAddKernelNode", 12000, legacy, init](
        node: *mut Handle, graph: Handle, dependencies: *const Handle, num_dependencies: usize,
        node_params: *const KernelNodeParamsV2,
    ) => graphs::add_kernel_node(node, graph, dependencies, num_dependencies, node_params);
    cuGraphGetNodes["cuGraphGetNodes", 10000, legacy, init](
        graph: Handle, nodes: *mut Handle, num_nodes: *mut usize,
    ) => graphs::graph_get_nodes(graph, nodes, num_nodes);
    cuGraphNodeGetType["cuGraphNodeGetType", 10000, legacy, init](node: Handle, node_type: *mut c_uint)
        => graphs::node_get_type(node, node_type);
    cuGraphInstantiateWithFlags["cuGraphInstantiateWithFlags", 11040, legacy, init](
        exec: *mut Handle, graph: Handle, flags: c_ulonglong,
    ) => graphs::instantiate(exec, graph, flags);
    cuGraphInstantiate_v2["cuGraphInstantiate", 11000, legacy, init](
        exec: *mut Handle, graph: Handle, _error_node: *mut Handle, _log: *mut c_char, _log_size: usize,
    ) => graphs::instantiate(exec, graph, 0);
    cuGraphInstantiateWithParams["cuGraphInstantiateWithParams", 12000, legacy, init](
        exec: *mut Handle, graph: Handle, params: *const c_ulonglong,
    ) => graphs::instantiate_with_params(exec, graph, params);
    cuGraphInstantiateWithParams_ptsz["cuGraphInstantiateWithParams", 12000, per_thread, init](
        exec: *mut Handle, graph: Handle, params: *const c_ulonglong,
    ) => graphs::instantiate_with_params(exec, graph, params);
    cuStreamBeginCapture["cuStreamBeginCapture", 10000, legacy, init](stream: Handle)
        => graphs::begin_capture(stream, false);
    cuStreamBeginCapture_ptsz["cuStreamBeginCapture", 10000, per_thread, init](stream: Handle)
        => graphs::begin_capture(stream, true);
    cuStreamBeginCapture_v2["cuStreamBeginCapture", 10010, legacy, init](stream: Handle, _mode: c_uint)
        => graphs::begin_capture(stream, false);
    cuStreamBeginCapture_v2_ptsz["cuStreamBeginCapture", 10010, per_thread, init](stream: Handle, _mode: c_uint)
        => graphs::begin_capture(stream, true);
    cuStreamEndCapture["cuStreamEndCapture", 10000, legacy, init](stream: Handle, graph: *mut Handle)
        => graphs::end_capture(stream, false, graph);
    cuStreamEndCapture_ptsz["cuStreamEndCapture", 10000, per_thread, init](stream: Handle, graph: *mut Handle)
        => graphs::end_capture(stream, true, graph);
    cuStreamIsCapturing["cuStreamIsCapturing", 10000, legacy, init](stream: Handle, status: *mut c_uint)
        => graphs::is_capturing(stream, false, status);
    cuThreadExchangeStreamCaptureMode["cuThreadExchangeStreamCaptureMode", 10010, legacy, init](
        mode: *mut c_uint,
    ) => graphs::exchange_capture_mode(mode);
    cuStreamIsCapturing_ptsz["cuStreamIsCapturing", 10000, per_thread, init](stream: Handle, status: *mut c_uint)
        => graphs::is_capturing(stream, true, status);
    cuGraphLaunch["cuGraphLaunch", 10000, legacy, init](exec: Handle, stream: Handle)
        => graphs::graph_launch(exec, stream, false);
    cuGraphLaunch_ptsz["cuGraphLaunch", 10000, per_thread, init](exec: Handle, stream: Handle)
        => graphs::graph_launch(exec, stream, true);
    cuGraphExecDestroy["cuGraphExecDestroy", 10000, legacy, init](exec: Handle)
        => graphs::exec_destroy(exec);
    cuGraphDestroy["cuGraphDestroy", 10000, legacy, init](graph: Handle) => graphs::graph_destroy(graph);

    // ---- memory -------------------------------------------------------------------------------
    cuMemAlloc_v2["cuMemAlloc", 3020, legacy, init](dptr: *mut CUdeviceptr, bytesize: usize)
        => memory::mem_alloc(dptr, bytesize);
    cuMemAllocPitch_v2["cuMemAllocPitch", 3020, legacy, init](
        dptr: *mut CUdeviceptr, pitch: *mut usize, width_in_bytes: usize, height: usize,
        element_size_bytes: c_uint,
    ) => memory::mem_alloc_pitch(dptr, pitch, width_in_bytes, height, element_size_bytes);
    cuMemAllocAsync["cuMemAllocAsync", 11020, legacy, init](
        dptr: *mut CUdeviceptr, bytesize: usize, stream: Handle,
    ) => memory::mem_alloc_async(dptr, bytesize, None, stream, false);
    cuMemAllocAsync_ptsz["cuMemAllocAsync", 11020, per_thread, init](
        dptr: *mut CUdeviceptr, bytesize: usize, stream: Handle,
    ) => memory::mem_alloc_async(dptr, bytesize, None, stream, true);
    cuMemAllocFromPoolAsync["cuMemAllocFromPoolAsync", 11020, legacy, init](
        dptr: *mut CUdeviceptr, bytesize: usize, pool: Handle, stream: Handle,
    ) => memory::mem_alloc_async(dptr, bytesize, Some(pool), stream, false);
    cuMemAllocFromPoolAsync_ptsz["cuMemAllocFromPoolAsync", 11020, per_thread, init](
        dptr: *mut CUdeviceptr, bytesize: usize, pool: Handle, stream: Handle,
    ) => memory::mem_alloc_async(dptr, bytesize, Some(pool), stream, true);
    cuMemFree_v2["cuMemFree", 3020, legacy, init](dptr: CUdeviceptr) => memory::mem_free(dptr);
    cuMemFreeAsync["cuMemFreeAsync", 11020, legacy, init](dptr: CUdeviceptr, stream: Handle)
        => memory::mem_free_async(dptr, stream, false);
    cuMemFreeAsync_ptsz["cuMemFreeAsync", 11020, per_thread, init](dptr: CUdeviceptr, stream: Handle)
        => memory::mem_free_async(dptr, stream, true);
    cuMemGetInfo_v2["cuMemGetInfo", 3020, legacy, init](free: *mut usize, total: *mut usize)
        => memory::mem_get_info(free, total);

    // ---- copies and memsets -------------------------------------------------------------------
    cuMemcpyHtoD_v2["cuMemcpyHtoD", 3020, legacy, init](
        dst: CUdeviceptr, src: *const c_void, byte_count: usize,
    ) => copies::memcpy_htod(dst, src, byte_count, null_mut(), false, true);
    cuMemcpyHtoD_v2_ptds["cuMemcpyHtoD", 7000, per_thread, init](
        dst: CUdeviceptr, src: *const c_void, byte_count: usize,
    ) => copies::memcpy_htod(dst, src, byte_count, null_mut(), true, true);
    cuMemcpyHtoDAsync_v2["cuMemcpyHtoDAsync", 3020, legacy, init](
        dst: CUdeviceptr, src: *const c_void, byte_count: usize, stream: Handle,
    ) => copies::memcpy_htod(dst, src, byte_count, stream, false, false);
    cuMemcpyHtoDAsync_v2_ptsz["cuMemcpyHtoDAsync", 7000, per_thread, init](
        dst: CUdeviceptr, src: *const c_void, byte_count: usize, stream: Handle,
    ) => copies::memcpy_htod(dst, src, byte_count, stream, true, false);
    cuMemcpyDtoH_v2["cuMemcpyDtoH", 3020, legacy, init](
        dst: *mut c_void, src: CUdeviceptr, byte_count: usize,
    ) => copies::memcpy_dtoh(dst, src, byte_count, null_mut(), false, true);
    cuMemcpyDtoH_v2_ptds["cuMemcpyDtoH", 7000, per_thread, init](
        dst: *mut c_void, src: CUdeviceptr, byte_count: usize,
    ) => copies::memcpy_dtoh(dst, src, byte_count, null_mut(), true, true);
    cuMemcpyDtoHAsync_v2["cuMemcpyDtoHAsync", 3020, legacy, init](
        dst: *mut c_void, src: CUdeviceptr, byte_count: usize, stream: Handle,
    ) => copies::memcpy_dtoh(dst, src, byte_count, stream, false, false);
    cuMemcpyDtoHAsync_v2_ptsz["cuMemcpyDtoHAsync", 7000, per_thread, init](
        dst: *mut c_void, src: CUdeviceptr, byte_count: usize, stream: Handle,
    ) => copies::memcpy_dtoh(dst, src, byte_count, stream, true, false);
    cuMemcpyDtoD_v2["cuMemcpyDtoD", 3020, legacy, init](
        dst: CUdeviceptr, src: CUdeviceptr, byte_count: usize,
    ) => copies::memcpy(dst, src, byte_count, CopyKind::DeviceToDevice, null_mut(), false, true);
    cuMemcpyDtoD_v2_ptds["cuMemcpyDtoD", 7000, per_thread, init](
        dst: CUdeviceptr, src: CUdeviceptr, byte_count: usize,
    ) => copies::memcpy(dst, src, byte_count, CopyKind::DeviceToDevice, null_mut(), true, true);
    cuMemcpyDtoDAsync_v2["cuMemcpyDtoDAsync", 3020, legacy, init](
        dst: CUdeviceptr, src: CUdeviceptr, byte_count: usize, stream: Handle,
    ) => copies::memcpy(dst, src, byte_count, CopyKind::DeviceToDevice, stream, false, false);
    cuMemcpyDtoDAsync_v2_ptsz["cuMemcpyDtoDAsync", 7000, per_thread, init](
        dst: CUdeviceptr, src: CUdeviceptr, byte_count: usize, stream: Handle,
    ) => copies::memcpy(dst, src, byte_count, CopyKind::DeviceToDevice, stream, true, false);
    cuMemcpy["cuMemcpy", 4000, legacy, init](dst: CUdeviceptr, src: CUdeviceptr, byte_count: usize)
        => copies::memcpy(dst, src, byte_count, CopyKind::Unified, null_mut(), false, true);
    cuMemcpy_ptds["cuMemcpy", 7000, per_thread, init](
        dst: CUdeviceptr, src: CUdeviceptr, byte_count: usize,
    ) => copies::memcpy(dst, src, byte_count, CopyKind::Unified, null_mut(), true, true);
    cuMemcpyAsync["cuMemcpyAsync", 4000, legacy, init](
        dst: CUdeviceptr, src: CUdeviceptr, byte_count: usize, stream: Handle,
    ) => copies::memcpy(dst, src, byte_count, CopyKind::Unified, stream, false, false);
    cuMemcpyAsync_ptsz["cuMemcpyAsync", 7000, per_thread, init](
        dst: CUdeviceptr, src: CUdeviceptr, byte_count: usize, stream: Handle,
    ) => copies::memcpy(dst, src, byte_count, CopyKind::Unified, stream, true, false);
    cuMemsetD8_v2["cuMemsetD8", 3020, legacy, init](dst: CUdeviceptr, uc: c_uchar, n: usize)
        => pitched::memset_2d(dst, 0, u32::from(uc), 1, n, 1, null_mut(), false, true);
    cuMemsetD8_v2_ptds["cuMemsetD8", 7000, per_thread, init](dst: CUdeviceptr, uc: c_uchar, n: usize)
        => pitched::memset_2d(dst, 0, u32::from(uc), 1, n, 1, null_mut(), true, true);
    cuMemsetD16_v2["cuMemsetD16", 3020, legacy, init](dst: CUdeviceptr, us: c_ushort, n: usize)
        => pitched::memset_2d(dst, 0, u32::from(us), 2, n, 1, null_mut(), false, true);
    cuMemsetD16_v2_ptds["cuMemsetD16", 7000, per_thread, init](dst: CUdeviceptr, us: c_ushort, n: usize)
        => pitched::memset_2d(dst, 0, u32::from(us), 2, n, 1, null_mut(), true, true);
    cuMemsetD32_v2["cuMemsetD32", 3020, legacy, init](dst: CUdeviceptr, ui: c_uint, n: usize)
        => pitched::memset_2d(dst, 0, ui, 4, n, 1, null_mut(), false, true);
    cuMemsetD32_v2_ptds["cuMemsetD32", 7000, per_thread, init](dst: CUdeviceptr, ui: c_uint, n: usize)
        => pitched::memset_2d(dst, 0, ui, 4, n, 1, null_mut(), true, true);
    cuMemsetD8Async["cuMemsetD8Async", 3020, legacy, init](
        dst: CUdeviceptr, uc: c_uchar, n: usize, stream: Handle,
    ) => pitched::memset_2d(dst, 0, u32::from(uc), 1, n, 1, stream, false, false);
    cuMemsetD8Async_ptsz["cuMemsetD8Async", 7000, per_thread, init](
        dst: CUdeviceptr, uc: c_uchar, n: usize, stream: Handle,
    ) => pitched::memset_2d(dst, 0, u32::from(uc), 1, n, 1, stream, true, false);
    cuMemsetD16Async["cuMemsetD16Async", 3020, legacy, init](
        dst: CUdeviceptr, us: c_ushort, n: usize, stream: Handle,
    ) => pitched::memset_2d(dst, 0, u32::from(us), 2, n, 1, stream, false, false);
    cuMemsetD16Async_ptsz["cuMemsetD16Async", 7000, per_thread, init](
        dst: CUdeviceptr, us: c_ushort, n: usize, stream: Handle,
    ) => pitched::memset_2d(dst, 0, u32::from(us), 2, n, 1, stream, true, false);
    cuMemsetD32Async["cuMemsetD32Async", 3020, legacy, init](
        dst: CUdeviceptr, ui: c_uint, n: usize, stream: Handle,
    ) => pitched::memset_2d(dst, 0, ui, 4, n, 1, stream, false, false);
    cuMemsetD32Async_ptsz["cuMemsetD32Async", 7000, per_thread, init](
        dst: CUdeviceptr, ui: c_uint, n: usize, stream: Handle,
    ) => pitched::memset_2d(dst, 0, ui, 4, n, 1, stream, true, false);
    cuMemcpyPeer["cuMemcpyPeer", 4000, legacy, init](
        dst: CUdeviceptr, dst_ctx: Handle, src: CUdeviceptr, src_ctx: Handle, byte_count: usize,
    ) => copies::memcpy_peer(dst, dst_ctx, src, src_ctx, byte_count, null_mut(), false, true);
    cuMemcpyPeer_ptds["cuMemcpyPeer", 7000, per_thread, init](
        dst: CUdeviceptr, dst_ctx: Handle, src: CUdeviceptr, src_ctx: Handle, byte_count: usize,
    ) => copies::memcpy_peer(dst, dst_ctx, src, src_ctx, byte_count, null_mut(), true, true);
    cuMemcpyPeerAsync["cuMemcpyPeerAsync", 4000, legacy, init](
        dst: CUdeviceptr, dst_ctx: Handle, src: CUdeviceptr, src_ctx: Handle, byte_count: usize,
        stream: Handle,
    ) => copies::memcpy_peer(dst, dst_ctx, src, src_ctx, byte_count, stream, false, false);
    cuMemcpyPeerAsync_ptsz["cuMemcpyPeerAsync", 7000, per_thread, init](
        dst: CUdeviceptr, dst_ctx: Handle, src: CUdeviceptr, src_ctx: Handle, byte_count: usize,
        stream: Handle,
    ) => copies::memcpy_peer(dst, dst_ctx, src, src_ctx, byte_count, stream, true, false);

    // ---- 2D and 3D copies, pitched memsets ----------------------------------------------------
    cuMemcpy2D_v2["cuMemcpy2D", 3020, legacy, init](copy: *const Memcpy2D)
        => pitched::memcpy_2d(copy, null_mut(), false, true);
    cuMemcpy2D_v2_ptds["cuMemcpy2D", 7000, per_thread, init](copy: *const Memcpy2D)
        => pitched::memcpy_2d(copy, null_mut(), true, true);
    cuMemcpy2DUnaligned_v2["cuMemcpy2DUnaligned", 3020, legacy, init](copy: *const Memcpy2D)
        => pitched::memcpy_2d(copy, null_mut(), false, true);
    cuMemcpy2DUnaligned_v2_ptds["cuMemcpy2DUnaligned", 7000, per_thread, init](copy: *const Memcpy2D)
        => pitched::memcpy_2d(copy, null_mut(), true, true);
    cuMemcpy2DAsync_v2["cuMemcpy2DAsync", 3020, legacy, init](copy: *const Memcpy2D, stream: Handle)
        => pitched::memcpy_2d(copy, stream, false, false);
    cuMemcpy2DAsync_v2_ptsz["cuMemcpy2DAsync", 7000, per_thread, init](
        copy: *const Memcpy2D, stream: Handle,
    ) => pitched::memcpy_2d(copy, stream, true, false);
    cuMemcpy3D_v2["cuMemcpy3D", 3020, legacy, init](copy: *const Memcpy3D)
        => pitched::memcpy_3d(copy, null_mut(), false, true);
    cuMemcpy3D_v2_ptds["cuMemcpy3D", 7000, per_thread, init](copy: *const Memcpy3D)
        => pitched::memcpy_3d(copy, null_mut(), true, true);
    cuMemcpy3DAsync_v2["cuMemcpy3DAsync", 3020, legacy, init](copy: *const Memcpy3D, stream: Handle)
        => pitched::memcpy_3d(copy, stream, false, false);
    cuMemcpy3DAsync_v2_ptsz["cuMemcpy3DAsync", 7000, per_thread, init](
        copy: *const Memcpy3D, stream: Handle,
    ) => pitched::memcpy_3d(copy, stream, true, false);
    cuMemsetD2D8_v2["cuMemsetD2D8", 3020, legacy, init](
        dst: CUdeviceptr, pitch: usize, uc: c_uchar, width: usize, height: usize,
    ) => pitched::memset_2d(dst, pitch, u32::from(uc), 1, width, height, null_mut(), false, true);
    cuMemsetD2D8_v2_ptds["cuMemsetD2D8", 7000, per_thread, init](
        dst: CUdeviceptr, pitch: usize, uc: c_uchar, width: usize, height: usize,
    ) => pitched::memset_2d(dst, pitch, u32::from(uc), 1, width, height, null_mut(), true, true);
    cuMemsetD2D16_v2["cuMemsetD2D16", 3020, legacy, init](
        dst: CUdeviceptr, pitch: usize, us: c_ushort, width: usize, height: usize,
    ) => pitched::memset_2d(dst, pitch, u32::from(us), 2, width, height, null_mut(), false, true);
    cuMemsetD2D16_v2_ptds["cuMemsetD2D16", 7000, per_thread, init](
        dst: CUdeviceptr, pitch: usize, us: c_ushort, width: usize, height: usize,
    ) => pitched::memset_2d(dst, pitch, u32::from(us), 2, width, height, null_mut(), true, true);
    cuMemsetD2D32_v2["cuMemsetD2D32", 3020, legacy, init](
        dst: CUdeviceptr, pitch: usize, ui: c_uint, width: usize, height: usize,
    ) => pitched::memset_2d(dst, pitch, ui, 4, width, height, null_mut(), false, true);
    cuMemsetD2D32_v2_ptds["cuMemsetD2D32", 7000, per_thread, init](
        dst: CUdeviceptr, pitch: usize, ui: c_uint, width: usize, height: usize,
    ) => pitched::memset_2d(dst, pitch, ui, 4, width, height, null_mut(), true, true);
    cuMemsetD2D8Async["cuMemsetD2D8Async", 3020, legacy, init](
        dst: CUdeviceptr, pitch: usize, uc: c_uchar, width: usize, height: usize, stream: Handle,
    ) => pitched::memset_2d(dst, pitch, u32::from(uc), 1, width, height, stream, false, false);
    cuMemsetD2D8Async_ptsz["cuMemsetD2D8Async", 7000, per_thread, init](
        dst: CUdeviceptr, pitch: usize, uc: c_uchar, width: usize, height: usize, stream: Handle,
    ) => pitched::memset_2d(dst, pitch, u32::from(uc), 1, width, height, stream, true, false);
    cuMemsetD2D16Async["cuMemsetD2D16Async", 3020, legacy, init](
        dst: CUdeviceptr, pitch: usize, us: c_ushort, width: usize, height: usize, stream: Handle,
    ) => pitched::memset_2d(dst, pitch, u32::from(us), 2, width, height, stream, false, false);
    cuMemsetD2D16Async_ptsz["cuMemsetD2D16Async", 7000, per_thread, init](
        dst: CUdeviceptr, pitch: usize, us: c_ushort, width: usize, height: usize, stream: Handle,
    ) => pitched::memset_2d(dst, pitch, u32::from(us), 2, width, height, stream, true, false);
    cuMemsetD2D32Async["cuMemsetD2D32Async", 3020, legacy, init](
        dst: CUdeviceptr, pitch: usize, ui: c_uint, width: usize, height: usize, stream: Handle,
    ) => pitched::memset_2d(dst, pitch, ui, 4, width, height, stream, false, false);
    cuMemsetD2D32Async_ptsz["cuMemsetD2D32Async", 7000, per_thread, init](
        dst: CUdeviceptr, pitch: usize, ui: c_uint, width: usize, height: usize, stream: Handle,
    ) => pitched::memset_2d(dst, pitch, ui, 4, width, height, stream, true, false);

    // ---- streams and events -------------------------------------------------------------------
    cuStreamCreate["cuStreamCreate", 2000, legacy, init](stream: *mut Handle, flags: c_uint)
        => streams::stream_create(stream, flags);
    cuStreamCreateWithPriority["cuStreamCreateWithPriority", 5050, legacy, init](
        stream: *mut Handle, flags: c_uint, priority: c_int,
    ) => streams::stream_create_with_priority(stream, flags, priority);
    cuStreamGetPriority["cuStreamGetPriority", 5050, legacy, init](stream: Handle, priority: *mut c_int)
        => streams::stream_get_priority(stream, priority, false);
    cuStreamGetPriority_ptsz["cuStreamGetPriority", 7000, per_thread, init](
        stream: Handle, priority: *mut c_int,
    ) => streams::stream_get_priority(stream, priority, true);
    cuCtxGetStreamPriorityRange["cuCtxGetStreamPriorityRange", 5050, legacy, init](
        least_priority: *mut c_int, greatest_priority: *mut c_int,
    ) => streams::ctx_get_stream_priority_range(least_priority, greatest_priority);
    cuStreamDestroy_v2["cuStreamDestroy", 4000, legacy, init](stream: Handle)
        => streams::stream_destroy(stream);
    cuStreamSynchronize["cuStreamSynchronize", 2000, legacy, init](stream: Handle)
        => streams::stream_synchronize(stream, false);
    cuStreamSynchronize_ptsz["cuStreamSynchronize", 7000, per_thread, init](stream: Handle)
        => streams::stream_synchronize(stream, true);
    cuStreamQuery["cuStreamQuery", 2000, legacy, init](stream: Handle)
        => streams::stream_query(stream, false);
    cuStreamQuery_ptsz["cuStreamQuery", 7000, per_thread, init](stream: Handle)
        => streams::stream_query(stream, true);
    cuEventCreate["cuEventCreate", 2000, legacy, init](event: *mut Handle, flags: c_uint)
        => events::event_create(event, flags);
    cuEventRecord["cuEventRecord", 2000, legacy, init](event: Handle, stream: Handle)
        => events::event_record(event, stream, false);
    cuEventRecord_ptsz["cuEventRecord", 7000, per_thread, init](event: Handle, stream: Handle)
        => events::event_record(event, stream, true);
    cuEventQuery["cuEventQuery", 2000, legacy, init](event: Handle) => events::event_query(event);
    cuEventSynchronize["cuEventSynchronize", 2000, legacy, init](event: Handle)
        => events::event_synchronize(event);
    cuEventElapsedTime["cuEventElapsedTime", 2000, legacy, init](
        ms: *mut c_float, start: Handle, end: Handle,
    ) => events::event_elapsed_time(ms, start, end);
    cuEventDestroy_v2["cuEventDestroy", 4000, legacy, init](event: Handle)
        => events::event_destroy(event);

    // ---- virtual memory management ------------------------------------------------------------
    cuMemGetAllocationGranularity["cuMemGetAllocationGranularity", 10020, legacy, init](
        granularity: *mut usize, prop: *const CUmemAllocationProp, option: c_uint,
    ) => vmm::get_allocation_granularity(granularity, prop, option);
    cuMemCreate["cuMemCreate", 10020, legacy, init](
        handle: *mut CUmemGenericAllocationHandle, size: usize, prop: *const CUmemAllocationProp,
        flags: c_ulonglong,
    ) => vmm::mem_create(handle, size, prop, flags);
    cuMemRelease["cuMemRelease", 10020, legacy, init](handle: CUmemGenericAllocationHandle)
        => vmm::mem_release(handle);
    cuMemAddressReserve["cuMemAddressReserve", 10020, legacy, init](
        ptr: *mut CUdeviceptr, size: usize, alignment: usize, addr: CUdeviceptr, flags: c_ulonglong,
    ) => address_space::address_reserve(ptr, size, alignment, addr, flags);
    cuMemAddressFree["cuMemAddressFree", 10020, legacy, init](ptr: CUdeviceptr, size: usize)
        => address_space::address_free(ptr, size);
    cuMemMap["cuMemMap", 10020, legacy, init](
        ptr: CUdeviceptr, size: usize, offset: usize, handle: CUmemGenericAllocationHandle,
        flags: c_ulonglong,
    ) => address_space::mem_map(ptr, size, offset, handle, flags);
    cuMemUnmap["cuMemUnmap", 10020, legacy, init](ptr: CUdeviceptr, size: usize)
        => address_space::mem_unmap(ptr, size);
    cuMemSetAccess["cuMemSetAccess", 10020, legacy, init](
        ptr: CUdeviceptr, size: usize, desc: *const CUmemAccessDesc, count: usize,
    ) => address_space::mem_set_access(ptr, size, desc, count);
    cuMemExportToShareableHandle["cuMemExportToShareableHandle", 10020, legacy, init](
        shareable_handle: *mut c_void, handle: CUmemGenericAllocationHandle, handle_type: c_uint,
        flags: c_ulonglong,
    ) => vmm::export_to_shareable_handle(shareable_handle, handle, handle_type, flags);
    cuMemImportFromShareableHandle["cuMemImportFromShareableHandle", 10020, legacy, init](
        handle: *mut CUmemGenericAllocationHandle, os_handle: *mut c_void, sh_handle_type: c_uint,
    ) => vmm::import_from_shareable_handle(handle, os_handle, sh_handle_type);
}
