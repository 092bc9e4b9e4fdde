/*
 * The workload shared by every tandem test host.
 *
 * A host only decides HOW the driver is resolved (linked, dlopen+dlsym,
 * cuGetProcAddress, RTLD_NEXT) by filling a `struct drv`; the workload, the
 * data checks and the count checks are the same for all of them, so the
 * RESULT checksum must be identical across resolution paths and with or
 * without the shim.
 */
#ifndef TANDEM_WORKLOAD_H
#define TANDEM_WORKLOAD_H

#include "cuda_min.h"

/* Exit codes of every host. */
#define WL_EXIT_OK 0
#define WL_EXIT_CHECK 1 /* wrong data or a count MISMATCH */
#define WL_EXIT_USAGE 2
#define WL_EXIT_CUDA 3 /* a driver call failed: a `CUDA_ERROR <call> <code>` line says which */

/* Kernels one wl_run executes (direct launches + graph nodes; the 2 launches
 * recorded by stream capture run only as the captured graph's 2 x 2 nodes). */
#define WL_KERNELS_PER_RUN 19
#define WL_ELEMS 4096u

enum wl_slot {
#define WL_SLOT_ENUM(name, sym, ver, params) SLOT_##name,
    CUDA_MIN_FUNCS(WL_SLOT_ENUM)
#undef WL_SLOT_ENUM
        WL_NSLOTS
};

#define WL_PFN_TYPEDEF(name, sym, ver, params) typedef CUresult(*PFN_##name) params;
CUDA_MIN_FUNCS(WL_PFN_TYPEDEF)
#undef WL_PFN_TYPEDEF

struct wl_slot_info {
    const char *name;   /* cuGetProcAddress name */
    const char *sym;    /* exported legacy symbol */
    int ver;            /* first CUDA version of the legacy symbol */
    const char *pt_sym; /* exported per-thread symbol, or NULL */
    int pt_ver;
};
const struct wl_slot_info *wl_slot(int slot);

/* One resolved view of the driver. */
struct drv {
    const char *label;
    void *fn[WL_NSLOTS];
    const char *as[WL_NSLOTS]; /* exported symbol each slot is expected to reach */
    uint64_t calls[WL_NSLOTS]; /* calls the workload made through each slot (atomic) */
};

/* Zero `d` and register it so its calls are part of every later snapshot's OWN counts. */
void wl_drv_init(struct drv *d, const char *label);
/* Prints one `RESOLVE` line per slot: where its pointer lives (dladdr). */
void wl_print_resolution(const struct drv *d);
/* Shared-object base name and nearest exported symbol holding `p` ("null" when p is NULL). */
const char *wl_object_of(const void *p, const char **sym);

/* A call the host made directly (not through a struct drv), e.g. cuGetProcAddress. */
void wl_note(const char *sym, uint64_t n);

/* In a fresh process: a call before cuInit must return CUDA_ERROR_NOT_INITIALIZED.
 * Returns 0, or the unexpected CUresult (after printing CUDA_ERROR). */
int wl_preinit_check(struct drv *d);

/* Runs the workload; returns a WL_EXIT_* code. *checksum gets the data checksum. */
int wl_run(struct drv *d, uint32_t seed, uint64_t *checksum);

/* Introspection of the fake driver and the shim (both optional). */
int wl_have_shim(void);
int wl_have_fake(void);
uint64_t wl_hook_count(const char *sym); /* UINT64_MAX when no shim or not hooked */

/* A snapshot of every tracked symbol: fake calls, shim hook counts, own calls. */
struct wl_snap {
    uint64_t *fake, *hook, *own;
    uint64_t *shim_own; /* calls the shim itself made to the driver (tandem_driver_calls) */
    uint64_t kernels;   /* fakecuda_kernels_executed */
    uint64_t shim_kernels; /* tandem_kernels_launched, UINT64_MAX without a shim */
};
void wl_snap_take(struct wl_snap *s);
void wl_snap_free(struct wl_snap *s);
size_t wl_nsyms(void);
const char *wl_sym(size_t i);
int wl_is_contract_hook(const char *sym);

/*
 * Compares, over the window from `from` to now:
 *   OWN delta + SHIM_OWN delta == FAKE delta (for every tracked symbol, when the
 *     fake is present; SHIM_OWN counts the driver calls the shim made itself);
 *   OWN delta == HOOK delta (for every symbol the shim hooks);
 *   HOOK + SHIM_OWN (now - base) == FAKE (now - base) (for every hooked symbol);
 *   the fake's executed-kernel delta == expected_kernels, and so is the shim's
 *     tandem_kernels_launched delta.
 * Prints OWN/FAKE/HOOK/KERNELS lines and one `MISMATCH <label> ...` line per
 * difference. Returns the number of mismatches.
 */
int wl_check(const char *label, const struct wl_snap *from, const struct wl_snap *base,
             uint64_t expected_kernels);

#endif

/*
 * The common body of a single-run host, after it has resolved `d`:
 * checks that no hook was counted before (shim present), the pre-cuInit
 * error, prints the resolution, runs the workload (seed 1), prints
 * `RESULT <hex>` and checks the counts against `start`. Returns the exit code.
 */
int wl_main_run(struct drv *d, const struct wl_snap *start);
/* With a shim: every hook count in `s` must be 0 (prints MISMATCH otherwise). */
int wl_check_zero_hooks(const char *label, const struct wl_snap *s);
