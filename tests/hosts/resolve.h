/* The ways a host can resolve the driver into a struct drv. */
#ifndef TANDEM_RESOLVE_H
#define TANDEM_RESOLVE_H

#include "workload.h"

/* Linked directly (-lcuda): the addresses of the exported symbols. With
 * per_thread, the _ptsz/_ptds symbols where they exist (what nvcc's
 * --default-stream per-thread does). Defined in resolve_linked.c. */
void resolve_linked(struct drv *d, int per_thread);

/* dlopen("libcuda.so.1") + dlsym(handle, <exported legacy symbol>) for every
 * slot. Returns 0, or WL_EXIT_CUDA after printing why. */
int resolve_dlopen(struct drv *d);

/* A cuGetProcAddress entry point (v1 or v2 signature). */
struct gpa {
    void *fn;
    int v2;
};

/* dlopen("libcuda.so.1") + dlsym of cuGetProcAddress (v2=0) or
 * cuGetProcAddress_v2 (v2=1). Returns 0 or WL_EXIT_CUDA. */
int resolve_gpa_entry(struct gpa *g, int v2);

/* One cuGetProcAddress call, noted as a call to the variant it reaches.
 * *status is -1 for v1. *pfn is set to a non-NULL sentinel first. */
CUresult gpa_call(const struct gpa *g, const char *name, void **pfn, int version, uint64_t flags,
                  int *status);

/* The exported symbol cuGetProcAddress(name, version, flags) must return for a
 * slot, or NULL when no variant is old enough. */
const char *gpa_expected(int slot, int version, uint64_t flags);

/*
 * Resolves every slot through g at (version, flags), checking the result
 * codes, statuses and NULL pointers the contract prescribes. Prints one
 * `GPA <name> rc=.. status=.. obj=.. sym=..` line per slot when verbose.
 * Returns the number of slots that are (correctly) unavailable at this version,
 * or -1 after a contract violation (printed as `GPA_ERROR ...`).
 */
int resolve_gpa(struct drv *d, const struct gpa *g, int version, uint64_t flags, int verbose);

/* Asks for a name that does not exist: must give 500, NULL, SYMBOL_NOT_FOUND. Returns 0/-1. */
int gpa_unknown_check(const struct gpa *g);

#endif
