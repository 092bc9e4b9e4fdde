/*
 * cuda_min.h: the few CUDA driver API declarations the tandem test hosts use.
 *
 * Written from the CUDA driver API reference (types, signatures and the
 * numeric values of the constants); not a copy of NVIDIA's cuda.h. Only the
 * exported ABI symbol names are declared (cuMemAlloc_v2, not the cuMemAlloc
 * macro), because the hosts must say exactly which variant they call.
 */
#ifndef TANDEM_CUDA_MIN_H
#define TANDEM_CUDA_MIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int CUresult; /* an enum in cuda.h; int-sized in the ABI */
typedef int CUdevice;
typedef unsigned long long CUdeviceptr; /* the 64-bit (_v2) device pointer */
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUkern_st *CUkernel;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphNode_st *CUgraphNode;
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct CUmemPoolHandle_st *CUmemoryPool;
typedef struct CUlaunchAttribute_st CUlaunchAttribute; /* only passed as NULL */

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_SHARED_OBJECT_INIT_FAILED 303
#define CUDA_ERROR_NOT_FOUND 500
#define CUDA_ERROR_NOT_READY 600

#define CU_STREAM_DEFAULT 0x0u
#define CU_STREAM_CAPTURE_MODE_GLOBAL 0u
#define CU_STREAM_NON_BLOCKING 0x1u
#define CU_STREAM_LEGACY ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)
#define CU_EVENT_DEFAULT 0x0u

/* cuGetProcAddress flags */
#define CU_GET_PROC_ADDRESS_DEFAULT 0x0ull
#define CU_GET_PROC_ADDRESS_LEGACY_STREAM 0x1ull
#define CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM 0x2ull
/* CUdriverProcAddressQueryResult */
typedef int CUdriverProcAddressQueryResult;
#define CU_GET_PROC_ADDRESS_SUCCESS 0
#define CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND 1
#define CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT 2

/* Virtual memory management */
typedef int CUmemAllocationType;
#define CU_MEM_ALLOCATION_TYPE_PINNED 0x1
typedef int CUmemAllocationHandleType;
#define CU_MEM_HANDLE_TYPE_NONE 0x0
#define CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR 0x1
typedef int CUmemLocationType;
#define CU_MEM_LOCATION_TYPE_DEVICE 0x1
typedef int CUmemAccess_flags;
#define CU_MEM_ACCESS_FLAGS_PROT_READWRITE 0x3
typedef int CUmemAllocationGranularity_flags;
#define CU_MEM_ALLOC_GRANULARITY_MINIMUM 0x0

typedef struct CUmemLocation_st {
    CUmemLocationType type;
    int id;
} CUmemLocation;

typedef struct CUmemAllocationProp_st {
    CUmemAllocationType type;
    CUmemAllocationHandleType requestedHandleTypes;
    CUmemLocation location;
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} CUmemAllocationProp;

typedef struct CUmemAccessDesc_st {
    CUmemLocation location;
    CUmemAccess_flags flags;
} CUmemAccessDesc;

/* 2D copies (cuMemcpy2D_v2): where each side lies, and the rectangle */
typedef int CUmemorytype;
#define CU_MEMORYTYPE_HOST 0x1
#define CU_MEMORYTYPE_DEVICE 0x2
#define CU_MEMORYTYPE_ARRAY 0x3
#define CU_MEMORYTYPE_UNIFIED 0x4
typedef struct CUarray_st *CUarray;

typedef struct CUDA_MEMCPY2D_st {
    size_t srcXInBytes;
    size_t srcY;
    CUmemorytype srcMemoryType;
    const void *srcHost;
    CUdeviceptr srcDevice;
    CUarray srcArray;
    size_t srcPitch;
    size_t dstXInBytes;
    size_t dstY;
    CUmemorytype dstMemoryType;
    void *dstHost;
    CUdeviceptr dstDevice;
    CUarray dstArray;
    size_t dstPitch;
    size_t WidthInBytes;
    size_t Height;
} CUDA_MEMCPY2D;

/* cuLaunchKernelEx configuration */
typedef struct CUlaunchConfig_st {
    unsigned int gridDimX, gridDimY, gridDimZ;
    unsigned int blockDimX, blockDimY, blockDimZ;
    unsigned int sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute *attrs;
    unsigned int numAttrs;
} CUlaunchConfig;

