/*
 * rtld_next: dlsym(RTLD_NEXT, ...) must resolve relative to the real caller
 * even though the shim overrides dlsym.
 *
 * Link order (NEEDED): libnexta.so, libnextb.so, libcuda.so.1; built with
 * -rdynamic so this executable's probe() is exported. Search order with the
 * shim preloaded: rtld_next, libtandem.so, libnexta.so, libnextb.so, libcuda.
 *   probe() here returns 1, in libnexta 2, in libnextb 3.
 *   dlsym(RTLD_DEFAULT, "probe")   -> 1
 *   dlsym(RTLD_NEXT, "probe") here -> 2 (libnexta)
 *   call_next_probe() in libnexta  -> 3 (libnextb); a dlsym override that
 *       forwarded RTLD_NEXT as if called from the shim would find libnexta's: 2.
 * Then dlsym(RTLD_NEXT, "cuLaunchKernel") from here must be the shim's hook
 * when it is preloaded (the next object after the executable is the shim):
 * the workload launches through it and the count check proves it was counted.
 */
#define _GNU_SOURCE
#include "resolve.h"

#include <dlfcn.h>
#include <stdio.h>

int probe(void);
int call_next_probe(void);

int probe(void) { return 1; }

int main(void)
{
    struct wl_snap start;
    struct drv d;
    int bad = 0;

    wl_snap_take(&start);
    int (*pd)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "probe");
    int (*pn)(void) = (int (*)(void))dlsym(RTLD_NEXT, "probe");
    int r_default = pd ? pd() : -1;
    int r_next = pn ? pn() : -1;
    int r_a = call_next_probe();
    printf("PROBE default=%d main_next=%d a_next=%d\n", r_default, r_next, r_a);
    if (r_default != 1 || r_next != 2 || r_a != 3) {
        printf("MISMATCH rtld_next probe default=%d main_next=%d a_next=%d want 1 2 3\n",
               r_default, r_next, r_a);
        bad++;
    }

    wl_drv_init(&d, "rtld-next");
    resolve_linked(&d, 0);
    void *launch = dlsym(RTLD_NEXT, "cuLaunchKernel");
    {
        const char *sym;
        const char *obj = wl_object_of(launch, &sym);
        printf("NEXT cuLaunchKernel obj=%s sym=%s\n", obj, sym);
    }
    if (!launch) {
        printf("CUDA_ERROR dlsym(RTLD_NEXT, cuLaunchKernel) missing\n");
        return WL_EXIT_CUDA;
    }
    d.fn[SLOT_cuLaunchKernel] = launch;
    int rc = wl_main_run(&d, &start);
    if (rc == WL_EXIT_OK && bad)
        rc = WL_EXIT_CHECK;
    return rc;
}
