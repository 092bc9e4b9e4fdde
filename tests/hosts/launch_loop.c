/*
 * launch_loop: empty-kernel launches timed in C, for the launch-overhead
 * figure (scripts/gpu/interposition.py, scripts/gpu/prove stage 4).
 *
 * A Python launch loop costs about 5 us per launch, which hides a shim cost
 * of about 0.1 us. This host calls the driver API directly: it dlopen()s
 * libcuda.so.1, loads one module holding an empty kernel (PTX on a real GPU,
 * the fake driver's module text in tests), then times rounds of N
 * cuLaunchKernel calls on one stream followed by one cuStreamSynchronize.
 * With --sync-every B it also synchronises after every B launches, so the
 * launch queue never fills: the submit time is then the CPU cost of the
 * launches alone, not the GPU's pace pushing back through a full queue.
 * Run it with and without LD_PRELOAD=libtandem.so, in interleaved processes,
 * and compare the medians.
 *
 *   launch_loop [--count N] [--rounds R] [--warmup W] [--sync-every B]
 *               [--image ptx|fake|FILE]
 *
 * --image ptx (default): the PTX below, JIT-compiled by the driver;
 * fake: the fake driver's module format; FILE: that file's bytes (e.g. PTX
 * made on the GPU machine by `nvcc -ptx`; the kernel must be `tandem_empty`).
 *
 * Output, one line: RESULT {json} with, per round, the seconds spent in
 * cuLaunchKernel calls (submit: the time between synchronisations) and for
 * the whole round with its synchronisations (total), their medians, and the shim's kernel counter delta (null when no
 * shim is loaded). On a failed driver call: CUDA_ERROR <call> <code> <name>,
 * exit status 3. Needs only a C compiler: it is compiled against cuda_min.h
 * (cc -O2 -I tests/hosts tests/hosts/launch_loop.c -ldl).
 */
#define _GNU_SOURCE
#include "cuda_min.h"

#include <dlfcn.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EXIT_USAGE 2
#define EXIT_CUDA 3
#define MAX_ROUNDS 1000

static const char k_ptx[] = ".version 8.0\n"
                            ".target sm_80\n"
                            ".address_size 64\n"
                            ".visible .entry tandem_empty()\n"
                            "{\n"
                            "  ret;\n"
                            "}\n";

static const char k_fake[] = "tandem-fake-module v1\n"
                             "kernel tandem_empty 0 noop\n";

typedef CUresult (*fn_init)(unsigned int);
typedef CUresult (*fn_device_get)(CUdevice *, int);
typedef CUresult (*fn_ctx_retain)(CUcontext *, CUdevice);
typedef CUresult (*fn_ctx_set)(CUcontext);
typedef CUresult (*fn_module_load)(CUmodule *, const void *);
typedef CUresult (*fn_module_get)(CUfunction *, CUmodule, const char *);
typedef CUresult (*fn_stream_create)(CUstream *, unsigned int);
typedef CUresult (*fn_stream_sync)(CUstream);
typedef CUresult (*fn_launch)(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,
                              unsigned int, unsigned int, unsigned int, CUstream, void **,
                              void **);
typedef CUresult (*fn_error_name)(CUresult, const char **);
typedef uint64_t (*fn_u64)(void);

static fn_error_name g_error_name;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int check(const char *call, CUresult rc)
{
    const char *name = "?";
    if (rc == CUDA_SUCCESS)
        return 0;
    if (g_error_name)
        g_error_name(rc, &name);
    printf("CUDA_ERROR %s %d %s\n", call, rc, name ? name : "?");
    fflush(stdout);
    return 1;
}

