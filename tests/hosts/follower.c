/*
 * follower: one side of follow mode, for the follow-mode tests.
 *
 *   follower share|map --name NAME --mib M [--layout TAG] [--timeout-ms T] [--fill SEED]
 *            [--wait-go]
 *
 * Linked against the driver (-lcuda); the tandem_follow_* functions are looked up with
 * dlsym(RTLD_DEFAULT) so the host also runs without libtandem.so (then it prints NOSHIM and
 * exits 2). One module with the fake kernel `fill_u32`. TAG (at most 16 bytes, zero-padded) is
 * the layout tag; default "layout-v1".
 *
 * share: tandem_follow_alloc(M MiB) -> `ALLOC rc=<code> allocated=<0|1>`; with --fill, the
 *        `write SEED` command below (its WROTE line); then tandem_follow_offer(NAME, TAG)
 *        -> `SHARE rc=<code> allocated=<0|1>`
 * map:   tandem_follow_map(NAME, M MiB, TAG, T) -> `MAP rc=<code> allocated=<0|1>`
 * With --wait-go, after CUDA is set up (the shim registered) and before the share or map, it
 * prints `READY` and waits for one line on stdin, so a test can stop the coordinator first.
 * Then commands, one per stdin line, each answered by one stdout line:
 *   write SEED   cuMemcpyHtoD_v2 of the whole region from a splitmix64 stream seeded by SEED
 *                -> `WROTE rc=<CUresult> digest=<16 hex>` (the digest of what was written)
 *   digest       cuMemcpyDtoH_v2 of the whole region -> `DIGEST rc=<CUresult> digest=<16 hex>`
 *   memcpy       cuMemcpyHtoD_v2 of 4 KiB at the region's start -> `MEMCPY rc=<CUresult>`
 *   kernel       fill_u32(region, 1024, 7), cuCtxSynchronize -> `KERNEL launch=<r> sync=<r>`
 *   free         tandem_follow_free -> `FREE rc=<code>`
 *   threadfree   tandem_follow_free from a new thread with no current context
 *                -> `THREADFREE rc=<code>`
 *   cufree       cuMemFree_v2 -> `CUFREE rc=<CUresult>`
 *   stats        `STATS shared=<tandem_follow_shared_bytes> mapped=<tandem_follow_mapped_bytes>`
 *   fork         fork(); the child sleeps until killed (at most 60 s) -> `FORKED pid=<child>`
 *   exit         exit 0 (end of input too)
 * Digests are FNV-1a 64 over the region's bytes.
 *
 * Exit status: 0 done; 2 setup failed (ERROR line or NOSHIM); 64 bad command line.
 */
#define _GNU_SOURCE
#include "cuda_min.h"

#include <dlfcn.h>
#include <pthread.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXIT_SETUP 2
#define EXIT_USAGE 64
#define MIB (1024ull * 1024ull)

#define CK(name, call)                                                                             \
    do {                                                                                           \
        CUresult rc_ = (call);                                                                     \
        if (rc_ != CUDA_SUCCESS) {                                                                 \
            printf("ERROR %s rc=%d\n", name, rc_);                                                 \
            fflush(stdout);                                                                        \
            exit(EXIT_SETUP);                                                                      \
        }                                                                                          \
    } while (0)

static const char k_image[] = "tandem-fake-module v1\n"
                              "kernel fill_u32 20000 fill_u32\n";

