/*
 * train: a throughput job for the scheduling tests.
 *
 *   train [--seconds S] [--count N] [--kernel-us U] [--blocks B] [--cluster W] [--sync-every M]
 *         [--gap-us G]
 *
 * Launches kernels of U microseconds (default 5000) and B blocks (default 1) on one stream, one
 * after another (--cluster W: a kernel compiled for thread-block clusters W blocks wide, as the
 * fake's cuFuncGetAttribute reports it), synchronising the stream after every M launches (default 4; 0 =
 * never, not even at the end), until S seconds have passed (default 3) or N
 * launches are done, whichever comes first (N 0 = no limit). --gap-us G spends
 * G microseconds on the CPU (a sleep) before each launch: the host-side work
 * of a training step. A launch goes through the shim's gate like any other,
 * so a closed gate holds this loop back.
 *
 * Output (stdout):
 *   READY pid=<pid> shim=<0|1> client_id=<id>
 *   RESULT launches=<n> sum=<hex>   the device buffer's checksum (sched_host.h); not with
 *                                   --sync-every 0, which never waits for the stream
 *   SMS all=<n> part=<n> part_lowest=<k|->    with the fake's SM placement
 *                                   (fakecuda_last_kernel_sms, FAKECUDA_SHARED_SMS=1): launches
 *                                   that ran on every SM their grid could fill, on fewer (an SM
 *                                   mask kept them off some), and the lowest SM any of the latter
 *                                   ran on
 *   DONE kernels=<n> seconds=<s> last_start_ns=<t> last_end_ns=<t>
 * `kernels` were launched and (unless M is 0) have completed. last_* is where
 * the fake driver placed the last kernel (CLOCK_MONOTONIC ns; `-` without the
 * fake's fakecuda_last_kernel). Exit codes as every host (workload.h).
 */
#include "sched_host.h"

#include <unistd.h>

static int usage(void)
{
    fprintf(stderr, "usage: train [--seconds S] [--count N] [--kernel-us U] [--blocks B] "
                    "[--cluster W] [--sync-every M] [--gap-us G]\n");
    return WL_EXIT_USAGE;
}

int main(int argc, char **argv)
{
    double seconds = 3, kernel_us = 5000, gap_us = 0;
    unsigned long long count = 0;
    unsigned long sync_every = 4, blocks = 1, cluster = 0;
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            return usage();
        if (strcmp(a, "--seconds") == 0)
            seconds = atof(v);
        else if (strcmp(a, "--count") == 0)
            count = strtoull(v, NULL, 10);
        else if (strcmp(a, "--kernel-us") == 0)
            kernel_us = atof(v);
        else if (strcmp(a, "--blocks") == 0)
            blocks = strtoul(v, NULL, 10);
        else if (strcmp(a, "--cluster") == 0)
            cluster = strtoul(v, NULL, 10);
        else if (strcmp(a, "--sync-every") == 0)
            sync_every = strtoul(v, NULL, 10);
        else if (strcmp(a, "--gap-us") == 0)
            gap_us = atof(v);
        else
            return usage();
    }
    if (!(seconds > 0) || kernel_us < 0 || gap_us < 0 || blocks == 0)
        return usage();

    struct sh_gpu g;
    char attrs[32] = "";
    if (cluster)
        snprintf(attrs, sizeof attrs, "cluster=%lu", cluster);
    int rc = sh_gpu_init_with(&g, "train_kernel", (uint64_t)(kernel_us * 1000.0), attrs);
    if (rc)
        return rc;
    g.blocks = (unsigned)blocks;
    sh_sms_fn sms = (sh_sms_fn)sh_sym("fakecuda_last_kernel_sms");
    uint64_t on_all = 0, on_part = 0;
    int part_lowest = -1;
    printf("READY pid=%d shim=%d client_id=%" PRIu64 "\n", (int)getpid(), wl_have_shim(),
           sh_client_id());
    fflush(stdout);

    uint64_t start = sh_now_ns(), stop = start + (uint64_t)(seconds * 1e9);
    uint64_t gap = (uint64_t)(gap_us * 1000.0), launched = 0;
    while (sh_now_ns() < stop && (!count || launched < count)) {
        if (gap)
            sh_sleep_until(sh_now_ns() + gap);
        SH_CK(sh_launch(&g));
        launched++;
        uint64_t set[4];
        int n = sms ? sms(set) : 0;
        if (n > 0 && (unsigned)n >= (blocks < 132 ? blocks : 132)) {
            on_all++;
        } else if (n > 0) {
            on_part++;
            for (int sm = 0; sm < 256; sm++)
                if (set[sm / 64] >> (sm % 64) & 1) {
                    if (part_lowest < 0 || sm < part_lowest)
                        part_lowest = sm;
                    break;
                }
        }
        if (sync_every && launched % sync_every == 0)
            SH_CK(g.sync(g.stream));
    }
    if (sync_every)
        SH_CK(g.sync(g.stream));
    /* The fake's last-kernel window, read before sh_result's own sync and copy. */
    sh_window_fn window = (sh_window_fn)sh_sym("fakecuda_last_kernel");
    uint64_t ws = 0, we = 0;
    int have_window = window && window(&ws, &we) == 0;
    if (sync_every) {
        rc = sh_result(&g);
        if (rc)
            return rc;
    }

    if (sms) {
        printf("SMS all=%" PRIu64 " part=%" PRIu64, on_all, on_part);
        if (part_lowest >= 0)
            printf(" part_lowest=%d\n", part_lowest);
        else
            printf(" part_lowest=-\n");
    }
    printf("DONE kernels=%" PRIu64 " seconds=%.3f", launched, (double)(sh_now_ns() - start) / 1e9);
    if (have_window)
        printf(" last_start_ns=%" PRIu64 " last_end_ns=%" PRIu64 "\n", ws, we);
    else
        printf(" last_start_ns=- last_end_ns=-\n");
    fflush(stdout);
    return WL_EXIT_OK;
}
