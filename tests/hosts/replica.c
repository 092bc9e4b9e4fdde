/*
 * replica: one replica of a model, for the weight-dedup tests.
 *
 *   replica --weights-mib M --seed S --requests N [--gap-ms G] [--act-mib A]
 *           [--write-after K --write memcpy|memset|d2d|kernel|memcpy2d|memset2d
 *            [--write-when-shared]]
 *           [--wait-file PATH] [--flood K] [--linger-file PATH] [--trace]
 *
 * Linked against the driver (-lcuda) and calling the exported symbols directly, so an
 * LD_PRELOADed shim sees every call. One module with the fake kernels `sum_u32` and `fill_u32`
 * (20 us each). The weights are ONE cuMemAlloc_v2 of M MiB, filled by cuMemcpyHtoD_v2 from a
 * splitmix64 stream seeded by S (same S: identical bytes in every replica; another S: other
 * bytes); the activations one cuMemAlloc_v2 of A MiB (default 4); the output 4 KiB.
 *
 * Request i (0-based), all on the legacy stream:
 *   fill_u32(act, n_act, i + 1); sum_u32(out, weights, n_w); sum_u32(out + 4, act, n_act);
 *   cuMemcpyDtoH_v2 of out[0..2]; the 8 bytes folded into the digest (FNV-1a, 64-bit);
 *   then a sleep of G ms (default 5).
 * --write-after K (K < N; needs --write): after request K, writes into the first 2 MiB of the
 * weights (less if the weights are smaller):
 *   memcpy  cuMemcpyHtoD_v2 of another pattern,
 *   memset  cuMemsetD32_v2 of 0xdeadbeef,
 *   d2d     cuMemcpyDtoD_v2 from the activation buffer (fewer bytes if it is smaller),
 *   kernel  fill_u32(weights, n, 7) then cuCtxSynchronize.
 * or, for the pitched writes, into one row per MiB of the weights (M rows, 1 MiB apart, so every
 * 2 MiB granule has a row in it):
 *   memcpy2d  cuMemcpy2D_v2 from host to device: row r (64 KiB, from byte 512 of MiB r) gets
 *             bytes [r * 64 KiB, (r + 1) * 64 KiB) of the memcpy pattern,
 *   memset2d  cuMemsetD2D32_v2 of 0x5eed5eed: row r is 1024 words from byte 256 of MiB r.
 * With --write-when-shared the write first waits (polling every 5 ms, at most 30 s, else
 * `ERROR wait-shared rc=0` and exit 2) until the shim reports shared bytes
 * (tandem_dedup_shared_bytes() > 0), so a test can be sure the write meets shared memory.
 * The later requests then see this replica's own write. A kernel write that fails (its launch or
 * the sync) ends the process with status 3 after the WRITE line: a poisoned context cannot go
 * on.
 *
 * Output (stdout):
 *   REQ <i> <w> <a>                          --trace only, per request; w = out[0], a = out[1]
 *                                            as 8 hex digits
 *   WRITE <kind> rc=<CUresult>               with --write-after, once
 *   DONE digest=<16 hex digits> requests=<N>
 *   SHIM shared_bytes=<v> merges=<v> cow=<v> the shim's tandem_dedup_shared_bytes(),
 *                                            tandem_dedup_merges(), tandem_dedup_cow_breaks() (0 each
 *                                            when the shim does not export it), read after the
 *                                            wait below, before anything is freed
 *   ERROR <call> rc=<CUresult>               any other failed driver call (then exit 2)
 * With --wait-file PATH, after DONE the replica polls every 10 ms until PATH exists (its memory
 * still allocated, so a test can look at the coordinator meanwhile), then prints SHIM, frees
 * everything and exits 0.
 * With --flood K (1 to 4096), just before the frees it loads a module of K noop kernels, f0 to
 * f<K-1>, launches each once, synchronizes and prints `FLOODED kernels=<K>`: K first launches, so
 * K FuncName reports from the shim, enough to fill the coordinator's socket while it is stopped.
 * With --linger-file PATH, after the frees it prints `FREED` and polls every 10 ms until PATH
 * exists before it exits (its session still open, so the coordinator sees the frees, not the exit).
 *
 * Exit status: 0 done; 2 a driver call failed (ERROR line); 3 the kernel write failed; 64 bad
 * command line.
 */
#define _GNU_SOURCE
#include "cuda_min.h"

