/* See workload.h. */
#define _GNU_SOURCE
#include "workload.h"

#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- slot table */

static struct wl_slot_info g_slots[WL_NSLOTS] = {
#define WL_SLOT_INFO(name, sym, ver, params) {#name, #sym, ver, NULL, 0},
    CUDA_MIN_FUNCS(WL_SLOT_INFO)
#undef WL_SLOT_INFO
};

/* Every hooked variant of the contract (tests/tandem-spec: "Hooked driver variants"). */
static const char *const g_contract_hooks[] = {
#define TANDEM_HOOKED(sym) sym,
#include "hooked_symbols.h"
#undef TANDEM_HOOKED
};
#define N_CONTRACT_HOOKS (sizeof(g_contract_hooks) / sizeof(g_contract_hooks[0]))

#define MAX_SYMS 256
static const char *g_syms[MAX_SYMS];
static size_t g_nsyms;
static uint64_t g_notes[MAX_SYMS];

#define MAX_DRVS 1024
static struct drv *g_drvs[MAX_DRVS];
static size_t g_ndrvs;
static pthread_mutex_t g_drv_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void add_sym(const char *s)
{
    for (size_t i = 0; i < g_nsyms; i++)
        if (strcmp(g_syms[i], s) == 0)
            return;
    if (g_nsyms == MAX_SYMS) {
        fprintf(stderr, "workload: too many symbols\n");
        abort();
    }
    g_syms[g_nsyms++] = s;
}

static void init_tables(void)
{
#define WL_PT_INFO(name, sym, ver, params)                                                          \
    g_slots[SLOT_##name].pt_sym = #sym;                                                            \
    g_slots[SLOT_##name].pt_ver = ver;
    CUDA_MIN_PT_FUNCS(WL_PT_INFO)
#undef WL_PT_INFO
    for (size_t i = 0; i < N_CONTRACT_HOOKS; i++)
        add_sym(g_contract_hooks[i]);
    for (int s = 0; s < WL_NSLOTS; s++) {
        add_sym(g_slots[s].sym);
        if (g_slots[s].pt_sym)
            add_sym(g_slots[s].pt_sym);
    }
}

static void ensure_init(void) { pthread_once(&g_once, init_tables); }

const struct wl_slot_info *wl_slot(int slot)
{
    ensure_init();
    return &g_slots[slot];
}

size_t wl_nsyms(void)
{
    ensure_init();
    return g_nsyms;
}

const char *wl_sym(size_t i)
{
    ensure_init();
    return g_syms[i];
}

int wl_is_contract_hook(const char *sym)
{
    for (size_t i = 0; i < N_CONTRACT_HOOKS; i++)
        if (strcmp(g_contract_hooks[i], sym) == 0)
            return 1;
    return 0;
}

static size_t sym_index(const char *sym)
{
    ensure_init();
    for (size_t i = 0; i < g_nsyms; i++)
        if (strcmp(g_syms[i], sym) == 0)
            return i;
    fprintf(stderr, "workload: untracked symbol %s\n", sym);
    abort();
}

void wl_note(const char *sym, uint64_t n)
{
    __atomic_fetch_add(&g_notes[sym_index(sym)], n, __ATOMIC_RELAXED);
}

void wl_drv_init(struct drv *d, const char *label)
{
    ensure_init();
    memset(d, 0, sizeof(*d));
    d->label = label;
    pthread_mutex_lock(&g_drv_lock);
    if (g_ndrvs == MAX_DRVS) {
        fprintf(stderr, "workload: too many drv\n");
        abort();
    }
    g_drvs[g_ndrvs++] = d;
    pthread_mutex_unlock(&g_drv_lock);
}

const char *wl_object_of(const void *p, const char **sym)
{
    Dl_info info;
    if (sym)
        *sym = "?";
    if (!p)
        return "null";
    if (!dladdr(p, &info) || !info.dli_fname)
        return "?";
    if (sym && info.dli_sname && info.dli_saddr == p)
        *sym = info.dli_sname;
    const char *slash = strrchr(info.dli_fname, '/');
    return slash ? slash + 1 : info.dli_fname;
}

void wl_print_resolution(const struct drv *d)
{
    for (int s = 0; s < WL_NSLOTS; s++) {
        const char *sym;
        const char *obj = wl_object_of(d->fn[s], &sym);
        printf("RESOLVE %s via=%s as=%s obj=%s sym=%s\n", g_slots[s].name, d->label,
               d->as[s] ? d->as[s] : "-", obj, sym);
    }
}

/* ------------------------------------------------------- fake / shim access */

typedef uint64_t (*count_fn)(const char *);
typedef uint64_t (*kernels_fn)(void);

static count_fn fake_calls_fn(void)
{
    static count_fn cached;
    count_fn f = __atomic_load_n(&cached, __ATOMIC_ACQUIRE);
    if (f)
        return f;
    /* Only look at an already loaded driver: a host that has not loaded it yet
     * has made no calls into it. */
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!h)
        return NULL;
    f = (count_fn)dlsym(h, "fakecuda_calls");
    __atomic_store_n(&cached, f, __ATOMIC_RELEASE);
    return f;
}

static kernels_fn fake_kernels_fn(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!h)
        return NULL;
    return (kernels_fn)dlsym(h, "fakecuda_kernels_executed");
}

