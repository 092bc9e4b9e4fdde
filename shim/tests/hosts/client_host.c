/*
 * client_host: a small CUDA program (linked against the driver) for the shim's
 * coordinator-client tests. Every call's result is checked; any failure prints
 * `CUDA_ERROR <call> <code>` and exits 3.
 *
 *   client_host basic N        init, alloc, H2D copy, N cuLaunchKernel, one
 *                              cuLaunchKernelEx with the cooperative attribute,
 *                              one cuLaunchCooperativeKernel, DtoH copy, stream
 *                              sync, context sync, free; then STATE.
 *   client_host loop SECONDS [IDCHANGES]
 *                              launch every 1 ms for at most SECONDS, printing
 *                              IDCHANGE whenever tandem_client_id() changes;
 *                              stops early after IDCHANGES changes and 5
 *                              more launches; then STATE.
 *   client_host paced N GAP_US
 *                              N launches of a 2 ms kernel, GAP_US apart, with
 *                              no sync at all; then sleeps until the GPU must be
 *                              done (plus 100 ms) and prints STATE.
 *   client_host paced-short N GAP_US
 *                              the same with a 100 us kernel.
 *   client_host behind-slow N GAP_US
 *                              N times a 2 ms kernel then at once a 100 us one
 *                              (queued behind it), GAP_US apart, no sync; then
 *                              as paced.
 *   client_host requests N     N requests: four 100 us kernels 50 us apart, a
 *                              stream sync, 1.5 ms idle; then as paced.
 *   client_host fork N         N launches, fork; the child makes N launches and
 *                              prints its STATE; the parent waits, makes N more
 *                              launches and prints its STATE.
 *
 * STATE <role> pid=<pid> launches=<n> pushed=<n> dropped=<n> client_id=<n> capture_mode_calls=<n>
 * (pushed/dropped/client_id are `-` without the shim; capture_mode_calls is the
 * fake driver's count of cuThreadExchangeStreamCaptureMode calls.)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUstream;
typedef unsigned long long CUdeviceptr;

typedef struct {
    int id;
    char pad[4];
    union {
        char bytes[64];
        int cooperative;
    } value;
} CUlaunchAttribute;

typedef struct {
    unsigned gridDimX, gridDimY, gridDimZ;
    unsigned blockDimX, blockDimY, blockDimZ;
    unsigned sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute *attrs;
    unsigned numAttrs;
} CUlaunchConfig;

CUresult cuInit(unsigned);
CUresult cuDeviceGet(CUdevice *, int);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, CUdevice);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuModuleLoadData(CUmodule *, const void *);
CUresult cuModuleGetFunction(CUfunction *, CUmodule, const char *);
CUresult cuStreamCreate(CUstream *, unsigned);
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                        unsigned, CUstream, void **, void **);
CUresult cuLaunchCooperativeKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                   unsigned, unsigned, CUstream, void **);
CUresult cuLaunchKernelEx(const CUlaunchConfig *, CUfunction, void **, void **);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemcpyHtoD_v2(CUdeviceptr, const void *, size_t);
CUresult cuMemcpyDtoH_v2(void *, CUdeviceptr, size_t);
CUresult cuStreamSynchronize(CUstream);
CUresult cuCtxSynchronize(void);

#define CK(call)                                                                                   \
    do {                                                                                           \
        CUresult rc_ = (call);                                                                     \
        if (rc_ != 0) {                                                                            \
            printf("CUDA_ERROR %s %d\n", #call, rc_);                                              \
            fflush(stdout);                                                                        \
            exit(3);                                                                               \
        }                                                                                          \
    } while (0)

static const char k_module[] = "tandem-fake-module v1\n"
                               "kernel noop 0 noop\n"
                               "kernel slow 2000000 noop\n"
                               "kernel short 100000 noop\n";

static CUfunction g_noop, g_slow, g_short;
static CUstream g_stream;
static uint64_t g_launches;
static uint64_t g_arg0;
static uint32_t g_arg1, g_arg2;
static void *g_params[3] = {&g_arg0, &g_arg1, &g_arg2};

typedef uint64_t (*u64_fn)(void);

static u64_fn shim_fn(const char *name) { return (u64_fn)dlsym(RTLD_DEFAULT, name); }

static void opt(const char *key, const char *fn)
{
    u64_fn f = shim_fn(fn);
    if (f)
        printf(" %s=%" PRIu64, key, f());
    else
        printf(" %s=-", key);
}

static uint64_t client_id(void)
{
    u64_fn f = shim_fn("tandem_client_id");
    return f ? f() : 0;
}

static void state(const char *role)
{
    printf("STATE %s pid=%d launches=%" PRIu64, role, (int)getpid(), g_launches);
    opt("pushed", "tandem_records_pushed");
    opt("dropped", "tandem_records_dropped");
    opt("client_id", "tandem_client_id");
    /* The fake driver's count of calls the process (the shim's watcher) made. */
    typedef uint64_t (*calls_fn)(const char *);
    calls_fn calls = (calls_fn)dlsym(RTLD_DEFAULT, "fakecuda_calls");
    if (calls)
        printf(" capture_mode_calls=%" PRIu64, calls("cuThreadExchangeStreamCaptureMode"));
    printf("\n");
    fflush(stdout);
}

static void setup(void)
{
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CK(cuModuleLoadData(&mod, k_module));
    CK(cuModuleGetFunction(&g_noop, mod, "noop"));
    CK(cuModuleGetFunction(&g_slow, mod, "slow"));
    CK(cuModuleGetFunction(&g_short, mod, "short"));
    CK(cuStreamCreate(&g_stream, 0));
}