/* Kernel node parameters as taken by cuGraphAddKernelNode_v2 */
typedef struct CUDA_KERNEL_NODE_PARAMS_v2_st {
    CUfunction func;
    unsigned int gridDimX, gridDimY, gridDimZ;
    unsigned int blockDimX, blockDimY, blockDimZ;
    unsigned int sharedMemBytes;
    void **kernelParams;
    void **extra;
    CUkernel kern;
    CUcontext ctx;
} CUDA_KERNEL_NODE_PARAMS;

/*
 * Every driver function a host uses, as
 *   X(cuGetProcAddress name, exported legacy symbol, first CUDA version, (params))
 * The first version is the one cuGetProcAddress matches the legacy symbol by.
 */
#define CUDA_MIN_FUNCS(X)                                                                          \
    X(cuInit, cuInit, 2000, (unsigned int Flags))                                                  \
    X(cuDriverGetVersion, cuDriverGetVersion, 2020, (int *driverVersion))                          \
    X(cuDeviceGet, cuDeviceGet, 2000, (CUdevice * device, int ordinal))                            \
    X(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, 7000, (CUcontext * pctx, CUdevice dev))  \
    X(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2, 11000, (CUdevice dev))              \
    X(cuCtxSetCurrent, cuCtxSetCurrent, 4000, (CUcontext ctx))                                     \
    X(cuCtxSynchronize, cuCtxSynchronize, 2000, (void))                                            \
    X(cuModuleLoadData, cuModuleLoadData, 2000, (CUmodule * module, const void *image))            \
    X(cuModuleGetFunction, cuModuleGetFunction, 2000,                                              \
      (CUfunction * hfunc, CUmodule hmod, const char *name))                                       \
    X(cuModuleUnload, cuModuleUnload, 2000, (CUmodule hmod))                                       \
    X(cuStreamCreate, cuStreamCreate, 2000, (CUstream * phStream, unsigned int Flags))             \
    X(cuStreamDestroy, cuStreamDestroy_v2, 4000, (CUstream hStream))                               \
    X(cuStreamSynchronize, cuStreamSynchronize, 2000, (CUstream hStream))                          \
    X(cuStreamQuery, cuStreamQuery, 2000, (CUstream hStream))                                      \
    X(cuEventCreate, cuEventCreate, 2000, (CUevent * phEvent, unsigned int Flags))                 \
    X(cuEventRecord, cuEventRecord, 2000, (CUevent hEvent, CUstream hStream))                      \
    X(cuEventSynchronize, cuEventSynchronize, 2000, (CUevent hEvent))                              \
    X(cuEventQuery, cuEventQuery, 2000, (CUevent hEvent))                                          \
    X(cuEventElapsedTime, cuEventElapsedTime, 2000,                                                \
      (float *pMilliseconds, CUevent hStart, CUevent hEnd))                                        \
    X(cuEventDestroy, cuEventDestroy_v2, 4000, (CUevent hEvent))                                   \
    X(cuMemAlloc, cuMemAlloc_v2, 3020, (CUdeviceptr * dptr, size_t bytesize))                      \
    X(cuMemAllocPitch, cuMemAllocPitch_v2, 3020,                                                   \
      (CUdeviceptr * dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,                     \
       unsigned int ElementSizeBytes))                                                             \
    X(cuMemFree, cuMemFree_v2, 3020, (CUdeviceptr dptr))                                           \
    X(cuMemGetInfo, cuMemGetInfo_v2, 3020, (size_t *free, size_t *total))                          \
    X(cuMemcpyHtoD, cuMemcpyHtoD_v2, 3020,                                                         \
      (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount))                              \
    X(cuMemcpyHtoDAsync, cuMemcpyHtoDAsync_v2, 3020,                                               \
      (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream))            \
    X(cuMemcpyDtoH, cuMemcpyDtoH_v2, 3020,                                                         \
      (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount))                                    \
    X(cuMemsetD8, cuMemsetD8_v2, 3020, (CUdeviceptr dstDevice, unsigned char uc, size_t N))        \
    X(cuMemsetD16, cuMemsetD16_v2, 3020, (CUdeviceptr dstDevice, unsigned short us, size_t N))     \
    X(cuMemsetD32, cuMemsetD32_v2, 3020, (CUdeviceptr dstDevice, unsigned int ui, size_t N))       \
    X(cuMemsetD8Async, cuMemsetD8Async, 3020,                                                      \
      (CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream))                       \
    X(cuMemsetD16Async, cuMemsetD16Async, 3020,                                                    \
      (CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream))                      \
    X(cuMemsetD32Async, cuMemsetD32Async, 3020,                                                    \
      (CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream))                        \
    X(cuLaunchKernel, cuLaunchKernel, 4000,                                                        \
      (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,          \
       unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,                     \
       unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra))          \
    X(cuLaunchKernelEx, cuLaunchKernelEx, 11060,                                                   \
      (const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra))             \
    X(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel, 9000,                                  \
      (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,          \
       unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,                     \
       unsigned int sharedMemBytes, CUstream hStream, void **kernelParams))                        \
    X(cuGraphCreate, cuGraphCreate, 10000, (CUgraph * phGraph, unsigned int flags))                \
    X(cuGraphAddKernelNode, cuGraphAddKernelNode_v2, 12000,                                        \
      (CUgraphNode * phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,                 \
       size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS *nodeParams))                         \
    X(cuGraphInstantiateWithFlags, cuGraphInstantiateWithFlags, 11040,                             \
      (CUgraphExec * phGraphExec, CUgraph hGraph, unsigned long long flags))                       \
    X(cuGraphLaunch, cuGraphLaunch, 10000, (CUgraphExec hGraphExec, CUstream hStream))             \
    X(cuStreamBeginCapture, cuStreamBeginCapture_v2, 10010, (CUstream hStream, unsigned int mode)) \
    X(cuStreamEndCapture, cuStreamEndCapture, 10000, (CUstream hStream, CUgraph * phGraph))        \
    X(cuGraphExecDestroy, cuGraphExecDestroy, 10000, (CUgraphExec hGraphExec))                     \
    X(cuGraphDestroy, cuGraphDestroy, 10000, (CUgraph hGraph))                                     \
    X(cuMemGetAllocationGranularity, cuMemGetAllocationGranularity, 10020,                         \
      (size_t *granularity, const CUmemAllocationProp *prop,                                       \
       CUmemAllocationGranularity_flags option))                                                   \
    X(cuMemCreate, cuMemCreate, 10020,                                                             \
      (CUmemGenericAllocationHandle * handle, size_t size, const CUmemAllocationProp *prop,        \
       unsigned long long flags))                                                                  \
    X(cuMemRelease, cuMemRelease, 10020, (CUmemGenericAllocationHandle handle))                    \
    X(cuMemAddressReserve, cuMemAddressReserve, 10020,                                             \
      (CUdeviceptr * ptr, size_t size, size_t alignment, CUdeviceptr addr,                         \
       unsigned long long flags))                                                                  \
    X(cuMemAddressFree, cuMemAddressFree, 10020, (CUdeviceptr ptr, size_t size))                   \
    X(cuMemMap, cuMemMap, 10020,                                                                   \
      (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,           \
       unsigned long long flags))                                                                  \
    X(cuMemUnmap, cuMemUnmap, 10020, (CUdeviceptr ptr, size_t size))                               \
    X(cuMemSetAccess, cuMemSetAccess, 10020,                                                       \
      (CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count))                   \
    X(cuMemAllocAsync, cuMemAllocAsync, 11020,                                                     \
      (CUdeviceptr * dptr, size_t bytesize, CUstream hStream))                                     \
    X(cuMemFreeAsync, cuMemFreeAsync, 11020, (CUdeviceptr dptr, CUstream hStream))                 \
    X(cuDeviceGetDefaultMemPool, cuDeviceGetDefaultMemPool, 11020,                                 \
      (CUmemoryPool * pool_out, CUdevice dev))                                                     \
    X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, 11020,                                     \
      (CUdeviceptr * dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream))                  \
    X(cuGetErrorName, cuGetErrorName, 6000, (CUresult error, const char **pStr))

