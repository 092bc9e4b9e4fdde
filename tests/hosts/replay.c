/*
 * replay: replays one request or step of a trace through the driver, over and
 * over, with the fake driver's kernel durations taken from the trace (the
 * round trip of `tandemctl trace`, tests/e2e/tests/trace_capture.rs).
 *
 *   replay SCRIPT [--seconds S] [--quiet-us Q] [--explicit]
 *
 * SCRIPT is the trace in a line form the test writes (tandem-trace/1's ops,
 * nothing to parse but numbers and names):
 *   kernel <name> <duration_ns> [regs=N] [smem=M]
 *                                          one per distinct (name, duration,
 *                                          registers, static shared memory),
 *                                          in order; ops name them by index
 *   K <kernel> <gx> <gy> <gz> <bx> <by> <bz> <smem> <stream> <host_gap_ns>
 *   H <bytes> <stream> <host_gap_ns>       host-to-device copy (async)
 *   S <host_gap_ns>                        cuCtxSynchronize
 * Each kernel gets a fake module of its own ("kernel <name> <ns> noop regs=N
 * smem=M": what the fake's cuFuncGetAttribute reports, so the shim sends the
 * trace's registers and shared memory with the name), so one name may run
 * for different durations, as one kernel does at different shapes. Streams are created on first use. A host gap is spent spinning on
 * the clock (CPU time, as the job's thread spends it), counted from the
 * previous op's issue (the driver call is part of a gap, as tandem-trace/1
 * defines it), after a sync from its return.
 *
 * The ops run as one unit (a request or a step) again and again for S seconds
 * (default 3); after each unit the job is quiet for Q microseconds (default 0;
 * an inference job's requests need some quiet between them to be told apart).
 * With --explicit each unit is bracketed by tandem_request_begin() /
 * tandem_request_end() (when the shim exports them): a request that syncs
 * more than once (an LLM's tokens) is one request only by the explicit API,
 * as the request tandemd detects ends at its first sync.
 *
 * Output (stdout): READY pid=<pid> shim=<0|1> client_id=<id> at the start,
 * DONE units=<n> kernels=<n> at the end. Exit codes as every host (workload.h).
 */
#include "sched_host.h"

#include <unistd.h>

#define MAX_KERNELS 4096
#define MAX_OPS 65536
#define MAX_STREAMS 16

struct op {
    char what;
    unsigned kernel, stream;
    unsigned dims[6], smem;
    uint64_t bytes, gap;
};

static struct op ops[MAX_OPS];
static CUfunction funcs[MAX_KERNELS];

static void spin_until(uint64_t t)
{
    while (sh_now_ns() < t) {
    }
}

static int usage(void)
{
    fprintf(stderr, "usage: replay SCRIPT [--seconds S] [--quiet-us Q] [--explicit]\n");
    return WL_EXIT_USAGE;
}

