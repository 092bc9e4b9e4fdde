/* See resolve.h. */
#define _GNU_SOURCE
#include "resolve.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

static void *open_driver(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("CUDA_ERROR dlopen(libcuda.so.1) %s\n", dlerror());
        fflush(stdout);
    }
    return h;
}

int resolve_dlopen(struct drv *d)
{
    void *h = open_driver();
    if (!h)
        return WL_EXIT_CUDA;
    for (int s = 0; s < WL_NSLOTS; s++) {
        const struct wl_slot_info *si = wl_slot(s);
        d->fn[s] = dlsym(h, si->sym);
        d->as[s] = si->sym;
        if (!d->fn[s]) {
            printf("CUDA_ERROR dlsym(%s) missing\n", si->sym);
            fflush(stdout);
            return WL_EXIT_CUDA;
        }
    }
    return 0;
}

int resolve_gpa_entry(struct gpa *g, int v2)
{
    void *h = open_driver();
    if (!h)
        return WL_EXIT_CUDA;
    const char *name = v2 ? "cuGetProcAddress_v2" : "cuGetProcAddress";
    g->fn = dlsym(h, name);
    g->v2 = v2;
    if (!g->fn) {
        printf("CUDA_ERROR dlsym(%s) missing\n", name);
        fflush(stdout);
        return WL_EXIT_CUDA;
    }
    return 0;
}

CUresult gpa_call(const struct gpa *g, const char *name, void **pfn, int version, uint64_t flags,
                  int *status)
{
    CUresult rc;
    *pfn = (void *)(uintptr_t)1; /* sentinel: a failing call must write NULL */
    *status = -1;
    if (g->v2) {
        CUdriverProcAddressQueryResult st = -1;
        wl_note("cuGetProcAddress_v2", 1);
        rc = ((PFN_cuGetProcAddress_v2)g->fn)(name, pfn, version, flags, &st);
        *status = st;
    } else {
        wl_note("cuGetProcAddress", 1);
        rc = ((PFN_cuGetProcAddress_v1)g->fn)(name, pfn, version, flags);
    }
    return rc;
}

/*
 * Like the CUDA runtime, a host asks for each function at the newest version
 * whose ABI it was written against, not beyond: from 13000 on,
 * "cuCtxSynchronize" is cuCtxSynchronize_v2(CUcontext), which the workload's
 * cuCtxSynchronize(void) call must not get.
 */
static int abi_version(int slot, int version)
{
    if (slot == SLOT_cuCtxSynchronize && version > 12090)
        return 12090;
    return version;
}

const char *gpa_expected(int slot, int version, uint64_t flags)
{
    version = abi_version(slot, version);
    const struct wl_slot_info *si = wl_slot(slot);
    if ((flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && si->pt_sym &&
        si->pt_ver <= version)
        return si->pt_sym;
    if (si->ver <= version)
        return si->sym;
    return NULL;
}

int resolve_gpa(struct drv *d, const struct gpa *g, int version, uint64_t flags, int verbose)
{
    int unavailable = 0, bad = 0;
    for (int s = 0; s < WL_NSLOTS; s++) {
        const struct wl_slot_info *si = wl_slot(s);
        void *p;
        int st;
        CUresult rc = gpa_call(g, si->name, &p, abi_version(s, version), flags, &st);
        const char *want = gpa_expected(s, version, flags);
        if (verbose) {
            const char *sym;
            const char *obj = rc == CUDA_SUCCESS ? wl_object_of(p, &sym) : "null";
            if (rc != CUDA_SUCCESS)
                sym = "-";
            printf("GPA %s version=%d flags=%llu rc=%d status=%d obj=%s sym=%s want=%s\n",
                   si->name, abi_version(s, version), (unsigned long long)flags, rc, st, obj, sym,
                   want ? want : "-");
        }
        if (want) {
            if (rc != CUDA_SUCCESS || !p || (g->v2 && st != CU_GET_PROC_ADDRESS_SUCCESS)) {
                printf("GPA_ERROR %s: rc=%d status=%d pfn=%p, want success\n", si->name, rc, st,
                       p);
                bad++;
            }
            d->fn[s] = p;
            d->as[s] = want;
        } else {
            unavailable++;
            if (rc != CUDA_ERROR_NOT_FOUND || p != NULL ||
                (g->v2 && st != CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT)) {
                printf("GPA_ERROR %s at %d: rc=%d status=%d pfn=%p, want 500/NULL/"
                       "VERSION_NOT_SUFFICIENT\n",
                       si->name, version, rc, st, p);
                bad++;
            }
            d->fn[s] = NULL;
            d->as[s] = si->sym;
        }
    }
    fflush(stdout);
    return bad ? -1 : unavailable;
}

int gpa_unknown_check(const struct gpa *g)
{
    void *p;
    int st;
    CUresult rc = gpa_call(g, "cuTandemNoSuchFunction", &p, 13000, 0, &st);
    printf("GPA_UNKNOWN rc=%d status=%d pfn=%s\n", rc, st, p ? "set" : "null");
    if (rc != CUDA_ERROR_NOT_FOUND || p != NULL ||
        (g->v2 && st != CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND)) {
        printf("GPA_ERROR unknown name: rc=%d status=%d, want 500/NULL/SYMBOL_NOT_FOUND\n", rc,
               st);
        fflush(stdout);
        return -1;
    }
    fflush(stdout);
    return 0;
}