/*
 * The per-thread default stream forms of the functions above:
 *   Y(cuGetProcAddress name, exported per-thread symbol, first CUDA version, (params))
 * cuGetProcAddress with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM returns these.
 */
#define CUDA_MIN_PT_FUNCS(Y)                                                                       \
    Y(cuStreamSynchronize, cuStreamSynchronize_ptsz, 7000, (CUstream hStream))                     \
    Y(cuStreamBeginCapture, cuStreamBeginCapture_v2_ptsz, 10010,                                 \
      (CUstream hStream, unsigned int mode))                                                       \
    Y(cuStreamEndCapture, cuStreamEndCapture_ptsz, 10000, (CUstream hStream, CUgraph * phGraph))   \
    Y(cuStreamQuery, cuStreamQuery_ptsz, 7000, (CUstream hStream))                                 \
    Y(cuEventRecord, cuEventRecord_ptsz, 7000, (CUevent hEvent, CUstream hStream))                 \
    Y(cuMemcpyHtoD, cuMemcpyHtoD_v2_ptds, 7000,                                                    \
      (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount))                              \
    Y(cuMemcpyHtoDAsync, cuMemcpyHtoDAsync_v2_ptsz, 7000,                                          \
      (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream))            \
    Y(cuMemcpyDtoH, cuMemcpyDtoH_v2_ptds, 7000,                                                    \
      (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount))                                    \
    Y(cuMemsetD8, cuMemsetD8_v2_ptds, 7000, (CUdeviceptr dstDevice, unsigned char uc, size_t N))   \
    Y(cuMemsetD16, cuMemsetD16_v2_ptds, 7000,                                                      \
      (CUdeviceptr dstDevice, unsigned short us, size_t N))                                        \
    Y(cuMemsetD32, cuMemsetD32_v2_ptds, 7000, (CUdeviceptr dstDevice, unsigned int ui, size_t N))  \
    Y(cuMemsetD8Async, cuMemsetD8Async_ptsz, 7000,                                                 \
      (CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream))                       \
    Y(cuMemsetD16Async, cuMemsetD16Async_ptsz, 7000,                                               \
      (CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream))                      \
    Y(cuMemsetD32Async, cuMemsetD32Async_ptsz, 7000,                                               \
      (CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream))                        \
    Y(cuLaunchKernel, cuLaunchKernel_ptsz, 7000,                                                   \
      (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,          \
       unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,                     \
       unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra))          \
    Y(cuLaunchKernelEx, cuLaunchKernelEx_ptsz, 11060,                                              \
      (const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra))             \
    Y(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel_ptsz, 9000,                             \
      (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,          \
       unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,                     \
       unsigned int sharedMemBytes, CUstream hStream, void **kernelParams))                        \
    Y(cuGraphLaunch, cuGraphLaunch_ptsz, 10000, (CUgraphExec hGraphExec, CUstream hStream))        \
    Y(cuMemAllocAsync, cuMemAllocAsync_ptsz, 11020,                                                \
      (CUdeviceptr * dptr, size_t bytesize, CUstream hStream))                                     \
    Y(cuMemFreeAsync, cuMemFreeAsync_ptsz, 11020, (CUdeviceptr dptr, CUstream hStream))            \
    Y(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz, 11020,                                \
      (CUdeviceptr * dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream))

