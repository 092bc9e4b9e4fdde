/*
 * launcher: launches a 0 ns noop kernel on the fake driver at a target rate,
 * for the coordinator tests and benchmarks.
 *
 *   launcher [--path linked|linked-ptds|dlopen|gpa] [--rate HZ] [--count N]
 *            [--seconds S] [--until-stdin] [--hold] [--alloc-every K]
 *            [--kernels K]
 *
 * The driver is resolved the way --path says (default linked), then the host
 * launches `noop` with cuLaunchKernel (cuLaunchKernel_ptsz for linked-ptds)
 * until --count launches are done, --seconds have passed, or (--until-stdin)
 * a line or end-of-file arrives on stdin, whichever comes first. --rate 0 (the
 * default) launches as fast as it can; otherwise launches are paced to HZ per
 * second on average. With --hold it then waits for end-of-file on stdin
 * before exiting, so a test can read the coordinator's view of this
 * still-connected client. With --alloc-every K, every K-th launch is followed
 * by a cuMemAlloc_v2 of 4 KiB and its cuMemFree_v2 (two more ring records).
 * With --kernels K (2 to 4096) the module holds K noop kernels, k0 to k<K-1>,
 * and launch n runs k<min(n, K-1)>: K-1 kernels once each, then the last one
 * for every launch after (each new kernel is a FuncName the shim sends).
 *
 * Output (stdout, flushed line by line):
 *   READY pid=<pid> path=<path> shim=<0|1> client_id=<id|->
 *       after the driver is initialised, before the first launch
 *   DISTINCT kernels=<K>
 *       (--kernels) after the launch of the last kernel's first run
 *   IDCHANGE from=<id> to=<id> launched=<n> t=<s>
 *       tandem_client_id() changed; checked before every launch, so every
 *       launch after this line (launches n+1, n+2, ...) ran with id `to`;
 *       t is CLOCK_MONOTONIC in seconds when it was seen
 *   DONE launched=<n> pushed=<n|-> dropped=<n|-> client_id=<id|-> idchanges=<n>
 *        session_pushed=<n|-> session_dropped=<n|-> session_exact=<0|1> seconds=<s>
 * `-` means the shim does not export that function (or is not loaded).
 * session_pushed / session_dropped: records pushed into / dropped from the
 * ring of the session in force at DONE. Only this thread pushes records
 * while it launches (but for the completion marks' MARK_DONE, which the
 * shim's watcher thread pushes when the GPU reaches a mark; with marks on,
 * DONE waits until the count has held still for 50 ms, at most 5 s, so that
 * the last marks' are in it), so while tandem_client_id() reads 0 (no
 * session) tandem_records_pushed() and tandem_records_dropped() hold still
 * at the totals of the sessions already retired; the launcher re-reads them on every pass that sees id 0 and
 * subtracts the last values (0 and 0 for the process's first session).
 * session_exact is 0 when the id went from one session straight to another
 * without a pass seeing 0 (then the split is unknown).
 * Exit codes as every host (workload.h): 0, 2 usage, 3 a driver call failed.
 */
#define _GNU_SOURCE
#include "resolve.h"

#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef uint64_t (*u64_fn)(void);

static const char k_module[] = "tandem-fake-module v1\n"
                               "kernel noop 0 noop\n";
#define MAX_KERNELS 4096
/* --kernels: the module's image (k0 .. k<K-1>) and their handles. */
static char g_many[32 + MAX_KERNELS * 32];
static CUfunction g_funcs[MAX_KERNELS];

static volatile int g_stop;     /* a line or EOF on stdin (atomic accesses) */
static volatile int g_stdin_eof; /* EOF on stdin */

