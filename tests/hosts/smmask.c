/*
 * smmask: one kernel on the fake driver's shared SM device (FAKECUDA_SHARED_DEVICE with
 * FAKECUDA_SHARED_SMS=1), optionally kept off some SMs by a TPC mask this host writes into
 * the launch's descriptor from the driver's launch callback, as tandem's shim is to do for a
 * training job while inference is active (issue 23; the mechanism of libsmctrl).
 *
 *   smmask [--blocks B] [--us U] [--off-tpcs K] [--delay-us D]
 *
 * With --off-tpcs K > 0 it takes the callback table from cuGetExportTable, subscribes, enables
 * the descriptor callback (domain 0xb, id 1) and, in it, disables TPCs 0..K-1 (the Hopper
 * layout, descriptor version 0x40 and later; any other version is left alone and reported).
 * Then it sleeps D us (default 0) and launches one kernel of B blocks (default 132) lasting U us
 * (default 20000), and exits without waiting for it: its placement on the shared device is
 * decided at the launch, and the device file keeps it for the next process.
 *
 * Output (stdout):
 *   LAUNCH t_ns=<CLOCK_MONOTONIC before the launch> start_ns=<s> end_ns=<e> sms=<count>
 *          first_sm=<lowest SM> masked=<0|1> version=<descriptor version seen, 0: none>
 *   ERROR <call> rc=<CUresult>   a failed driver call (exit 2); 64: bad command line
 */
#define _GNU_SOURCE
#include "cuda_min.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

CUresult cuGetExportTable(const void **table, const void *id);
int fakecuda_last_kernel(uint64_t *start_ns, uint64_t *end_ns);
int fakecuda_last_kernel_sms(uint64_t out[4]);

static const unsigned char CALLBACK_TABLE[16] = {0x2c, 0x8e, 0x0a, 0xd8, 0x07, 0x10, 0xab, 0x4e,
                                                 0x90, 0xdd, 0x54, 0x71, 0x9f, 0xe5, 0xf7, 0x4b};
static unsigned g_off_tpcs;
static int g_masked, g_version;

typedef void (*callback_fn)(void *, int, int, const void *);
typedef int (*subscribe_fn)(uint32_t *, callback_fn, void *);
typedef int (*enable_fn)(uint32_t, uint32_t, int, int);

static void mask_callback(void *user, int domain, int cbid, const void *params)
{
    (void)user;
    if (domain != 0xb || cbid != 1 || !params || *(const uint32_t *)params < 5 * 8)
        return;
    unsigned char *d = ((unsigned char *const *)params)[4];
    if (!d)
        return;
    g_version = d[72];
    if (g_version < 0x40)
        return;
    uint32_t words[4] = {0, 0, 0, 0};
    for (unsigned k = 0; k < g_off_tpcs && k < 128; k++)
        words[k / 32] |= 1u << (k % 32);
    memcpy(d + 304, words, sizeof words);
    uint32_t w0;
    memcpy(&w0, d, 4);
    w0 |= 0x80000000u;
    memcpy(d, &w0, 4);
    g_masked = 1;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#define CHECK(call)                                                                               \
    do {                                                                                          \
        CUresult rc_ = (call);                                                                    \
        if (rc_ != CUDA_SUCCESS) {                                                                \
            printf("ERROR %s rc=%d\n", #call, rc_);                                               \
            return 2;                                                                             \
        }                                                                                         \
    } while (0)

int main(int argc, char **argv)
{
    unsigned blocks = 132, us = 20000, delay_us = 0;
    for (int i = 1; i < argc; i++) {
        unsigned *dst = NULL;
        if (!strcmp(argv[i], "--blocks"))
            dst = &blocks;
        else if (!strcmp(argv[i], "--us"))
            dst = &us;
        else if (!strcmp(argv[i], "--off-tpcs"))
            dst = &g_off_tpcs;
        else if (!strcmp(argv[i], "--delay-us"))
            dst = &delay_us;
        if (!dst || i + 1 >= argc) {
            fprintf(stderr, "usage: smmask [--blocks B] [--us U] [--off-tpcs K] [--delay-us D]\n");
            return 64;
        }
        *dst = (unsigned)strtoul(argv[++i], NULL, 10);
    }
    CHECK(cuInit(0));
    CUcontext ctx;
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    if (g_off_tpcs > 0) {
        const void *table = NULL;
        CHECK(cuGetExportTable(&table, CALLBACK_TABLE));
        const uintptr_t *entries = table;
        uint32_t handle = 0;
        CHECK(((subscribe_fn)entries[3])(&handle, mask_callback, NULL));
        CHECK(((enable_fn)entries[6])(1, handle, 0xb, 1));
    }
    char image[128];
    snprintf(image, sizeof image, "tandem-fake-module v1\nkernel k %llu noop\n",
             (unsigned long long)us * 1000ull);
    CUmodule module;
    CUfunction f;
    CHECK(cuModuleLoadData(&module, image));
    CHECK(cuModuleGetFunction(&f, module, "k"));
    if (delay_us)
        usleep(delay_us);
    uint64_t t = now_ns();
    CHECK(cuLaunchKernel(f, blocks, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL));
    uint64_t start = 0, end = 0, sms[4] = {0, 0, 0, 0};
    fakecuda_last_kernel(&start, &end);
    int n = fakecuda_last_kernel_sms(sms);
    int first = -1;
    for (int sm = 0; sm < 256 && first < 0; sm++)
        if (sms[sm / 64] >> (sm % 64) & 1)
            first = sm;
    printf("LAUNCH t_ns=%llu start_ns=%llu end_ns=%llu sms=%d first_sm=%d masked=%d version=%d\n",
           (unsigned long long)t, (unsigned long long)start, (unsigned long long)end, n, first,
           g_masked, g_version);
    return 0;
}