int wl_have_fake(void) { return fake_calls_fn() != NULL; }

static count_fn hook_fn(void)
{
    return (count_fn)dlsym(RTLD_DEFAULT, "tandem_hook_count");
}

int wl_have_shim(void) { return hook_fn() != NULL; }

static count_fn shim_own_fn(void)
{
    return (count_fn)dlsym(RTLD_DEFAULT, "tandem_driver_calls");
}

static kernels_fn shim_kernels_fn(void)
{
    return (kernels_fn)dlsym(RTLD_DEFAULT, "tandem_kernels_launched");
}

uint64_t wl_hook_count(const char *sym)
{
    count_fn f = hook_fn();
    return f ? f(sym) : UINT64_MAX;
}

void wl_snap_take(struct wl_snap *s)
{
    size_t n = wl_nsyms();
    count_fn fake = fake_calls_fn();
    count_fn hook = hook_fn();
    count_fn shim_own = shim_own_fn();
    kernels_fn kern = fake_kernels_fn();
    kernels_fn shim_kern = shim_kernels_fn();
    s->fake = calloc(n, sizeof(uint64_t));
    s->hook = calloc(n, sizeof(uint64_t));
    s->own = calloc(n, sizeof(uint64_t));
    s->shim_own = calloc(n, sizeof(uint64_t));
    if (!s->fake || !s->hook || !s->own || !s->shim_own)
        abort();
    for (size_t i = 0; i < n; i++) {
        s->fake[i] = fake ? fake(g_syms[i]) : 0;
        s->hook[i] = hook ? hook(g_syms[i]) : UINT64_MAX;
        uint64_t so = shim_own ? shim_own(g_syms[i]) : 0;
        s->shim_own[i] = so == UINT64_MAX ? 0 : so;
        s->own[i] = __atomic_load_n(&g_notes[i], __ATOMIC_RELAXED);
    }
    pthread_mutex_lock(&g_drv_lock);
    for (size_t k = 0; k < g_ndrvs; k++) {
        const struct drv *d = g_drvs[k];
        for (int slot = 0; slot < WL_NSLOTS; slot++) {
            uint64_t c = __atomic_load_n(&d->calls[slot], __ATOMIC_RELAXED);
            if (c)
                s->own[sym_index(d->as[slot] ? d->as[slot] : g_slots[slot].sym)] += c;
        }
    }
    pthread_mutex_unlock(&g_drv_lock);
    s->kernels = kern ? kern() : 0;
    s->shim_kernels = shim_kern ? shim_kern() : UINT64_MAX;
}

void wl_snap_free(struct wl_snap *s)
{
    free(s->fake);
    free(s->hook);
    free(s->own);
    free(s->shim_own);
    memset(s, 0, sizeof(*s));
}