#define CUDA_MIN_DECLARE(name, sym, ver, params) CUresult sym params;
CUDA_MIN_FUNCS(CUDA_MIN_DECLARE)
CUDA_MIN_PT_FUNCS(CUDA_MIN_DECLARE)
#undef CUDA_MIN_DECLARE

/*
 * Driver functions a host may call directly by their exported names. They are not in the slot
 * tables above: the shared workload and the resolution checks do not use them.
 */
CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount);
CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount);
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                              CUstream hStream);
CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                   size_t ByteCount, CUstream hStream);
/* Unified addressing: either side may be a host pointer (passed as a CUdeviceptr). */
CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount);
CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount);
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream);
CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                            CUstream hStream);
/* 2D copies and pitched memsets. */
CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *pCopy);
CUresult cuMemsetD2D32_v2(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width,
                          size_t Height);
CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority);
CUresult cuStreamGetPriority(CUstream hStream, int *priority);
CUresult cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority);

/* cuGetProcAddress (11030) and cuGetProcAddress_v2 (12000) */
typedef CUresult (*PFN_cuGetProcAddress_v1)(const char *symbol, void **pfn, int cudaVersion,
                                             uint64_t flags);
typedef CUresult (*PFN_cuGetProcAddress_v2)(const char *symbol, void **pfn, int cudaVersion,
                                             uint64_t flags,
                                             CUdriverProcAddressQueryResult *symbolStatus);
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, uint64_t flags);
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, uint64_t flags,
                             CUdriverProcAddressQueryResult *symbolStatus);

#ifdef __cplusplus
}
#endif
#endif