#include <dlfcn.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EXIT_CUDA 2
#define EXIT_KERNEL_WRITE 3
#define EXIT_USAGE 64

#define MIB (1024ull * 1024ull)
#define MAX_FLOOD 4096
#define WRITE_BYTES (2ull * MIB)
#define OUT_BYTES 4096u
/* The pitched writes: one row per MiB of the weights. */
#define ROW_PITCH MIB
#define COPY2D_X 512u
#define COPY2D_WIDTH (64u * 1024u)
#define SET2D_X 256u
#define SET2D_WORDS 1024u

/* Runs a driver call; on failure prints `ERROR <name> rc=<n>` and exits 2. */
#define CK(name, call)                                                                             \
    do {                                                                                           \
        CUresult rc_ = (call);                                                                     \
        if (rc_ != CUDA_SUCCESS) {                                                                 \
            printf("ERROR %s rc=%d\n", name, rc_);                                                 \
            fflush(stdout);                                                                        \
            exit(EXIT_CUDA);                                                                       \
        }                                                                                          \
    } while (0)

static const char k_image[] = "tandem-fake-module v1\n"
                              "kernel sum_u32 20000 sum_u32\n"
                              "kernel fill_u32 20000 fill_u32\n";

typedef uint64_t (*u64_fn)(void);

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t fnv1a(uint64_t h, const void *data, size_t len)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static void sleep_ms(unsigned long ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* fill_u32(ptr, n, value) on the legacy stream. */
static CUresult fill(CUfunction f, CUdeviceptr ptr, unsigned n, unsigned value)
{
    void *params[3] = {&ptr, &n, &value};
    return cuLaunchKernel(f, 1, 1, 1, 256, 1, 1, 0, NULL, params, NULL);
}

/* sum_u32(out, in, n) on the legacy stream. */
static CUresult sum(CUfunction f, CUdeviceptr out, CUdeviceptr in, unsigned n)
{
    void *params[3] = {&out, &in, &n};
    return cuLaunchKernel(f, 1, 1, 1, 256, 1, 1, 0, NULL, params, NULL);
}

static uint64_t shim_stat(const char *name)
{
    u64_fn f = (u64_fn)dlsym(RTLD_DEFAULT, name);
    return f ? f() : 0;
}

/* --flood: K noop kernels f0 .. f<K-1>, each launched once, then a sync. */
static void flood(uint64_t k)
{
    static char image[32 + MAX_FLOOD * 32];
    size_t at = (size_t)snprintf(image, sizeof(image), "tandem-fake-module v1\n");
    for (uint64_t i = 0; i < k; i++)
        at += (size_t)snprintf(image + at, sizeof(image) - at, "kernel f%" PRIu64 " 0 noop\n", i);
    CUmodule mod;
    CK("cuModuleLoadData", cuModuleLoadData(&mod, image));
    for (uint64_t i = 0; i < k; i++) {
        char name[32];
        CUfunction f;
        snprintf(name, sizeof(name), "f%" PRIu64, i);
        CK("cuModuleGetFunction", cuModuleGetFunction(&f, mod, name));
        CK("cuLaunchKernel", cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
    }
    CK("cuCtxSynchronize", cuCtxSynchronize());
    CK("cuModuleUnload", cuModuleUnload(mod));
    printf("FLOODED kernels=%" PRIu64 "\n", k);
    fflush(stdout);
}

static int usage(void)
{
    fprintf(stderr, "usage: replica --weights-mib M --seed S --requests N [--gap-ms G] "
                    "[--act-mib A] [--write-after K --write "
                    "memcpy|memset|d2d|kernel|memcpy2d|memset2d] "
                    "[--wait-file PATH] [--flood K] [--linger-file PATH] [--trace]\n");
    return EXIT_USAGE;
}

/* A whole decimal number in [0, max], or -1. */
static int parse_u64(const char *s, uint64_t max, uint64_t *out)
{
    char *end;
    if (!s || !*s || *s == '-')
        return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end || v > max)
        return -1;
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    uint64_t weights_mib = 0, seed = 0, requests = 0, gap_ms = 5, act_mib = 4, write_after = 0;
    uint64_t flood_kernels = 0;
    int have_weights = 0, have_seed = 0, have_requests = 0, have_write_after = 0, trace = 0;
    int when_shared = 0;
    const char *write_kind = NULL, *wait_file = NULL, *linger_file = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--trace") == 0) {
            trace = 1;
            continue;
        }
        if (strcmp(a, "--write-when-shared") == 0) {
            when_shared = 1;
            continue;
        }
        if (!v)
            return usage();
        i++;
        int bad = 0;
        if (strcmp(a, "--weights-mib") == 0) {
            bad = parse_u64(v, 4096, &weights_mib) || weights_mib == 0;
            have_weights = 1;
        } else if (strcmp(a, "--seed") == 0) {
            bad = parse_u64(v, UINT64_MAX, &seed);
            have_seed = 1;
        } else if (strcmp(a, "--requests") == 0) {
            bad = parse_u64(v, 1000000000ull, &requests);
            have_requests = 1;
        } else if (strcmp(a, "--gap-ms") == 0) {
            bad = parse_u64(v, 3600000ull, &gap_ms);
        } else if (strcmp(a, "--act-mib") == 0) {
            bad = parse_u64(v, 4096, &act_mib) || act_mib == 0;
        } else if (strcmp(a, "--write-after") == 0) {
            bad = parse_u64(v, UINT64_MAX, &write_after);
            have_write_after = 1;
        } else if (strcmp(a, "--write") == 0) {
            write_kind = v;
            bad = strcmp(v, "memcpy") && strcmp(v, "memset") && strcmp(v, "d2d") &&
                  strcmp(v, "kernel") && strcmp(v, "memcpy2d") && strcmp(v, "memset2d");
        } else if (strcmp(a, "--wait-file") == 0) {
            wait_file = v;
        } else if (strcmp(a, "--flood") == 0) {
            bad = parse_u64(v, MAX_FLOOD, &flood_kernels) || flood_kernels == 0;
        } else if (strcmp(a, "--linger-file") == 0) {
            linger_file = v;
        } else {
            bad = 1;
        }
        if (bad)
            return usage();
    }
    if (!have_weights || !have_seed || !have_requests)
        return usage();
    if (have_write_after != (write_kind != NULL))
        return usage();
    if (have_write_after && write_after >= requests)
        return usage();
    if (when_shared && !have_write_after)
        return usage();

    const size_t w_bytes = (size_t)(weights_mib * MIB), a_bytes = (size_t)(act_mib * MIB);
    const unsigned n_w = (unsigned)(w_bytes / 4), n_act = (unsigned)(a_bytes / 4);

    /* The weights, from the seed. */
    uint32_t *host = malloc(w_bytes);
    if (!host) {
        fprintf(stderr, "replica: out of host memory\n");
        return EXIT_CUDA;
    }
    uint64_t rng = seed;
    for (size_t i = 0; i < n_w; i += 2) {
        uint64_t x = splitmix64(&rng);
        host[i] = (uint32_t)x;
        host[i + 1] = (uint32_t)(x >> 32);
    }

    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction f_sum, f_fill;
    CUdeviceptr weights, act, out;
    CK("cuInit", cuInit(0));
    CK("cuDeviceGet", cuDeviceGet(&dev, 0));
    CK("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain(&ctx, dev));
    CK("cuCtxSetCurrent", cuCtxSetCurrent(ctx));
    CK("cuModuleLoadData", cuModuleLoadData(&mod, k_image));
    CK("cuModuleGetFunction", cuModuleGetFunction(&f_sum, mod, "sum_u32"));
    CK("cuModuleGetFunction", cuModuleGetFunction(&f_fill, mod, "fill_u32"));
    CK("cuMemAlloc_v2", cuMemAlloc_v2(&weights, w_bytes));
    CK("cuMemAlloc_v2", cuMemAlloc_v2(&act, a_bytes));
    CK("cuMemAlloc_v2", cuMemAlloc_v2(&out, OUT_BYTES));
    CK("cuMemcpyHtoD_v2", cuMemcpyHtoD_v2(weights, host, w_bytes));

    uint64_t digest = 0xcbf29ce484222325ull;
    for (uint64_t i = 0; i < requests; i++) {
        uint32_t res[2];
        CK("cuLaunchKernel", fill(f_fill, act, n_act, (unsigned)(i + 1)));
        CK("cuLaunchKernel", sum(f_sum, out, weights, n_w));
        CK("cuLaunchKernel", sum(f_sum, out + 4, act, n_act));
        CK("cuMemcpyDtoH_v2", cuMemcpyDtoH_v2(res, out, sizeof(res)));
        digest = fnv1a(digest, res, sizeof(res));
        if (trace)
            printf("REQ %" PRIu64 " %08" PRIx32 " %08" PRIx32 "\n", i, res[0], res[1]);
        if (have_write_after && i == write_after) {
            for (int waited = 0; when_shared && shim_stat("tandem_dedup_shared_bytes") == 0;
                 waited += 5) {
                if (waited >= 30000) {
                    printf("ERROR wait-shared rc=0\n");
                    return 2;
                }
                usleep(5000);
            }
            size_t n = w_bytes < WRITE_BYTES ? w_bytes : WRITE_BYTES;
            CUresult rc;
            const char *call;
            if (strcmp(write_kind, "memcpy") == 0) {
                for (size_t k = 0; k < n / 4; k++)
                    host[k] = ((uint32_t)k * 0x9e3779b9u) ^ 0xa5a5a5a5u;
                call = "cuMemcpyHtoD_v2";
                rc = cuMemcpyHtoD_v2(weights, host, n);
            } else if (strcmp(write_kind, "memset") == 0) {
                call = "cuMemsetD32_v2";
                rc = cuMemsetD32_v2(weights, 0xdeadbeefu, n / 4);
            } else if (strcmp(write_kind, "memcpy2d") == 0) {
                size_t rows = w_bytes / ROW_PITCH;
                for (size_t k = 0; k < rows * COPY2D_WIDTH / 4; k++)
                    host[k] = ((uint32_t)k * 0x9e3779b9u) ^ 0xa5a5a5a5u;
                CUDA_MEMCPY2D c;
                memset(&c, 0, sizeof(c));
                c.srcMemoryType = CU_MEMORYTYPE_HOST;
                c.srcHost = host;
                c.srcPitch = COPY2D_WIDTH;
                c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
                c.dstDevice = weights;
                c.dstXInBytes = COPY2D_X;
                c.dstPitch = ROW_PITCH;
                c.WidthInBytes = COPY2D_WIDTH;
                c.Height = rows;
                call = "cuMemcpy2D_v2";
                rc = cuMemcpy2D_v2(&c);
            } else if (strcmp(write_kind, "memset2d") == 0) {
                call = "cuMemsetD2D32_v2";
                rc = cuMemsetD2D32_v2(weights + SET2D_X, ROW_PITCH, 0x5eed5eedu, SET2D_WORDS,
                                      w_bytes / ROW_PITCH);
            } else if (strcmp(write_kind, "d2d") == 0) {
                if (a_bytes < n)
                    n = a_bytes;
                call = "cuMemcpyDtoD_v2";
                rc = cuMemcpyDtoD_v2(weights, act, n);
            } else {
                call = "fill_u32";
                rc = fill(f_fill, weights, (unsigned)(n / 4), 7);
                if (rc == CUDA_SUCCESS) {
                    call = "cuCtxSynchronize";
                    rc = cuCtxSynchronize();
                }
            }
            printf("WRITE %s rc=%d\n", write_kind, rc);
            fflush(stdout);
            if (rc != CUDA_SUCCESS) {
                if (strcmp(write_kind, "kernel") == 0)
                    return EXIT_KERNEL_WRITE;
                printf("ERROR %s rc=%d\n", call, rc);
                fflush(stdout);
                return EXIT_CUDA;
            }
        }
        fflush(stdout);
        if (gap_ms)
            sleep_ms((unsigned long)gap_ms);
    }
    printf("DONE digest=%016" PRIx64 " requests=%" PRIu64 "\n", digest, requests);
    fflush(stdout);

    if (wait_file) {
        while (access(wait_file, F_OK) != 0)
            sleep_ms(10);
    }
    printf("SHIM shared_bytes=%" PRIu64 " merges=%" PRIu64 " cow=%" PRIu64 "\n",
           shim_stat("tandem_dedup_shared_bytes"), shim_stat("tandem_dedup_merges"),
           shim_stat("tandem_dedup_cow_breaks"));
    fflush(stdout);

    if (flood_kernels)
        flood(flood_kernels);
    CK("cuMemFree_v2", cuMemFree_v2(out));
    CK("cuMemFree_v2", cuMemFree_v2(act));
    CK("cuMemFree_v2", cuMemFree_v2(weights));
    if (linger_file) {
        printf("FREED\n");
        fflush(stdout);
        while (access(linger_file, F_OK) != 0)
            sleep_ms(10);
    }
    CK("cuModuleUnload", cuModuleUnload(mod));
    CK("cuDevicePrimaryCtxRelease_v2", cuDevicePrimaryCtxRelease_v2(dev));
    free(host);
    return 0;
}