typedef int (*alloc_fn)(uint64_t, unsigned long long *);
typedef int (*offer_fn)(unsigned long long, const char *, const uint8_t *);
typedef int (*map_fn)(const char *, uint64_t, const uint8_t *, unsigned, unsigned long long *);
typedef int (*free_fn)(unsigned long long);
typedef uint64_t (*u64_fn)(void);

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t fnv1a(const void *data, size_t len)
{
    const unsigned char *p = data;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

struct thread_free {
    free_fn f;
    unsigned long long ptr;
    int rc;
};

static void *free_in_thread(void *arg)
{
    struct thread_free *t = arg;
    t->rc = t->f(t->ptr);
    return NULL;
}

/* The `write SEED` command: fills the region from a splitmix64 stream, prints WROTE. */
static void write_region(unsigned long long ptr, unsigned char *host, size_t bytes, uint64_t s)
{
    for (size_t i = 0; i + 8 <= bytes; i += 8) {
        uint64_t x = splitmix64(&s);
        memcpy(host + i, &x, 8);
    }
    CUresult r = cuMemcpyHtoD_v2(ptr, host, bytes);
    printf("WROTE rc=%d digest=%016" PRIx64 "\n", r, fnv1a(host, bytes));
    fflush(stdout);
}

static int usage(void)
{
    fprintf(stderr, "usage: follower share|map --name NAME --mib M [--layout TAG] "
                    "[--timeout-ms T] [--fill SEED] [--wait-go]\n");
    return EXIT_USAGE;
}

static void *sym(const char *name)
{
    void *p = dlsym(RTLD_DEFAULT, name);
    if (!p) {
        printf("NOSHIM %s\n", name);
        fflush(stdout);
        exit(EXIT_SETUP);
    }
    return p;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage();
    int share = strcmp(argv[1], "share") == 0;
    if (!share && strcmp(argv[1], "map") != 0)
        return usage();
    const char *name = NULL, *tag = "layout-v1";
    unsigned long long mib = 0, timeout_ms = 0, fill_seed = 0;
    int fill = 0, wait_go = 0;
    for (int i = 2; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--wait-go") == 0) {
            wait_go = 1;
            i--;
            continue;
        }
        if (!v)
            return usage();
        if (strcmp(a, "--name") == 0)
            name = v;
        else if (strcmp(a, "--mib") == 0)
            mib = strtoull(v, NULL, 10);
        else if (strcmp(a, "--layout") == 0)
            tag = v;
        else if (strcmp(a, "--timeout-ms") == 0)
            timeout_ms = strtoull(v, NULL, 10);
        else if (strcmp(a, "--fill") == 0) {
            fill = 1;
            fill_seed = strtoull(v, NULL, 10);
        }
        else
            return usage();
    }
    if (!name || mib == 0 || mib > 4096 || strlen(tag) > 16 || timeout_ms > 600000)
        return usage();
    uint8_t layout[16] = {0};
    memcpy(layout, tag, strlen(tag));
    const size_t bytes = (size_t)(mib * MIB);

    alloc_fn f_alloc = (alloc_fn)sym("tandem_follow_alloc");
    offer_fn f_offer = (offer_fn)sym("tandem_follow_offer");
    map_fn f_map = (map_fn)sym("tandem_follow_map");
    free_fn f_free = (free_fn)sym("tandem_follow_free");
    u64_fn f_shared = (u64_fn)sym("tandem_follow_shared_bytes");
    u64_fn f_mapped = (u64_fn)sym("tandem_follow_mapped_bytes");

    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction f_fill;
    CK("cuInit", cuInit(0));
    CK("cuDeviceGet", cuDeviceGet(&dev, 0));
    CK("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain(&ctx, dev));
    CK("cuCtxSetCurrent", cuCtxSetCurrent(ctx));
    CK("cuModuleLoadData", cuModuleLoadData(&mod, k_image));
    CK("cuModuleGetFunction", cuModuleGetFunction(&f_fill, mod, "fill_u32"));

    unsigned char *host = malloc(bytes);
    if (!host) {
        printf("ERROR malloc rc=0\n");
        return EXIT_SETUP;
    }
    if (wait_go) {
        char go[64];
        printf("READY\n");
        fflush(stdout);
        if (!fgets(go, sizeof go, stdin))
            return 0;
    }
    unsigned long long ptr = 0;
    int rc;
    if (share) {
        rc = f_alloc(bytes, &ptr);
        printf("ALLOC rc=%d allocated=%d\n", rc, ptr != 0);
        if (fill && ptr)
            write_region(ptr, host, bytes, fill_seed);
        rc = f_offer(ptr, name, layout);
        printf("SHARE rc=%d allocated=%d\n", rc, ptr != 0);
    } else {
        rc = f_map(name, bytes, layout, (unsigned)timeout_ms, &ptr);
        printf("MAP rc=%d allocated=%d\n", rc, ptr != 0);
    }
    fflush(stdout);

    char line[256];
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\r\n")] = 0;
        if (strncmp(line, "write ", 6) == 0) {
            write_region(ptr, host, bytes, strtoull(line + 6, NULL, 10));
        } else if (strcmp(line, "digest") == 0) {
            memset(host, 0, bytes);
            CUresult r = cuMemcpyDtoH_v2(host, ptr, bytes);
            printf("DIGEST rc=%d digest=%016" PRIx64 "\n", r, fnv1a(host, bytes));
        } else if (strcmp(line, "memcpy") == 0) {
            printf("MEMCPY rc=%d\n", cuMemcpyHtoD_v2(ptr, host, 4096));
        } else if (strcmp(line, "kernel") == 0) {
            unsigned n = 1024, value = 7;
            CUdeviceptr p = ptr;
            void *params[3] = {&p, &n, &value};
            CUresult l = cuLaunchKernel(f_fill, 1, 1, 1, 256, 1, 1, 0, NULL, params, NULL);
            CUresult s = cuCtxSynchronize();
            printf("KERNEL launch=%d sync=%d\n", l, s);
        } else if (strcmp(line, "free") == 0) {
            printf("FREE rc=%d\n", f_free(ptr));
        } else if (strcmp(line, "threadfree") == 0) {
            struct thread_free t = {f_free, ptr, 1};
            pthread_t th;
            if (pthread_create(&th, NULL, free_in_thread, &t) == 0)
                pthread_join(th, NULL);
            printf("THREADFREE rc=%d\n", t.rc);
        } else if (strcmp(line, "cufree") == 0) {
            printf("CUFREE rc=%d\n", cuMemFree_v2(ptr));
        } else if (strcmp(line, "stats") == 0) {
            printf("STATS shared=%" PRIu64 " mapped=%" PRIu64 "\n", f_shared(), f_mapped());
        } else if (strcmp(line, "fork") == 0) {
            pid_t c = fork();
            if (c == 0) {
                sleep(60);
                _exit(0);
            }
            printf("FORKED pid=%d\n", (int)c);
        } else if (strcmp(line, "exit") == 0) {
            break;
        } else {
            printf("UNKNOWN %s\n", line);
        }
        fflush(stdout);
    }
    free(host);
    return 0;
}