int main(int argc, char **argv)
{
    double seconds = 3, quiet_us = 0;
    int explicit_api = 0;
    if (argc < 2)
        return usage();
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--explicit") == 0) {
            explicit_api = 1;
            continue;
        }
        if (i + 1 >= argc)
            return usage();
        if (strcmp(argv[i], "--seconds") == 0)
            seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "--quiet-us") == 0)
            quiet_us = atof(argv[++i]);
        else
            return usage();
    }
    FILE *f = fopen(argv[1], "r");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", argv[1]);
        return WL_EXIT_USAGE;
    }
    struct drv d;
    CUdevice dev;
    CUcontext ctx;
    wl_drv_init(&d, "linked");
    resolve_linked(&d, 0);
    SH_CK(((PFN_cuInit)d.fn[SLOT_cuInit])(0));
    SH_CK(((PFN_cuDeviceGet)d.fn[SLOT_cuDeviceGet])(&dev, 0));
    SH_CK(((PFN_cuDevicePrimaryCtxRetain)d.fn[SLOT_cuDevicePrimaryCtxRetain])(&ctx, dev));
    SH_CK(((PFN_cuCtxSetCurrent)d.fn[SLOT_cuCtxSetCurrent])(ctx));
    size_t nk = 0, nops = 0;
    uint64_t max_bytes = 1;
    char line[1024], name[512];
    while (fgets(line, sizeof(line), f)) {
        unsigned long long ns, a, b;
        struct op *o = &ops[nops];
        if (sscanf(line, "kernel %511s %llu", name, &ns) == 2) {
            static char image[1024];
            CUmodule mod;
            unsigned regs = 0, smem = 0;
            const char *at;
            if (nk == MAX_KERNELS)
                return usage();
            if ((at = strstr(line, " regs=")) && sscanf(at, " regs=%u", &regs) != 1)
                return usage();
            if ((at = strstr(line, " smem=")) && sscanf(at, " smem=%u", &smem) != 1)
                return usage();
            snprintf(image, sizeof(image),
                     "tandem-fake-module v1\nkernel %s %llu noop regs=%u smem=%u\n", name, ns,
                     regs, smem);
            SH_CK(((PFN_cuModuleLoadData)d.fn[SLOT_cuModuleLoadData])(&mod, image));
            SH_CK(((PFN_cuModuleGetFunction)d.fn[SLOT_cuModuleGetFunction])(&funcs[nk], mod,
                                                                             name));
            nk++;
            continue;
        }
        if (nops == MAX_OPS)
            return usage();
        if (sscanf(line, "K %u %u %u %u %u %u %u %u %u %llu", &o->kernel, &o->dims[0],
                   &o->dims[1], &o->dims[2], &o->dims[3], &o->dims[4], &o->dims[5], &o->smem,
                   &o->stream, &a) == 10) {
            if (o->kernel >= nk || o->stream >= MAX_STREAMS)
                return usage();
            o->what = 'K';
            o->gap = a;
        } else if (sscanf(line, "H %llu %u %llu", &a, &o->stream, &b) == 3) {
            if (o->stream >= MAX_STREAMS)
                return usage();
            o->what = 'H';
            o->bytes = a;
            o->gap = b;
            if (a > max_bytes)
                max_bytes = a;
        } else if (sscanf(line, "S %llu", &a) == 1) {
            o->what = 'S';
            o->gap = a;
        } else {
            continue;
        }
        nops++;
    }
    fclose(f);
    CUstream streams[MAX_STREAMS] = {0};
    CUdeviceptr dbuf;
    void *hbuf = calloc(1, max_bytes);
    if (!hbuf)
        return WL_EXIT_USAGE;
    SH_CK(((PFN_cuMemAlloc)d.fn[SLOT_cuMemAlloc])(&dbuf, max_bytes));
    PFN_cuLaunchKernel launch = (PFN_cuLaunchKernel)d.fn[SLOT_cuLaunchKernel];
    PFN_cuMemcpyHtoDAsync h2d = (PFN_cuMemcpyHtoDAsync)d.fn[SLOT_cuMemcpyHtoDAsync];
    PFN_cuCtxSynchronize sync = (PFN_cuCtxSynchronize)d.fn[SLOT_cuCtxSynchronize];
    PFN_cuStreamCreate stream_create = (PFN_cuStreamCreate)d.fn[SLOT_cuStreamCreate];
    for (size_t i = 0; i < nops; i++) {
        if (ops[i].what != 'S' && !streams[ops[i].stream])
            SH_CK(stream_create(&streams[ops[i].stream], CU_STREAM_DEFAULT));
    }
    printf("READY pid=%d shim=%d client_id=%" PRIu64 "\n", (int)getpid(), wl_have_shim(),
           sh_client_id());
    fflush(stdout);
    sh_void_fn req_begin = explicit_api ? (sh_void_fn)sh_sym("tandem_request_begin") : NULL;
    sh_void_fn req_end = explicit_api ? (sh_void_fn)sh_sym("tandem_request_end") : NULL;
    uint64_t start = sh_now_ns(), end = start + (uint64_t)(seconds * 1e9);
    uint64_t units = 0, kernels = 0, t = sh_now_ns();
    while (sh_now_ns() < end) {
        if (req_begin)
            req_begin();
        for (size_t i = 0; i < nops; i++) {
            struct op *o = &ops[i];
            t += o->gap;
            spin_until(t);
            /* A host gap counts from the previous op's issue (the driver
             * call is part of it, as tandem-trace/1 defines it), after a
             * sync from its return. */
            uint64_t issued = sh_now_ns();
            switch (o->what) {
            case 'K':
                SH_CK(launch(funcs[o->kernel], o->dims[0], o->dims[1], o->dims[2], o->dims[3],
                             o->dims[4], o->dims[5], o->smem, streams[o->stream], NULL, NULL));
                kernels++;
                break;
            case 'H':
                SH_CK(h2d(dbuf, hbuf, o->bytes, streams[o->stream]));
                break;
            default:
                SH_CK(sync());
                issued = sh_now_ns();
                break;
            }
            t = issued;
        }
        if (req_end)
            req_end();
        units++;
        if (quiet_us > 0)
            sh_sleep_until(sh_now_ns() + (uint64_t)(quiet_us * 1e3));
        t = sh_now_ns();
    }
    SH_CK(sync());
    printf("DONE units=%" PRIu64 " kernels=%" PRIu64 "\n", units, kernels);
    free(hbuf);
    return WL_EXIT_OK;
}