static void *sym(void *lib, const char *name)
{
    void *p = dlsym(lib, name);
    if (!p) {
        printf("CUDA_ERROR dlsym(%s) -1 missing\n", name);
        fflush(stdout);
        exit(EXIT_CUDA);
    }
    return p;
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    long n;
    char *buf;
    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return NULL;
    }
    buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    if (buf)
        buf[n] = '\0';
    fclose(f);
    return buf;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *xs, int n)
{
    double s[MAX_ROUNDS];
    memcpy(s, xs, sizeof(double) * (size_t)n);
    qsort(s, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

static void print_list(const char *key, const double *xs, int n)
{
    printf("\"%s\": [", key);
    for (int i = 0; i < n; i++)
        printf("%s%.9f", i ? ", " : "", xs[i]);
    printf("]");
}

int main(int argc, char **argv)
{
    long count = 100000, rounds = 5, warmup = 2000, sync_every = 0;
    const char *image_arg = "ptx";
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v && strcmp(argv[i], "--count") == 0)
            count = atol(v);
        else if (v && strcmp(argv[i], "--rounds") == 0)
            rounds = atol(v);
        else if (v && strcmp(argv[i], "--warmup") == 0)
            warmup = atol(v);
        else if (v && strcmp(argv[i], "--sync-every") == 0)
            sync_every = atol(v);
        else if (v && strcmp(argv[i], "--image") == 0)
            image_arg = v;
        else {
            fprintf(stderr, "usage: launch_loop [--count N] [--rounds R] [--warmup W] "
                            "[--sync-every B] [--image ptx|fake|FILE]\n");
            return EXIT_USAGE;
        }
        i++;
    }
    if (count < 1 || rounds < 1 || rounds > MAX_ROUNDS || warmup < 0 || sync_every < 0) {
        fprintf(stderr, "launch_loop: --count >= 1, 1 <= --rounds <= %d, --warmup >= 0, "
                        "--sync-every >= 0\n",
                MAX_ROUNDS);
        return EXIT_USAGE;
    }
    const char *image = k_ptx;
    char *owned = NULL;
    if (strcmp(image_arg, "fake") == 0) {
        image = k_fake;
    } else if (strcmp(image_arg, "ptx") != 0) {
        owned = read_file(image_arg);
        if (!owned) {
            fprintf(stderr, "launch_loop: cannot read %s\n", image_arg);
            return EXIT_USAGE;
        }
        image = owned;
    }

    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!lib) {
        printf("CUDA_ERROR dlopen(libcuda.so.1) -1 %s\n", dlerror());
        return EXIT_CUDA;
    }
    g_error_name = (fn_error_name)dlsym(lib, "cuGetErrorName");
    fn_init init = (fn_init)sym(lib, "cuInit");
    fn_device_get device_get = (fn_device_get)sym(lib, "cuDeviceGet");
    fn_ctx_retain ctx_retain = (fn_ctx_retain)sym(lib, "cuDevicePrimaryCtxRetain");
    fn_ctx_set ctx_set = (fn_ctx_set)sym(lib, "cuCtxSetCurrent");
    fn_module_load module_load = (fn_module_load)sym(lib, "cuModuleLoadData");
    fn_module_get module_get = (fn_module_get)sym(lib, "cuModuleGetFunction");
    fn_stream_create stream_create = (fn_stream_create)sym(lib, "cuStreamCreate");
    fn_stream_sync stream_sync = (fn_stream_sync)sym(lib, "cuStreamSynchronize");
    fn_launch launch = (fn_launch)sym(lib, "cuLaunchKernel");
    fn_u64 shim_kernels = (fn_u64)dlsym(RTLD_DEFAULT, "tandem_kernels_launched");

    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction f;
    CUstream stream;
    if (check("cuInit", init(0)) || check("cuDeviceGet", device_get(&dev, 0)) ||
        check("cuDevicePrimaryCtxRetain", ctx_retain(&ctx, dev)) ||
        check("cuCtxSetCurrent", ctx_set(ctx)) ||
        check("cuModuleLoadData", module_load(&mod, image)) ||
        check("cuModuleGetFunction", module_get(&f, mod, "tandem_empty")) ||
        check("cuStreamCreate", stream_create(&stream, CU_STREAM_DEFAULT)))
        return EXIT_CUDA;

    for (long i = 0; i < warmup; i++)
        if (check("cuLaunchKernel", launch(f, 1, 1, 1, 1, 1, 1, 0, stream, NULL, NULL)))
            return EXIT_CUDA;
    if (check("cuStreamSynchronize", stream_sync(stream)))
        return EXIT_CUDA;

    double submit[MAX_ROUNDS], total[MAX_ROUNDS];
    uint64_t before = shim_kernels ? shim_kernels() : 0;
    for (long r = 0; r < rounds; r++) {
        double in_launches = 0;
        double t0 = now_s(), chunk = t0;
        for (long i = 0; i < count; i++) {
            if (check("cuLaunchKernel", launch(f, 1, 1, 1, 1, 1, 1, 0, stream, NULL, NULL)))
                return EXIT_CUDA;
            if (sync_every && (i + 1) % sync_every == 0 && i + 1 < count) {
                double t = now_s();
                in_launches += t - chunk;
                if (check("cuStreamSynchronize", stream_sync(stream)))
                    return EXIT_CUDA;
                chunk = now_s();
            }
        }
        double t1 = now_s();
        if (check("cuStreamSynchronize", stream_sync(stream)))
            return EXIT_CUDA;
        double t2 = now_s();
        submit[r] = in_launches + (t1 - chunk);
        total[r] = t2 - t0;
    }
    uint64_t after = shim_kernels ? shim_kernels() : 0;

    double ms = median(submit, (int)rounds), mt = median(total, (int)rounds);
    printf("RESULT {\"loop\": \"compiled\", \"count\": %ld, \"rounds\": %ld, \"warmup\": %ld, "
           "\"sync_every\": %ld, \"image\": \"%s\", ",
           count, rounds, warmup, sync_every, owned ? "file" : image_arg);
    print_list("submit_s", submit, (int)rounds);
    printf(", ");
    print_list("total_s", total, (int)rounds);
    printf(", \"submit_ns_per_launch\": %.3f, \"total_ns_per_launch\": %.3f, "
           "\"launches_per_s\": %.1f, ",
           ms * 1e9 / (double)count, mt * 1e9 / (double)count, (double)count / mt);
    if (shim_kernels)
        printf("\"shim_kernels\": %" PRIu64 "}\n", after - before);
    else
        printf("\"shim_kernels\": null}\n");
    fflush(stdout);
    free(owned);
    return 0;
}
