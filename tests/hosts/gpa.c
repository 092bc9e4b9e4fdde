/*
 * gpa: dlopen("libcuda.so.1") + dlsym of cuGetProcAddress (v1) or
 * cuGetProcAddress_v2 (v2), then every function by its cuGetProcAddress name
 * (cuMemAlloc, cuLaunchKernel, ...) at the requested cudaVersion and flags,
 * the way the CUDA runtime (PyTorch, JAX) does it.
 *
 *   gpa v1|v2 <cudaVersion> <flags 0|1|2>
 *
 * Each slot is expected to reach a definite exported symbol: with flags 2 the
 * per-thread form (cuLaunchKernel_ptsz, cuMemcpyHtoD_v2_ptds, ...) where one is
 * old enough, else the legacy one. The count check (own calls attributed to
 * that symbol == fakecuda_calls(symbol) delta) is what proves the right
 * variant was reached, with or without the shim in between.
 *
 * It also asks for "cuGetProcAddress" at 12000 through the entry point it got
 * (which must give the _v2 form), resolves everything again through that,
 * requires the same pointers, and runs the workload with the second set.
 *
 * When the requested cudaVersion is too old for some functions (e.g. 3000:
 * cuMemAlloc's _v2 starts at 3020) those must come back as
 * 500 / NULL / CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT; the host then prints
 * `WORKLOAD skipped ...`, still checks the counts of the calls it made, and
 * exits 0 when everything matched the contract.
 */
#include "resolve.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    struct wl_snap start;
    struct drv a, b;
    struct gpa g, g2;
    int bad = 0;

    if (argc != 4 || (strcmp(argv[1], "v1") && strcmp(argv[1], "v2"))) {
        fprintf(stderr, "usage: gpa v1|v2 <cudaVersion> <flags>\n");
        return WL_EXIT_USAGE;
    }
    int v2 = strcmp(argv[1], "v2") == 0;
    int version = atoi(argv[2]);
    uint64_t flags = strtoull(argv[3], NULL, 0);

    wl_snap_take(&start);
    wl_drv_init(&a, "gpa");
    wl_drv_init(&b, "gpa-self");
    int rc = resolve_gpa_entry(&g, v2);
    if (rc)
        return rc;
    {
        const char *sym;
        const char *obj = wl_object_of(g.fn, &sym);
        printf("ENTRY %s obj=%s sym=%s\n", v2 ? "cuGetProcAddress_v2" : "cuGetProcAddress", obj,
               sym);
    }
    if (gpa_unknown_check(&g))
        bad++;

    int unavailable = resolve_gpa(&a, &g, version, flags, 1);
    if (unavailable < 0) {
        /* Tell a driver error (e.g. 303 from a shim without a real driver)
         * from a contract violation. */
        void *p;
        int st0;
        CUresult r = gpa_call(&g, "cuInit", &p, version, flags, &st0);
        if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_FOUND) {
            printf("CUDA_ERROR cuGetProcAddress %d\n", r);
            return WL_EXIT_CUDA;
        }
        return WL_EXIT_CHECK;
    }

    /* cuGetProcAddress through itself, at 12000: the _v2 form. */
    void *self = NULL;
    int st;
    rc = gpa_call(&g, "cuGetProcAddress", &self, 12000, 0, &st);
    {
        const char *sym;
        const char *obj = rc == CUDA_SUCCESS ? wl_object_of(self, &sym) : "null";
        if (rc != CUDA_SUCCESS)
            sym = "-";
        printf("GPA_SELF rc=%d status=%d obj=%s sym=%s\n", rc, st, obj, sym);
    }
    if (rc != CUDA_SUCCESS || !self) {
        printf("CUDA_ERROR cuGetProcAddress(cuGetProcAddress) %d\n", rc);
        return WL_EXIT_CUDA;
    }
    g2.fn = self;
    g2.v2 = 1;
    if (resolve_gpa(&b, &g2, version, flags, 0) != unavailable) {
        printf("MISMATCH self-gpa unavailable-count\n");
        bad++;
    }
    for (int s = 0; s < WL_NSLOTS; s++) {
        if (a.fn[s] != b.fn[s]) {
            printf("MISMATCH self-gpa %s %p != %p\n", wl_slot(s)->name, a.fn[s], b.fn[s]);
            bad++;
        }
    }

    if (unavailable > 0) {
        printf("WORKLOAD skipped: %d functions need a newer cudaVersion than %d\n", unavailable,
               version);
        bad += wl_check_zero_hooks("start", &start);
        bad += wl_check("main", &start, &start, 0);
        printf("DONE mismatches=%d\n", bad);
        return bad ? WL_EXIT_CHECK : WL_EXIT_OK;
    }
    rc = wl_main_run(&b, &start);
    if (rc == WL_EXIT_OK && bad)
        rc = WL_EXIT_CHECK;
    return rc;
}
