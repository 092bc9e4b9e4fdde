/*
 * infer: an open-loop inference job for the scheduling tests.
 *
 *   infer [--rate HZ] [--seconds S] [--kernels K] [--kernel-us U] [--blocks B] [--seed N]
 *         [--explicit] [--closed] [--probe] [--leave-open S] [--poll stream|event]
 *
 * Requests arrive as a Poisson process of rate HZ (default 50/s; seeded, so
 * the arrival times are the same in every run) for S seconds (default 3).
 * Each request launches K (default 5) kernels of U microseconds (default 200)
 * of B blocks (default 1) on one stream and synchronises it; its latency is from its ARRIVAL to the
 * return of the sync, so time spent queued behind an earlier request counts.
 * With --explicit each request is bracketed by tandem_request_begin() /
 * tandem_request_end() (when the shim exports them).
 * With --closed the requests are back to back instead: each arrives the
 * moment the one before it returned, for S seconds (--rate is ignored).
 * With --probe, at each arrival the work queued on the fake driver's shared
 * device (fakecuda_shared_device_backlog_ns: everyone's, and this job's own
 * earlier requests have all returned) is printed before the request launches.
 * With --poll the request's end is waited for by polling instead of the sync,
 * as TensorFlow's event manager and `torch.cuda.Event.query()` loops do:
 * `stream` polls cuStreamQuery of the stream, `event` records an event after
 * the kernels and polls cuEventQuery; 20 us naps between polls.
 * With --leave-open S (needs --explicit), after DONE one more request begins
 * and is left open: OPEN is printed, then the job sleeps S seconds and ends
 * it, or with S = 0 exits at once with the request still open (as a job that
 * dies mid-request).
 *
 * Output (stdout):
 *   READY pid=<pid> shim=<0|1> client_id=<id>
 *   QUEUED i=<n> t_ns=<arrival, CLOCK_MONOTONIC> us=<x>   with --probe, before REQ i
 *   REQ i=<n> latency_us=<x>                        one per request, in order
 *   RESULT launches=<n> sum=<hex>                   the device buffer's checksum (sched_host.h)
 *   DONE requests=<n> p50_us=<x> p99_us=<x> max_us=<x> mean_us=<x> explicit=<0|1>
 *   OPEN                                            with --leave-open, once the request began
 * Percentiles are nearest-rank. Exit codes as every host (workload.h).
 */
#include "sched_host.h"

#include <math.h>
#include <unistd.h>

static uint64_t g_rng;

