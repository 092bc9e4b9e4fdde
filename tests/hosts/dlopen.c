/*
 * dlopen: dlopen("libcuda.so.1") + dlsym(handle, <exported symbol>) for every
 * function: the path many frameworks use. The shim sees these only through its
 * dlsym override.
 */
#include "resolve.h"

int main(void)
{
    struct wl_snap start;
    struct drv d;
    wl_snap_take(&start);
    wl_drv_init(&d, "dlopen");
    int rc = resolve_dlopen(&d);
    if (rc)
        return rc;
    return wl_main_run(&d, &start);
}
