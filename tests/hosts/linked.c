/*
 * linked: the host is linked against the driver (-lcuda, NEEDED libcuda.so.1)
 * and calls the exported symbols directly, as a program built with nvcc does.
 *   linked          legacy symbols (cuLaunchKernel, cuMemcpyHtoD_v2, ...)
 *   linked ptds     per-thread symbols where they exist (cuLaunchKernel_ptsz,
 *                   cuMemcpyHtoD_v2_ptds, ...), as with --default-stream per-thread
 */
#include "resolve.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    struct wl_snap start;
    struct drv d;
    int per_thread = argc > 1 && strcmp(argv[1], "ptds") == 0;
    if (argc > 1 && !per_thread) {
        fprintf(stderr, "usage: linked [ptds]\n");
        return WL_EXIT_USAGE;
    }
    wl_snap_take(&start);
    wl_drv_init(&d, per_thread ? "linked-ptds" : "linked");
    resolve_linked(&d, per_thread);
    return wl_main_run(&d, &start);
}
