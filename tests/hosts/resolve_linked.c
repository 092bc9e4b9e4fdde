/* resolve_linked: the host is linked against libcuda (NEEDED libcuda.so.1). */
#include "resolve.h"

void resolve_linked(struct drv *d, int per_thread)
{
#define LINK_LEGACY(name, sym, ver, params)                                                        \
    d->fn[SLOT_##name] = (void *)&sym;                                                             \
    d->as[SLOT_##name] = #sym;
    CUDA_MIN_FUNCS(LINK_LEGACY)
#undef LINK_LEGACY
    if (per_thread) {
#define LINK_PT(name, sym, ver, params)                                                            \
    d->fn[SLOT_##name] = (void *)&sym;                                                             \
    d->as[SLOT_##name] = #sym;
        CUDA_MIN_PT_FUNCS(LINK_PT)
#undef LINK_PT
    }
}