static void *stdin_reader(void *arg)
{
    char line[256];
    (void)arg;
    while (fgets(line, sizeof(line), stdin))
        __atomic_store_n(&g_stop, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&g_stop, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&g_stdin_eof, 1, __ATOMIC_RELEASE);
    return NULL;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_s(double s)
{
    struct timespec ts;
    if (s <= 0)
        return;
    ts.tv_sec = (time_t)s;
    ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
    nanosleep(&ts, NULL);
}

static u64_fn shim_fn(const char *name) { return (u64_fn)dlsym(RTLD_DEFAULT, name); }

static void print_opt(const char *key, u64_fn f)
{
    if (f)
        printf(" %s=%" PRIu64, key, f());
    else
        printf(" %s=-", key);
}

static int usage(void)
{
    fprintf(stderr, "usage: launcher [--path linked|linked-ptds|dlopen|gpa] [--rate HZ] "
                    "[--count N] [--seconds S] [--until-stdin] [--hold] [--alloc-every K] "
                    "[--kernels K]\n");
    return WL_EXIT_USAGE;
}

#define CK(call)                                                                                   \
    do {                                                                                           \
        CUresult rc_ = (call);                                                                     \
        if (rc_ != CUDA_SUCCESS) {                                                                 \
            printf("CUDA_ERROR %s %d\n", #call, rc_);                                              \
            fflush(stdout);                                                                        \
            return WL_EXIT_CUDA;                                                                   \
        }                                                                                          \
    } while (0)

int main(int argc, char **argv)
{
    const char *path = "linked";
    double rate = 0, seconds = 0;
    uint64_t count = 0, alloc_every = 0, kernels = 1;
    int until_stdin = 0, hold = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--until-stdin") == 0) {
            until_stdin = 1;
        } else if (strcmp(a, "--hold") == 0) {
            hold = 1;
        } else if (v && strcmp(a, "--path") == 0) {
            path = v;
            i++;
        } else if (v && strcmp(a, "--rate") == 0) {
            rate = atof(v);
            i++;
        } else if (v && strcmp(a, "--count") == 0) {
            count = strtoull(v, NULL, 10);
            i++;
        } else if (v && strcmp(a, "--alloc-every") == 0) {
            alloc_every = strtoull(v, NULL, 10);
            i++;
        } else if (v && strcmp(a, "--kernels") == 0) {
            kernels = strtoull(v, NULL, 10);
            i++;
        } else if (v && strcmp(a, "--seconds") == 0) {
            seconds = atof(v);
            i++;
        } else {
            return usage();
        }
    }
    if (rate < 0 || seconds < 0 || (!count && !seconds && !until_stdin) || kernels < 1 ||
        kernels > MAX_KERNELS)
        return usage();

    struct drv d;
    wl_drv_init(&d, path);
    if (strcmp(path, "linked") == 0) {
        resolve_linked(&d, 0);
    } else if (strcmp(path, "linked-ptds") == 0) {
        resolve_linked(&d, 1);
    } else if (strcmp(path, "dlopen") == 0) {
        int rc = resolve_dlopen(&d);
        if (rc)
            return rc;
    } else if (strcmp(path, "gpa") == 0) {
        struct gpa g;
        int rc = resolve_gpa_entry(&g, 1);
        if (rc)
            return rc;
        if (resolve_gpa(&d, &g, 12000, CU_GET_PROC_ADDRESS_DEFAULT, 0) < 0)
            return WL_EXIT_CHECK;
    } else {
        return usage();
    }

    pthread_t reader;
    if ((until_stdin || hold) && pthread_create(&reader, NULL, stdin_reader, NULL)) {
        fprintf(stderr, "launcher: pthread_create failed\n");
        return WL_EXIT_CHECK;
    }

    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction noop;
    CUstream stream;
    CK(((PFN_cuInit)d.fn[SLOT_cuInit])(0));
    CK(((PFN_cuDeviceGet)d.fn[SLOT_cuDeviceGet])(&dev, 0));
    CK(((PFN_cuDevicePrimaryCtxRetain)d.fn[SLOT_cuDevicePrimaryCtxRetain])(&ctx, dev));
    CK(((PFN_cuCtxSetCurrent)d.fn[SLOT_cuCtxSetCurrent])(ctx));
    if (kernels == 1) {
        CK(((PFN_cuModuleLoadData)d.fn[SLOT_cuModuleLoadData])(&mod, k_module));
        CK(((PFN_cuModuleGetFunction)d.fn[SLOT_cuModuleGetFunction])(&noop, mod, "noop"));
        g_funcs[0] = noop;
    } else {
        size_t at = (size_t)snprintf(g_many, sizeof(g_many), "tandem-fake-module v1\n");
        for (uint64_t k = 0; k < kernels; k++)
            at += (size_t)snprintf(g_many + at, sizeof(g_many) - at, "kernel k%" PRIu64 " 0 noop\n",
                                   k);
        CK(((PFN_cuModuleLoadData)d.fn[SLOT_cuModuleLoadData])(&mod, g_many));
        for (uint64_t k = 0; k < kernels; k++) {
            char name[32];
            snprintf(name, sizeof(name), "k%" PRIu64, k);
            CK(((PFN_cuModuleGetFunction)d.fn[SLOT_cuModuleGetFunction])(&g_funcs[k], mod, name));
        }
    }
    CK(((PFN_cuStreamCreate)d.fn[SLOT_cuStreamCreate])(&stream, CU_STREAM_DEFAULT));
    PFN_cuLaunchKernel launch = (PFN_cuLaunchKernel)d.fn[SLOT_cuLaunchKernel];
    PFN_cuMemAlloc mem_alloc = (PFN_cuMemAlloc)d.fn[SLOT_cuMemAlloc];
    PFN_cuMemFree mem_free = (PFN_cuMemFree)d.fn[SLOT_cuMemFree];

    u64_fn client_id = shim_fn("tandem_client_id");
    u64_fn pushed = shim_fn("tandem_records_pushed");
    u64_fn dropped = shim_fn("tandem_records_dropped");
    printf("READY pid=%d path=%s shim=%d", (int)getpid(), path, wl_have_shim());
    print_opt("client_id", client_id);
    printf("\n");
    fflush(stdout);

    uint64_t arg0 = 0;
    uint32_t arg1 = 0, arg2 = 0;
    void *params[3] = {&arg0, &arg1, &arg2};
    uint64_t launched = 0, idchanges = 0;
    uint64_t last_id = client_id ? client_id() : 0;
    uint64_t base_pushed = 0, base_dropped = 0;
    int exact = 1;
    double start = now_s(), t = start;
    for (;;) {
        if (count && launched >= count)
            break;
        if (until_stdin && __atomic_load_n(&g_stop, __ATOMIC_ACQUIRE))
            break;
        /* Read the clock on every launch when pacing, else every 256 launches. */
        if (rate > 0 || (launched & 255) == 0) {
            t = now_s();
            if (seconds > 0 && t - start >= seconds)
                break;
        }
        if (rate > 0) {
            double due = (t - start) * rate;
            if ((double)launched >= due) {
                double wait = ((double)launched + 1.0) / rate - (t - start);
                sleep_s(wait < 0.001 ? wait : 0.001);
                continue;
            }
        }
        if (client_id) {
            uint64_t id = client_id();
            if (id != last_id) {
                printf("IDCHANGE from=%" PRIu64 " to=%" PRIu64 " launched=%" PRIu64 " t=%.6f\n",
                       last_id, id, launched, now_s());
                fflush(stdout);
                if (last_id != 0 && id != 0)
                    exact = 0;
                last_id = id;
                idchanges++;
            }
            if (id == 0 && pushed && dropped) {
                base_pushed = pushed();
                base_dropped = dropped();
                exact = 1;
            }
        }
        CUfunction f = g_funcs[launched < kernels - 1 ? launched : kernels - 1];
        CK(launch(f, 1, 1, 1, 1, 1, 1, 0, stream, params, NULL));
        launched++;
        if (kernels > 1 && launched == kernels) {
            printf("DISTINCT kernels=%" PRIu64 "\n", kernels);
            fflush(stdout);
        }
        if (alloc_every && launched % alloc_every == 0) {
            CUdeviceptr p;
            CK(mem_alloc(&p, 4096));
            CK(mem_free(p));
        }
    }

    /* The noop kernels complete at once; the watcher reports the last marks
     * within its 200 us poll, later only under load. */
    if (pushed) {
        uint64_t last = pushed();
        double settled = now_s(), give_up = settled + 5.0;
        while (now_s() - settled < 0.050 && now_s() < give_up) {
            sleep_s(0.001);
            uint64_t p = pushed();
            if (p != last) {
                last = p;
                settled = now_s();
            }
        }
    }
    printf("DONE launched=%" PRIu64, launched);
    print_opt("pushed", pushed);
    print_opt("dropped", dropped);
    print_opt("client_id", client_id);
    printf(" idchanges=%" PRIu64, idchanges);
    if (pushed && dropped)
        printf(" session_pushed=%" PRIu64 " session_dropped=%" PRIu64 " session_exact=%d",
               pushed() - base_pushed, dropped() - base_dropped, exact);
    else
        printf(" session_pushed=- session_dropped=- session_exact=0");
    printf(" seconds=%.3f\n", now_s() - start);
    fflush(stdout);
    if (until_stdin || hold)
        pthread_join(reader, NULL);
    return WL_EXIT_OK;
}