/* xorshift64*: a uniform double in (0, 1]. */
static double uniform01(void)
{
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    uint64_t x = g_rng * 0x2545F4914F6CDD1Dull;
    return ((double)(x >> 11) + 1.0) / 9007199254740992.0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t rank(const uint64_t *sorted, size_t n, double p)
{
    size_t k = (size_t)ceil(p * (double)n);
    if (k < 1)
        k = 1;
    return sorted[k - 1];
}

static int usage(void)
{
    fprintf(stderr, "usage: infer [--rate HZ] [--seconds S] [--kernels K] [--kernel-us U] "
                    "[--blocks B] [--seed N] [--explicit] [--closed] [--probe] [--leave-open S] "
                    "[--poll stream|event]\n");
    return WL_EXIT_USAGE;
}

int main(int argc, char **argv)
{
    double rate = 50, seconds = 3, kernel_us = 200, leave_open = -1;
    unsigned long kernels = 5, blocks = 1;
    unsigned long long seed = 1;
    int explicit_api = 0, closed = 0, probe = 0;
    /* 0: sync; 1: poll the stream; 2: record an event and poll it. */
    int poll = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--explicit") == 0) {
            explicit_api = 1;
            continue;
        }
        if (strcmp(a, "--closed") == 0) {
            closed = 1;
            continue;
        }
        if (strcmp(a, "--probe") == 0) {
            probe = 1;
            continue;
        }
        if (!v)
            return usage();
        if (strcmp(a, "--rate") == 0)
            rate = atof(v);
        else if (strcmp(a, "--seconds") == 0)
            seconds = atof(v);
        else if (strcmp(a, "--kernels") == 0)
            kernels = strtoul(v, NULL, 10);
        else if (strcmp(a, "--kernel-us") == 0)
            kernel_us = atof(v);
        else if (strcmp(a, "--blocks") == 0)
            blocks = strtoul(v, NULL, 10);
        else if (strcmp(a, "--seed") == 0)
            seed = strtoull(v, NULL, 10);
        else if (strcmp(a, "--leave-open") == 0)
            leave_open = atof(v);
        else if (strcmp(a, "--poll") == 0 && strcmp(v, "stream") == 0)
            poll = 1;
        else if (strcmp(a, "--poll") == 0 && strcmp(v, "event") == 0)
            poll = 2;
        else
            return usage();
        i++;
    }
    if (!(rate > 0) || !(seconds > 0) || kernels == 0 || kernel_us < 0 || blocks == 0 ||
        (leave_open >= 0 && !explicit_api))
        return usage();
    g_rng = seed ? seed : 1;

    struct sh_gpu g;
    int rc = sh_gpu_init(&g, "infer_kernel", (uint64_t)(kernel_us * 1000.0));
    if (rc)
        return rc;
    g.blocks = (unsigned)blocks;
    PFN_cuStreamQuery stream_query = (PFN_cuStreamQuery)g.d.fn[SLOT_cuStreamQuery];
    PFN_cuEventQuery event_query = (PFN_cuEventQuery)g.d.fn[SLOT_cuEventQuery];
    PFN_cuEventRecord event_record = (PFN_cuEventRecord)g.d.fn[SLOT_cuEventRecord];
    CUevent done = NULL;
    if (poll == 2)
        SH_CK(((PFN_cuEventCreate)g.d.fn[SLOT_cuEventCreate])(&done, 0));
    sh_void_fn begin = (sh_void_fn)sh_sym("tandem_request_begin");
    sh_void_fn end = (sh_void_fn)sh_sym("tandem_request_end");
    if (!explicit_api)
        begin = end = NULL;
    sh_u64_fn backlog = probe ? (sh_u64_fn)sh_sym("fakecuda_shared_device_backlog_ns") : NULL;
    if (probe && !backlog) {
        fprintf(stderr, "infer: --probe needs the fake driver's fakecuda_shared_device_backlog_ns\n");
        return WL_EXIT_USAGE;
    }

    /* Arrival times, fixed by the seed. */
    size_t cap = (size_t)(rate * seconds * 2.0) + 64, n = 0;
    uint64_t *arrival = malloc(cap * sizeof(uint64_t));
    uint64_t *lat = malloc(cap * sizeof(uint64_t));
    if (!arrival || !lat) {
        fprintf(stderr, "infer: out of memory\n");
        return WL_EXIT_CHECK;
    }
    double t = 0;
    if (closed) {
        /* Back to back: up to a request per 10 us of the run, arrivals set as they come. */
        free(arrival);
        free(lat);
        cap = (size_t)(seconds * 1e5) + 64;
        arrival = malloc(cap * sizeof(uint64_t));
        lat = malloc(cap * sizeof(uint64_t));
        if (!arrival || !lat) {
            fprintf(stderr, "infer: out of memory\n");
            return WL_EXIT_CHECK;
        }
        n = cap;
    }
    for (; !closed;) {
        t += -log(uniform01()) / rate;
        if (t >= seconds || n == cap)
            break;
        arrival[n++] = (uint64_t)(t * 1e9);
    }

    printf("READY pid=%d shim=%d client_id=%" PRIu64 "\n", (int)getpid(), wl_have_shim(),
           sh_client_id());
    fflush(stdout);

    uint64_t start = sh_now_ns();
    for (size_t i = 0; i < n; i++) {
        if (closed) {
            uint64_t now = sh_now_ns();
            if (now - start >= (uint64_t)(seconds * 1e9)) {
                n = i;
                break;
            }
            arrival[i] = now - start;
        }
        uint64_t at = start + arrival[i];
        if (sh_now_ns() < at)
            sh_sleep_until(at);
        if (backlog)
            printf("QUEUED i=%zu t_ns=%" PRIu64 " us=%.1f\n", i, at, (double)backlog() / 1e3);
        if (begin)
            begin();
        for (unsigned long k = 0; k < kernels; k++)
            SH_CK(sh_launch(&g));
        if (poll == 0) {
            SH_CK(g.sync(g.stream));
        } else {
            if (poll == 2)
                SH_CK(event_record(done, g.stream));
            for (;;) {
                CUresult q = poll == 1 ? stream_query(g.stream) : event_query(done);
                if (q == CUDA_SUCCESS)
                    break;
                if (q != CUDA_ERROR_NOT_READY)
                    SH_CK(q);
                sh_sleep_until(sh_now_ns() + 20000);
            }
        }
        if (end)
            end();
        lat[i] = sh_now_ns() - at;
        printf("REQ i=%zu latency_us=%.1f\n", i, (double)lat[i] / 1e3);
    }

    rc = sh_result(&g);
    if (rc)
        return rc;
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += (double)lat[i];
    qsort(lat, n, sizeof(uint64_t), cmp_u64);
    printf("DONE requests=%zu p50_us=%.1f p99_us=%.1f max_us=%.1f mean_us=%.1f explicit=%d\n", n,
           n ? (double)rank(lat, n, 0.50) / 1e3 : 0.0, n ? (double)rank(lat, n, 0.99) / 1e3 : 0.0,
           n ? (double)lat[n - 1] / 1e3 : 0.0, n ? sum / (double)n / 1e3 : 0.0,
           begin != NULL);
    fflush(stdout);
    free(arrival);
    free(lat);
    if (leave_open >= 0 && begin) {
        begin();
        printf("OPEN\n");
        fflush(stdout);
        if (leave_open == 0)
            _exit(WL_EXIT_OK);
        sh_sleep_until(sh_now_ns() + (uint64_t)(leave_open * 1e9));
        end();
    }
    return WL_EXIT_OK;
}
