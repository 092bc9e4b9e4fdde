/*
 * Helpers shared by the scheduling hosts (infer.c, train.c): the clock, the
 * driver set-up with one fake kernel of a given duration, and the optional
 * shim / fake-driver introspection they print.
 *
 * The kernel does real (fake-device) work: launch number k (from 1) adds
 * k * 2654435761 to each of SH_WORDS u32 words of a device buffer (the fake's
 * add_u32 op), so the buffer read back at the end (sh_result) tells whether
 * every launch ran exactly once with its own arguments. Its checksum is the
 * job's RESULT: the same with or without the shim, with or without a
 * coordinator, for the same launches.
 */
#ifndef TANDEM_SCHED_HOST_H
#define TANDEM_SCHED_HOST_H

#define _GNU_SOURCE
#include "resolve.h"

#include <dlfcn.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef uint64_t (*sh_u64_fn)(void);
typedef void (*sh_void_fn)(void);
typedef int (*sh_window_fn)(uint64_t *, uint64_t *);
typedef int (*sh_sms_fn)(uint64_t *);

#define SH_CK(call)                                                                                \
    do {                                                                                           \
        CUresult rc_ = (call);                                                                     \
        if (rc_ != CUDA_SUCCESS) {                                                                 \
            printf("CUDA_ERROR %s %d\n", #call, rc_);                                              \
            fflush(stdout);                                                                        \
            return WL_EXIT_CUDA;                                                                   \
        }                                                                                          \
    } while (0)

/* CLOCK_MONOTONIC in ns (the clock of the shim's records and of the fake's shared device). */
static inline uint64_t sh_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void sh_sleep_until(uint64_t t)
{
    struct timespec ts;
    ts.tv_sec = (time_t)(t / 1000000000ull);
    ts.tv_nsec = (long)(t % 1000000000ull);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {
    }
}

/* The driver resolved by linking, a context, one stream and one kernel named `name` that
 * runs `ns` nanoseconds on the fake device. */
#define SH_WORDS 16u

struct sh_gpu {
    struct drv d;
    CUstream stream;
    CUfunction fn;
    PFN_cuLaunchKernel launch;
    PFN_cuStreamSynchronize sync;
    CUdeviceptr buf;
    /* The kernel's arguments (add_u32: ptr, n, value); `value` changes per launch. */
    CUdeviceptr arg_ptr;
    unsigned arg_n;
    unsigned arg_value;
    void *params[3];
    uint64_t launches;
    /* Blocks per launch (grid x; default 1): on the fake's SM-placing device
     * (FAKECUDA_SHARED_SMS=1) a kernel takes one SM per block. */
    unsigned blocks;
};

/* Loads a fake module with one kernel `name` of `ns` nanoseconds and `attrs` (the fake's
 * image attributes, e.g. "cluster=2"; "" for none), on a fresh stream. */
static inline int sh_gpu_init_with(struct sh_gpu *g, const char *name, uint64_t ns,
                                   const char *attrs)
{
    static char image[256];
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    static const uint32_t zero[SH_WORDS];
    snprintf(image, sizeof(image), "tandem-fake-module v1\nkernel %s %" PRIu64 " add_u32 %s\n",
             name, ns, attrs);
    wl_drv_init(&g->d, "linked");
    resolve_linked(&g->d, 0);
    SH_CK(((PFN_cuInit)g->d.fn[SLOT_cuInit])(0));
    SH_CK(((PFN_cuDeviceGet)g->d.fn[SLOT_cuDeviceGet])(&dev, 0));
    SH_CK(((PFN_cuDevicePrimaryCtxRetain)g->d.fn[SLOT_cuDevicePrimaryCtxRetain])(&ctx, dev));
    SH_CK(((PFN_cuCtxSetCurrent)g->d.fn[SLOT_cuCtxSetCurrent])(ctx));
    SH_CK(((PFN_cuModuleLoadData)g->d.fn[SLOT_cuModuleLoadData])(&mod, image));
    SH_CK(((PFN_cuModuleGetFunction)g->d.fn[SLOT_cuModuleGetFunction])(&g->fn, mod, name));
    SH_CK(((PFN_cuStreamCreate)g->d.fn[SLOT_cuStreamCreate])(&g->stream, CU_STREAM_DEFAULT));
    SH_CK(((PFN_cuMemAlloc)g->d.fn[SLOT_cuMemAlloc])(&g->buf, sizeof(zero)));
    SH_CK(((PFN_cuMemcpyHtoD)g->d.fn[SLOT_cuMemcpyHtoD])(g->buf, zero, sizeof(zero)));
    g->launch = (PFN_cuLaunchKernel)g->d.fn[SLOT_cuLaunchKernel];
    g->sync = (PFN_cuStreamSynchronize)g->d.fn[SLOT_cuStreamSynchronize];
    g->arg_ptr = g->buf;
    g->arg_n = SH_WORDS;
    g->params[0] = &g->arg_ptr;
    g->params[1] = &g->arg_n;
    g->params[2] = &g->arg_value;
    g->launches = 0;
    g->blocks = 1;
    return WL_EXIT_OK;
}

static inline int sh_gpu_init(struct sh_gpu *g, const char *name, uint64_t ns)
{
    return sh_gpu_init_with(g, name, ns, "");
}

/* Launch number k (from 1): buf[i] += k * 2654435761 (the fake applies it at launch). */
static inline CUresult sh_launch(struct sh_gpu *g)
{
    g->arg_value = (unsigned)((g->launches + 1) * 2654435761u);
    CUresult rc = g->launch(g->fn, g->blocks, 1, 1, 1, 1, 1, 0, g->stream, g->params, NULL);
    if (rc == CUDA_SUCCESS)
        g->launches++;
    return rc;
}

/* Waits for the stream, reads the buffer back and prints
 * `RESULT launches=<n> sum=<fnv-1a 64 of the buffer, hex>`. */
static inline int sh_result(struct sh_gpu *g)
{
    uint32_t host[SH_WORDS];
    uint64_t h = 0xcbf29ce484222325ull;
    SH_CK(g->sync(g->stream));
    SH_CK(((PFN_cuMemcpyDtoH)g->d.fn[SLOT_cuMemcpyDtoH])(host, g->buf, sizeof(host)));
    for (size_t i = 0; i < sizeof(host); i++) {
        h ^= ((const unsigned char *)host)[i];
        h *= 0x100000001b3ull;
    }
    printf("RESULT launches=%" PRIu64 " sum=%016" PRIx64 "\n", g->launches, h);
    return WL_EXIT_OK;
}

/* An optional export of the shim or the fake driver (NULL when absent). */
static inline void *sh_sym(const char *name) { return dlsym(RTLD_DEFAULT, name); }

/* The client id the coordinator gave this process, or 0 (no shim, not registered). */
static inline uint64_t sh_client_id(void)
{
    sh_u64_fn f = (sh_u64_fn)sh_sym("tandem_client_id");
    return f ? f() : 0;
}

#endif