static void launch(void)
{
    CK(cuLaunchKernel(g_noop, 2, 1, 1, 32, 1, 1, 0, g_stream, g_params, NULL));
    g_launches++;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int basic(int n)
{
    unsigned char host[4096];
    CUdeviceptr buf;
    memset(host, 7, sizeof(host));
    setup();
    CK(cuMemAlloc_v2(&buf, sizeof(host)));
    CK(cuMemcpyHtoD_v2(buf, host, sizeof(host)));
    for (int i = 0; i < n; i++)
        launch();
    CUlaunchAttribute coop;
    memset(&coop, 0, sizeof(coop));
    coop.id = 2; /* CU_LAUNCH_ATTRIBUTE_COOPERATIVE */
    coop.value.cooperative = 1;
    CUlaunchConfig cfg = {4, 1, 1, 64, 1, 1, 0, g_stream, &coop, 1};
    CK(cuLaunchKernelEx(&cfg, g_noop, g_params, NULL));
    g_launches++;
    CK(cuLaunchCooperativeKernel(g_noop, 1, 1, 1, 1, 1, 1, 0, g_stream, g_params));
    g_launches++;
    CK(cuMemcpyDtoH_v2(host, buf, sizeof(host)));
    CK(cuStreamSynchronize(g_stream));
    CK(cuCtxSynchronize());
    CK(cuMemFree_v2(buf));
    printf("ALLOC addr=%llu bytes=%zu\n", buf, sizeof(host));
    state("main");
    return 0;
}

static int loop(double seconds, int want_changes)
{
    setup();
    uint64_t last = client_id();
    int changes = 0;
    printf("START client_id=%" PRIu64 "\n", last);
    fflush(stdout);
    double start = now_s();
    while (now_s() - start < seconds) {
        launch();
        uint64_t id = client_id();
        if (id != last) {
            printf("IDCHANGE from=%" PRIu64 " to=%" PRIu64 " t=%.3f\n", last, id,
                   now_s() - start);
            fflush(stdout);
            last = id;
            if (++changes == want_changes) {
                /* The id changes when the new session is published, which
                 * may fall after this launch was pushed to no ring (the
                 * reconnect runs beside the job): a few more launches go to
                 * the new coordinator's ring before the host stops. */
                for (int i = 0; i < 5; i++) {
                    launch();
                    usleep(1000);
                }
                break;
            }
        }
        usleep(1000);
    }
    state("main");
    return 0;
}

static int paced(int n, int gap_us, CUfunction *f)
{
    setup();
    for (int i = 0; i < n; i++) {
        CK(cuLaunchKernel(*f, 1, 1, 1, 32, 1, 1, 0, g_stream, g_params, NULL));
        g_launches++;
        usleep(gap_us);
    }
    /* No sync: only completion marks can tell anyone when this finished. */
    usleep(n * 2000 + 100000);
    state("main");
    return 0;
}

/* The 100 us kernel launched while the 2 ms one before it still runs. */
static int behind_slow(int n, int gap_us)
{
    setup();
    for (int i = 0; i < n; i++) {
        CK(cuLaunchKernel(g_slow, 1, 1, 1, 32, 1, 1, 0, g_stream, g_params, NULL));
        CK(cuLaunchKernel(g_short, 1, 1, 1, 32, 1, 1, 0, g_stream, g_params, NULL));
        g_launches += 2;
        usleep(gap_us);
    }
    usleep(n * 2100 + 100000);
    state("main");
    return 0;
}

/* Requests: a burst of short kernels ending in a sync, then the GPU idle. */
static int requests(int n)
{
    setup();
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < 4; k++) {
            CK(cuLaunchKernel(g_short, 1, 1, 1, 32, 1, 1, 0, g_stream, g_params, NULL));
            g_launches++;
            usleep(50);
        }
        CK(cuStreamSynchronize(g_stream));
        usleep(1500);
    }
    usleep(100000);
    state("main");
    return 0;
}

static int forked(int n)
{
    setup();
    for (int i = 0; i < n; i++)
        launch();
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 4;
    }
    if (pid == 0) {
        g_launches = 0;
        printf("CHILD_START client_id=%" PRIu64 "\n", client_id());
        for (int i = 0; i < n; i++)
            launch();
        state("child");
        exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    printf("CHILD_EXIT code=%d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    for (int i = 0; i < n; i++)
        launch();
    state("parent");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "basic") == 0)
        return basic(atoi(argv[2]));
    if (argc >= 3 && strcmp(argv[1], "loop") == 0)
        return loop(atof(argv[2]), argc >= 4 ? atoi(argv[3]) : 0);
    if (argc >= 4 && strcmp(argv[1], "paced") == 0)
        return paced(atoi(argv[2]), atoi(argv[3]), &g_slow);
    /* The 100 us kernel, the GPU idle between launches when the gap is longer. */
    if (argc >= 4 && strcmp(argv[1], "paced-short") == 0)
        return paced(atoi(argv[2]), atoi(argv[3]), &g_short);
    if (argc >= 4 && strcmp(argv[1], "behind-slow") == 0)
        return behind_slow(atoi(argv[2]), atoi(argv[3]));
    if (argc >= 3 && strcmp(argv[1], "requests") == 0)
        return requests(atoi(argv[2]));
    if (argc >= 3 && strcmp(argv[1], "fork") == 0)
        return forked(atoi(argv[2]));
    fprintf(stderr, "usage: client_host basic N | loop SECONDS [IDCHANGES] | paced N GAP_US | "
                    "paced-short N GAP_US | behind-slow N GAP_US | requests N | fork N\n");
    return 2;
}
