/*
 * threads: N threads, each resolving the driver its own way and running the
 * workload on its own stream, concurrently:
 *   thread i % 5 == 0  linked symbols
 *                   1  dlopen + dlsym
 *                   2  cuGetProcAddress_v2 at 12000, flags 0 (legacy variants)
 *                   3  cuGetProcAddress_v2 at 12000, flags 2 (per-thread variants)
 *                   4  cuGetProcAddress (v1) at 12000, flags 1 (legacy variants)
 * Thread i uses seed i % 5 + 1, so threads of the same kind compute the same data.
 * Totals (own calls, fake calls, hook counts, kernels = N * 15) are checked once
 * all threads have joined.
 *
 *   threads <N>
 */
#include "resolve.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define MAX_THREADS 64

struct worker {
    int index;
    struct drv d;
    uint64_t sum;
    int rc;
};

static struct worker g_workers[MAX_THREADS];

static const char *const k_paths[5] = {"linked", "dlopen", "gpa-v2-f0", "gpa-v2-f2", "gpa-v1-f1"};

static void *work(void *arg)
{
    struct worker *w = arg;
    struct gpa g;
    int kind = w->index % 5;
    switch (kind) {
    case 0:
        resolve_linked(&w->d, 0);
        break;
    case 1:
        w->rc = resolve_dlopen(&w->d);
        break;
    default: {
        int v2 = kind != 4;
        uint64_t flags = kind == 2 ? 0 : kind == 3 ? 2 : 1;
        w->rc = resolve_gpa_entry(&g, v2);
        if (!w->rc && resolve_gpa(&w->d, &g, 12000, flags, 0) != 0)
            w->rc = WL_EXIT_CHECK;
        break;
    }
    }
    if (!w->rc)
        w->rc = wl_run(&w->d, (uint32_t)kind + 1, &w->sum);
    return NULL;
}

int main(int argc, char **argv)
{
    struct wl_snap start;
    struct drv main_drv;
    pthread_t tids[MAX_THREADS];
    int n = argc > 1 ? atoi(argv[1]) : 0;
    if (n < 1 || n > MAX_THREADS) {
        fprintf(stderr, "usage: threads <1..%d>\n", MAX_THREADS);
        return WL_EXIT_USAGE;
    }
    wl_snap_take(&start);
    int bad = wl_check_zero_hooks("start", &start);
    wl_drv_init(&main_drv, "linked");
    resolve_linked(&main_drv, 0);
    if (wl_preinit_check(&main_drv))
        return WL_EXIT_CUDA;
    for (int i = 0; i < n; i++) {
        g_workers[i].index = i;
        wl_drv_init(&g_workers[i].d, k_paths[i % 5]);
    }
    for (int i = 0; i < n; i++) {
        if (pthread_create(&tids[i], NULL, work, &g_workers[i])) {
            fprintf(stderr, "pthread_create failed\n");
            return WL_EXIT_CHECK;
        }
    }
    uint64_t total = 0xcbf29ce484222325ull;
    int failed = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(tids[i], NULL);
        struct worker *w = &g_workers[i];
        printf("THREAD %d path=%s rc=%d result=%016" PRIx64 "\n", i, k_paths[i % 5], w->rc,
               w->sum);
        if (w->rc)
            failed = w->rc;
        total = (total ^ w->sum) * 0x100000001b3ull;
    }
    if (failed)
        return failed;
    /* Same seed, same data, whichever way the driver was resolved. */
    for (int i = 5; i < n; i++) {
        if (g_workers[i].sum != g_workers[i % 5].sum) {
            printf("MISMATCH threads result %d != %d\n", i, i % 5);
            bad++;
        }
    }
    printf("RESULT %016" PRIx64 "\n", total);
    bad += wl_check("main", &start, &start, (uint64_t)n * WL_KERNELS_PER_RUN);
    printf("DONE mismatches=%d\n", bad);
    return bad ? WL_EXIT_CHECK : WL_EXIT_OK;
}
