/*
 * Helpers shared by the scheduling hosts (infer.c, train.c): the clock, the
 * driver set-up with one fake kernel of a given duration, and the optional
 * shim / fake-driver introspection they print.
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
struct sh_gpu {
    struct drv d;
    CUstream stream;
    CUfunction fn;
    PFN_cuLaunchKernel launch;
    PFN_cuStreamSynchronize sync;
};

static inline int sh_gpu_init(struct sh_gpu *g, const char *name, uint64_t ns)
{
    static char image[256];
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    snprintf(image, sizeof(image), "tandem-fake-module v1\nkernel %s %" PRIu64 " noop\n", name, ns);
    wl_drv_init(&g->d, "linked");
    resolve_linked(&g->d, 0);
    SH_CK(((PFN_cuInit)g->d.fn[SLOT_cuInit])(0));
    SH_CK(((PFN_cuDeviceGet)g->d.fn[SLOT_cuDeviceGet])(&dev, 0));
    SH_CK(((PFN_cuDevicePrimaryCtxRetain)g->d.fn[SLOT_cuDevicePrimaryCtxRetain])(&ctx, dev));
    SH_CK(((PFN_cuCtxSetCurrent)g->d.fn[SLOT_cuCtxSetCurrent])(ctx));
    SH_CK(((PFN_cuModuleLoadData)g->d.fn[SLOT_cuModuleLoadData])(&mod, image));
    SH_CK(((PFN_cuModuleGetFunction)g->d.fn[SLOT_cuModuleGetFunction])(&g->fn, mod, name));
    SH_CK(((PFN_cuStreamCreate)g->d.fn[SLOT_cuStreamCreate])(&g->stream, CU_STREAM_DEFAULT));
    g->launch = (PFN_cuLaunchKernel)g->d.fn[SLOT_cuLaunchKernel];
    g->sync = (PFN_cuStreamSynchronize)g->d.fn[SLOT_cuStreamSynchronize];
    return WL_EXIT_OK;
}

static inline CUresult sh_launch(struct sh_gpu *g)
{
    return g->launch(g->fn, 1, 1, 1, 1, 1, 1, 0, g->stream, NULL, NULL);
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