static void print_counts(const char *what, const char *label, const uint64_t *now,
                         const uint64_t *from, int skip_max)
{
    printf("%s %s", what, label);
    for (size_t i = 0; i < g_nsyms; i++) {
        if (skip_max && (now[i] == UINT64_MAX || from[i] == UINT64_MAX))
            continue;
        uint64_t d = now[i] - from[i];
        if (d)
            printf(" %s=%" PRIu64, g_syms[i], d);
    }
    printf("\n");
}

int wl_check(const char *label, const struct wl_snap *from, const struct wl_snap *base,
             uint64_t expected_kernels)
{
    struct wl_snap now;
    int bad = 0;
    int fake = wl_have_fake();
    int shim = wl_have_shim();
    wl_snap_take(&now);
    printf("CHECK %s shim=%d fake=%d\n", label, shim, fake);
    print_counts("OWN", label, now.own, from->own, 0);
    if (fake)
        print_counts("FAKE", label, now.fake, from->fake, 0);
    if (shim) {
        print_counts("HOOK", label, now.hook, from->hook, 1);
        print_counts("SHIMOWN", label, now.shim_own, from->shim_own, 0);
        /* Every tracked symbol the shim counts (the contract's list, plus any
         * extra it declares through tandem_hook_count). */
        printf("HOOKSET %s", label);
        for (size_t i = 0; i < g_nsyms; i++)
            if (now.hook[i] != UINT64_MAX)
                printf(" %s", g_syms[i]);
        printf("\n");
    }
    for (size_t i = 0; i < g_nsyms; i++) {
        const char *s = g_syms[i];
        uint64_t own = now.own[i] - from->own[i];
        uint64_t shim_own = now.shim_own[i] - from->shim_own[i];
        if (fake) {
            uint64_t f = now.fake[i] - from->fake[i];
            if (f != own + shim_own) {
                printf("MISMATCH %s own-vs-fake %s own=%" PRIu64 " shim_own=%" PRIu64
                       " fake=%" PRIu64 "\n",
                       label, s, own, shim_own, f);
                bad++;
            }
        }
        if (!shim)
            continue;
        if (now.hook[i] == UINT64_MAX) {
            if (wl_is_contract_hook(s)) {
                printf("MISMATCH %s unhooked %s\n", label, s);
                bad++;
            }
            continue;
        }
        uint64_t h = now.hook[i] - (from->hook[i] == UINT64_MAX ? 0 : from->hook[i]);
        if (h != own) {
            printf("MISMATCH %s own-vs-hook %s own=%" PRIu64 " hook=%" PRIu64 "\n", label, s, own,
                   h);
            bad++;
        }
        if (fake) {
            uint64_t hb = now.hook[i] - (base->hook[i] == UINT64_MAX ? 0 : base->hook[i]);
            hb += now.shim_own[i] - base->shim_own[i];
            uint64_t fb = now.fake[i] - base->fake[i];
            if (hb != fb) {
                printf("MISMATCH %s hook-vs-fake %s hook=%" PRIu64 " fake=%" PRIu64 "\n", label,
                       s, hb, fb);
                bad++;
            }
        }
    }
    if (fake) {
        uint64_t k = now.kernels - from->kernels;
        printf("KERNELS %s %" PRIu64 " expected %" PRIu64 "\n", label, k, expected_kernels);
        if (k != expected_kernels) {
            printf("MISMATCH %s kernels executed=%" PRIu64 " expected=%" PRIu64 "\n", label, k,
                   expected_kernels);
            bad++;
        }
    }
    if (shim && now.shim_kernels != UINT64_MAX && from->shim_kernels != UINT64_MAX) {
        /* The shim's own kernel count: what CUPTI would be compared with on a GPU. */
        uint64_t k = now.shim_kernels - from->shim_kernels;
        printf("SHIMKERNELS %s %" PRIu64 " expected %" PRIu64 "\n", label, k, expected_kernels);
        if (k != expected_kernels) {
            printf("MISMATCH %s shim kernels launched=%" PRIu64 " expected=%" PRIu64 "\n", label,
                   k, expected_kernels);
            bad++;
        }
    }
    wl_snap_free(&now);
    fflush(stdout);
    return bad;
}

