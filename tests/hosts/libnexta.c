/* libnexta.so: NEEDED by rtld_next before libnextb.so. See rtld_next.c. */
#define _GNU_SOURCE
#include <dlfcn.h>

int probe(void);
int call_next_probe(void);

int probe(void) { return 2; }

int call_next_probe(void)
{
    int (*next)(void) = (int (*)(void))dlsym(RTLD_NEXT, "probe");
    return next ? next() : -1;
}
