/*
 * init_race: N threads call cuInit at once (released together by a barrier),
 * as the first CUDA call of the process, so that one of them registers with
 * the coordinator while the others are already in their cuInit.
 *
 *   init_race <N>
 *
 * Output: `DONE threads=<N> failed=<n>`. Exit 0 when every cuInit succeeded,
 * 3 otherwise, 2 on bad usage (as every host, workload.h).
 */
#include "resolve.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define MAX_THREADS 64

static struct drv g_drv;
static pthread_barrier_t g_barrier;
static int g_failed; /* atomic */

static void *racer(void *arg)
{
    (void)arg;
    pthread_barrier_wait(&g_barrier);
    CUresult rc = ((PFN_cuInit)g_drv.fn[SLOT_cuInit])(0);
    if (rc != CUDA_SUCCESS)
        __atomic_fetch_add(&g_failed, 1, __ATOMIC_RELAXED);
    return NULL;
}

int main(int argc, char **argv)
{
    pthread_t tids[MAX_THREADS];
    int n = argc > 1 ? atoi(argv[1]) : 0;
    if (n < 2 || n > MAX_THREADS) {
        fprintf(stderr, "usage: init_race <2..%d>\n", MAX_THREADS);
        return WL_EXIT_USAGE;
    }
    wl_drv_init(&g_drv, "linked");
    resolve_linked(&g_drv, 0);
    pthread_barrier_init(&g_barrier, NULL, (unsigned)n);
    for (int i = 0; i < n; i++) {
        if (pthread_create(&tids[i], NULL, racer, NULL)) {
            fprintf(stderr, "pthread_create failed\n");
            return WL_EXIT_CUDA;
        }
    }
    for (int i = 0; i < n; i++)
        pthread_join(tids[i], NULL);
    int failed = __atomic_load_n(&g_failed, __ATOMIC_RELAXED);
    printf("DONE threads=%d failed=%d\n", n, failed);
    fflush(stdout);
    return failed ? WL_EXIT_CUDA : 0;
}