/* ------------------------------------------------------------------ workload */

#define CALL(d, name, ...)                                                                         \
    (__atomic_fetch_add(&(d)->calls[SLOT_##name], 1, __ATOMIC_RELAXED),                            \
     ((PFN_##name)(d)->fn[SLOT_##name])(__VA_ARGS__))

#define CK(d, name, ...)                                                                           \
    do {                                                                                           \
        CUresult rc_ = CALL(d, name, __VA_ARGS__);                                                 \
        if (rc_ != CUDA_SUCCESS) {                                                                 \
            printf("CUDA_ERROR %s %d (line %d)\n", #name, rc_, __LINE__);                          \
            fflush(stdout);                                                                        \
            return WL_EXIT_CUDA;                                                                   \
        }                                                                                          \
    } while (0)

#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            printf("DATA_ERROR " __VA_ARGS__);                                                     \
            printf(" (line %d)\n", __LINE__);                                                      \
            fflush(stdout);                                                                        \
            return WL_EXIT_CHECK;                                                                  \
        }                                                                                          \
    } while (0)

static const char k_module[] = "tandem-fake-module v1\n"
                               "kernel add_u32 1000 add_u32\n"
                               "kernel fill_u32 1000 fill_u32\n"
                               "kernel noop 0 noop\n";

struct kargs {
    CUdeviceptr p;
    unsigned n;
    unsigned v;
    void *params[3];
};

static void **kp(struct kargs *k, CUdeviceptr p, unsigned n, unsigned v)
{
    k->p = p;
    k->n = n;
    k->v = v;
    k->params[0] = &k->p;
    k->params[1] = &k->n;
    k->params[2] = &k->v;
    return k->params;
}

static uint64_t fnv(uint64_t h, const void *data, size_t len)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

int wl_preinit_check(struct drv *d)
{
    size_t fr = 0, tot = 0;
    CUresult rc = CALL(d, cuMemGetInfo, &fr, &tot);
    if (rc != CUDA_ERROR_NOT_INITIALIZED) {
        printf("CUDA_ERROR cuMemGetInfo.before.cuInit %d (expected %d)\n", rc,
               CUDA_ERROR_NOT_INITIALIZED);
        fflush(stdout);
        return rc == CUDA_SUCCESS ? -1 : rc;
    }
    return 0;
}

#define GRID (WL_ELEMS / 256u)

static int launch(struct drv *d, CUfunction f, CUstream s, CUdeviceptr p, unsigned n, unsigned v)
{
    struct kargs k;
    CK(d, cuLaunchKernel, f, GRID, 1, 1, 256, 1, 1, 0, s, kp(&k, p, n, v), NULL);
    return 0;
}

int wl_run(struct drv *d, uint32_t seed, uint64_t *checksum)
{
    const unsigned n = WL_ELEMS;
    const size_t bytes = n * sizeof(uint32_t);
    static __thread uint32_t h1[WL_ELEMS], h2[WL_ELEMS], out[2 * WL_ELEMS];
    unsigned char mem[256];
    uint64_t sum = 0xcbf29ce484222325ull;
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction f_add, f_fill, f_noop;
    CUstream s;
    CUdeviceptr a, b, c, pitched, ad, pd, va;
    size_t pitch = 0, fr = 0, tot = 0, gran = 0;
    int version = 0, rc;
    struct kargs k1, k2, k3, g1, g2, g3, c1, c2;

    for (unsigned i = 0; i < n; i++) {
        h1[i] = (i * 2654435761u) ^ seed;
        h2[i] = i * 40503u + seed;
    }

    CK(d, cuInit, 0);
    CK(d, cuDriverGetVersion, &version);
    EXPECT(version >= 12000, "driver version %d", version);
    CK(d, cuDeviceGet, &dev, 0);
    CK(d, cuDevicePrimaryCtxRetain, &ctx, dev);
    CK(d, cuCtxSetCurrent, ctx);
    CK(d, cuModuleLoadData, &mod, k_module);
    CK(d, cuModuleGetFunction, &f_add, mod, "add_u32");
    CK(d, cuModuleGetFunction, &f_fill, mod, "fill_u32");
    CK(d, cuModuleGetFunction, &f_noop, mod, "noop");
    CK(d, cuStreamCreate, &s, CU_STREAM_DEFAULT);

    /* Allocations and copies. */
    CK(d, cuMemAlloc, &a, bytes);
    CK(d, cuMemAlloc, &b, bytes);
    CK(d, cuMemAlloc, &c, sizeof(mem));
    CK(d, cuMemAllocPitch, &pitched, &pitch, 256, 4, 4);
    EXPECT(pitch >= 256, "pitch %zu", pitch);
    CK(d, cuMemcpyHtoD, a, h1, bytes);
    CK(d, cuMemcpyHtoDAsync, b, h2, bytes, s);

    /* The three direct launch entry points: a += 3, b += 5, a += 7. */
    CK(d, cuLaunchKernel, f_add, GRID, 1, 1, 256, 1, 1, 0, s, kp(&k1, a, n, 3), NULL);
    CUlaunchConfig cfg = {GRID, 1, 1, 256, 1, 1, 0, s, NULL, 0};
    CK(d, cuLaunchKernelEx, &cfg, f_add, kp(&k2, b, n, 5), NULL);
    CK(d, cuLaunchCooperativeKernel, f_add, GRID, 1, 1, 256, 1, 1, 0, s, kp(&k3, a, n, 7));

    /* A graph of three kernels (a += 11, b += 13, noop), launched twice. */
    CUgraph g;
    CUgraphExec ge;
    CUgraphNode nodes[3];
    CK(d, cuGraphCreate, &g, 0);
    CUDA_KERNEL_NODE_PARAMS np;
    memset(&np, 0, sizeof(np));
    np.gridDimX = GRID;
    np.gridDimY = np.gridDimZ = 1;
    np.blockDimX = 256;
    np.blockDimY = np.blockDimZ = 1;
    np.func = f_add;
    np.kernelParams = kp(&g1, a, n, 11);
    CK(d, cuGraphAddKernelNode, &nodes[0], g, NULL, 0, &np);
    np.kernelParams = kp(&g2, b, n, 13);
    CK(d, cuGraphAddKernelNode, &nodes[1], g, &nodes[0], 1, &np);
    np.func = f_noop;
    np.kernelParams = kp(&g3, a, 0, 0);
    CK(d, cuGraphAddKernelNode, &nodes[2], g, &nodes[1], 1, &np);
    CK(d, cuGraphInstantiateWithFlags, &ge, g, 0);
    CK(d, cuGraphLaunch, ge, s);
    CK(d, cuGraphLaunch, ge, s);

    /* Stream capture: two launches recorded into a graph (they do not run
     * now: a += 17, b += 19 happen only when the graph is launched, twice). */
    CUgraph cg;
    CUgraphExec cge;
    CK(d, cuStreamBeginCapture, s, CU_STREAM_CAPTURE_MODE_GLOBAL);
    CK(d, cuLaunchKernel, f_add, GRID, 1, 1, 256, 1, 1, 0, s, kp(&c1, a, n, 17), NULL);
    CK(d, cuLaunchKernelEx, &cfg, f_add, kp(&c2, b, n, 19), NULL);
    CK(d, cuStreamEndCapture, s, &cg);
    CK(d, cuGraphInstantiateWithFlags, &cge, cg, 0);
    CK(d, cuGraphLaunch, cge, s);
    CK(d, cuGraphLaunch, cge, s);

    /* Events around a noop kernel. */
    CUevent e0, e1;
    float ms = -1.0f;
    CK(d, cuEventCreate, &e0, CU_EVENT_DEFAULT);
    CK(d, cuEventCreate, &e1, CU_EVENT_DEFAULT);
    CK(d, cuEventRecord, e0, s);
    if ((rc = launch(d, f_noop, s, a, 0, 0)))
        return rc;
    CK(d, cuEventRecord, e1, s);
    CK(d, cuEventSynchronize, e1);
    CK(d, cuEventQuery, e1);
    CK(d, cuEventElapsedTime, &ms, e0, e1);
    EXPECT(ms >= 0.0f, "elapsed %f ms", (double)ms);

    /* Memsets, synchronous and asynchronous, into one 256-byte buffer. */
    CK(d, cuMemsetD8, c, 0xab, 64);
    CK(d, cuMemsetD16, c + 64, 0xbeef, 32);
    CK(d, cuMemsetD32, c + 128, 0xdeadbeefu, 16);
    CK(d, cuMemsetD8Async, c + 192, 0x11, 16, s);
    CK(d, cuMemsetD16Async, c + 208, 0x2233, 8, s);
    CK(d, cuMemsetD32Async, c + 224, 0x44556677u, 8, s);

    /* Stream query (may still be busy) then sync; then work on stream 0
     * (legacy or per-thread default stream, depending on the variant). */
    rc = CALL(d, cuStreamQuery, s);
    EXPECT(rc == CUDA_SUCCESS || rc == CUDA_ERROR_NOT_READY, "cuStreamQuery -> %d", rc);
    CK(d, cuStreamSynchronize, s);
    CK(d, cuStreamQuery, s);
    if ((rc = launch(d, f_add, NULL, a, n, 1)))
        return rc;
    CK(d, cuStreamSynchronize, NULL);
    CK(d, cuCtxSynchronize);

    /* VMM: create, reserve, map, set access, use, unmap, release. */
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    CK(d, cuMemGetAllocationGranularity, &gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    EXPECT(gran >= 2 * bytes, "granularity %zu", gran);
    CUmemGenericAllocationHandle mh;
    CK(d, cuMemCreate, &mh, gran, &prop, 0);
    CK(d, cuMemAddressReserve, &va, gran, 0, 0, 0);
    CK(d, cuMemMap, va, gran, 0, mh, 0);
    CUmemAccessDesc acc;
    memset(&acc, 0, sizeof(acc));
    acc.location = prop.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CK(d, cuMemSetAccess, va, gran, &acc, 1);
    CK(d, cuMemcpyHtoD, va, h1, bytes);
    if ((rc = launch(d, f_add, s, va, n, 100)))
        return rc;
    {
        struct kargs kf;
        CK(d, cuLaunchKernel, f_fill, GRID, 1, 1, 256, 1, 1, 0, s, kp(&kf, va + bytes, n, 0x5a5a5a5au),
           NULL);
    }
    CK(d, cuStreamSynchronize, s);
    CK(d, cuMemcpyDtoH, out, va, 2 * bytes);
    for (unsigned i = 0; i < n; i++) {
        EXPECT(out[i] == h1[i] + 100u, "vmm[%u] = %u, want %u", i, out[i], h1[i] + 100u);
        EXPECT(out[n + i] == 0x5a5a5a5au, "vmm[%u] = %u", n + i, out[n + i]);
    }
    sum = fnv(sum, out, 2 * bytes);
    CK(d, cuMemUnmap, va, gran);
    CK(d, cuMemRelease, mh);
    CK(d, cuMemAddressFree, va, gran);

    /* Stream-ordered allocations: fill + add into an async allocation, a
     * memset into one from the default pool. */
    CUmemoryPool pool;
    CK(d, cuMemAllocAsync, &ad, bytes, s);
    if ((rc = launch(d, f_fill, s, ad, n, seed * 7u)))
        return rc;
    if ((rc = launch(d, f_add, s, ad, n, 1)))
        return rc;
    CK(d, cuDeviceGetDefaultMemPool, &pool, dev);
    CK(d, cuMemAllocFromPoolAsync, &pd, bytes, pool, s);
    CK(d, cuMemsetD32Async, pd, 0x01020304u, n, s);
    CK(d, cuStreamSynchronize, s);
    CK(d, cuMemcpyDtoH, out, ad, bytes);
    CK(d, cuMemcpyDtoH, out + n, pd, bytes);
    for (unsigned i = 0; i < n; i++) {
        EXPECT(out[i] == seed * 7u + 1u, "async[%u] = %u", i, out[i]);
        EXPECT(out[n + i] == 0x01020304u, "pool[%u] = %u", i, out[n + i]);
    }
    sum = fnv(sum, out, 2 * bytes);
    CK(d, cuMemFreeAsync, ad, s);
    CK(d, cuMemFreeAsync, pd, s);
    CK(d, cuStreamSynchronize, s);

    /* Memory info. */
    CK(d, cuMemGetInfo, &fr, &tot);
    EXPECT(tot > 0 && fr <= tot, "cuMemGetInfo free=%zu total=%zu", fr, tot);

    /* Results: a = h1 + 3 + 7 + 2*11 + 1 + 2*17, b = h2 + 5 + 2*13 + 2*19, the memsets. */
    CK(d, cuMemcpyDtoH, out, a, bytes);
    CK(d, cuMemcpyDtoH, out + n, b, bytes);
    CK(d, cuMemcpyDtoH, mem, c, sizeof(mem));
    for (unsigned i = 0; i < n; i++) {
        EXPECT(out[i] == h1[i] + 67u, "a[%u] = %u, want %u", i, out[i], h1[i] + 67u);
        EXPECT(out[n + i] == h2[i] + 69u, "b[%u] = %u, want %u", i, out[n + i], h2[i] + 69u);
    }
    for (unsigned i = 0; i < sizeof(mem); i++) {
        unsigned want;
        if (i < 64)
            want = 0xab;
        else if (i < 128)
            want = (i % 2) ? 0xbe : 0xef;
        else if (i < 192)
            want = ((0xdeadbeefu >> (8 * (i % 4))) & 0xff);
        else if (i < 208)
            want = 0x11;
        else if (i < 224)
            want = (i % 2) ? 0x22 : 0x33;
        else
            want = ((0x44556677u >> (8 * (i % 4))) & 0xff);
        EXPECT(mem[i] == want, "memset byte %u = %#x, want %#x", i, mem[i], want);
    }
    sum = fnv(sum, out, 2 * bytes);
    sum = fnv(sum, mem, sizeof(mem));

    /* Teardown. */
    CK(d, cuEventDestroy, e0);
    CK(d, cuEventDestroy, e1);
    CK(d, cuGraphExecDestroy, ge);
    CK(d, cuGraphDestroy, g);
    CK(d, cuGraphExecDestroy, cge);
    CK(d, cuGraphDestroy, cg);
    CK(d, cuMemFree, a);
    CK(d, cuMemFree, b);
    CK(d, cuMemFree, c);
    CK(d, cuMemFree, pitched);
    CK(d, cuStreamDestroy, s);
    CK(d, cuModuleUnload, mod);
    CK(d, cuDevicePrimaryCtxRelease, dev);
    *checksum = sum;
    return WL_EXIT_OK;
}

int wl_check_zero_hooks(const char *label, const struct wl_snap *s)
{
    int bad = 0;
    if (!wl_have_shim())
        return 0;
    for (size_t i = 0; i < g_nsyms; i++) {
        if (s->hook[i] != UINT64_MAX && s->hook[i] != 0) {
            printf("MISMATCH %s nonzero-at-start %s hook=%" PRIu64 "\n", label, g_syms[i],
                   s->hook[i]);
            bad++;
        }
    }
    fflush(stdout);
    return bad;
}

int wl_main_run(struct drv *d, const struct wl_snap *start)
{
    uint64_t sum = 0;
    int bad = wl_check_zero_hooks("start", start);
    int rc = wl_preinit_check(d);
    if (rc)
        return WL_EXIT_CUDA;
    wl_print_resolution(d);
    rc = wl_run(d, 1, &sum);
    if (rc)
        return rc;
    printf("RESULT %016" PRIx64 "\n", sum);
    bad += wl_check("main", start, start, WL_KERNELS_PER_RUN);
    printf("DONE mismatches=%d\n", bad);
    fflush(stdout);
    return bad ? WL_EXIT_CHECK : WL_EXIT_OK;
}
