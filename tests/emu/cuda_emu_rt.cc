/*
 * cuda_emu_rt.cc - the emulated CUDA runtime (see cuda_emu_rt.h) and, in the
 * same translation unit, kernels/kern_cuda.cu compiled against it: its C
 * ABI becomes the table dc_kern_cuda_emu_ops.
 */
#include "cuda_emu.h"

#include <execinfo.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <mutex>
#include <set>

#include "cuda_emu_rt.h"

namespace {

constexpr size_t ARENA = (size_t)8 << 30; /* reserved, committed on use */
constexpr size_t ALIGN = 256;

uint8_t *g_base;
size_t g_top;                     /* high-water mark (bytes ever handed out) */
std::map<size_t, size_t> g_free;  /* offset -> length, coalesced */
std::map<size_t, size_t> g_used;  /* offset -> length */
size_t g_live;
std::recursive_mutex g_gate;      /* held while the arena is open */
int g_depth;                      /* nesting of dc_emu_dev_enter */
const char *g_what = "";
std::atomic<uint64_t> g_h2d, g_d2h, g_launches, g_h2d_locked;
std::map<uintptr_t, size_t> g_locked; /* page-locked host ranges: start -> length */
struct sigaction g_old_segv;

/* per-thread counters: a receiver thread's own PCIe bytes */
struct pcie_slot {
    std::atomic<pthread_t> th;
    std::atomic<uint64_t> h2d, d2h;
};
pcie_slot g_slots[64];
thread_local pcie_slot *t_slot;

pcie_slot *my_slot()
{
    if (t_slot)
        return t_slot;
    pthread_t me = pthread_self();
    for (auto &s : g_slots) {
        pthread_t none = 0;
        if (s.th.compare_exchange_strong(none, me)) {
            t_slot = &s;
            return t_slot;
        }
    }
    return nullptr; /* more than 64 copying threads: only the totals count */
}

void emu_die(const char *msg)
{
    (void)!write(2, msg, strlen(msg));
    abort();
}

void segv(int sig, siginfo_t *si, void *uc)
{
    uint8_t *a = (uint8_t *)si->si_addr;
    if (g_base && a >= g_base && a < g_base + ARENA) {
        char m[256];
        snprintf(m, sizeof(m),
                 "emulated CUDA: host code touched emulated device memory at %p (arena offset "
                 "%zu, %s): only the emulated runtime (copies, kernels) may; caller (a "
                 "hidden symbol shows as +0xOFF: addr2line -f -e BINARY 0xOFF):\n",
                 (void *)a, (size_t)(a - g_base),
                 g_used.empty() ? "no allocation" : "see the backtrace");
        (void)!write(2, m, strlen(m));
        void *bt[24];
        int n = backtrace(bt, 24);
        backtrace_symbols_fd(bt, n, 2);
        abort();
    }
    /* not ours: the previous handler (or the default action) */
    sigaction(SIGSEGV, &g_old_segv, NULL);
    if ((g_old_segv.sa_flags & SA_SIGINFO) && g_old_segv.sa_sigaction)
        g_old_segv.sa_sigaction(sig, si, uc);
    else if (g_old_segv.sa_handler != SIG_DFL && g_old_segv.sa_handler != SIG_IGN)
        g_old_segv.sa_handler(sig);
    /* SIG_DFL: returning re-faults into the default action */
}

void arena_init()
{
    if (g_base)
        return;
    void *p = mmap(NULL, ARENA, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        emu_die("emulated CUDA: cannot reserve the device arena\n");
    g_base = (uint8_t *)p;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = segv;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_old_segv);
}

bool in_arena(const void *p, size_t n)
{
    const uint8_t *a = (const uint8_t *)p;
    return g_base && a >= g_base && a + n <= g_base + g_top && a + n >= a;
}

} // namespace

void dc_emu_dev_enter(const char *what)
{
    g_gate.lock();
    if (g_depth++ == 0) {
        g_what = what;
        if (g_top && mprotect(g_base, g_top, PROT_READ | PROT_WRITE) != 0)
            emu_die("emulated CUDA: mprotect (open) failed\n");
    }
}

void dc_emu_dev_leave(void)
{
    if (--g_depth == 0) {
        if (g_top && mprotect(g_base, g_top, PROT_NONE) != 0)
            emu_die("emulated CUDA: mprotect (close) failed\n");
        g_what = "";
    }
    g_gate.unlock();
}

cudaError_t cudaMalloc(void **p, size_t n)
{
    std::lock_guard<std::recursive_mutex> l(g_gate);
    arena_init();
    n = (n ? n : 1);
    n = (n + ALIGN - 1) / ALIGN * ALIGN;
    size_t off = SIZE_MAX;
    for (auto it = g_free.begin(); it != g_free.end(); ++it)
        if (it->second >= n) {
            off = it->first;
            size_t rest = it->second - n;
            g_free.erase(it);
            if (rest)
                g_free[off + n] = rest;
            break;
        }
    if (off == SIZE_MAX) {
        if (g_top + n > ARENA)
            return cudaErrorMemoryAllocation;
        off = g_top;
        g_top += n;
        /* the new range joins the gate's range in its current state */
        if (g_depth > 0 && mprotect(g_base + off, n, PROT_READ | PROT_WRITE) != 0)
            return cudaErrorMemoryAllocation;
    }
    g_used[off] = n;
    g_live += n;
    *p = g_base + off;
    dc_emu_dev_enter("cudaMalloc");
    memset(*p, 0xDB, n);
    dc_emu_dev_leave();
    return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
    if (!p)
        return cudaSuccess;
    std::lock_guard<std::recursive_mutex> l(g_gate);
    auto it = g_base ? g_used.find((size_t)((uint8_t *)p - g_base)) : g_used.end();
    if (it == g_used.end()) {
        fprintf(stderr, "emulated CUDA: cudaFree(%p) of memory cudaMalloc did not return\n", p);
        abort();
    }
    size_t off = it->first, n = it->second;
    g_used.erase(it);
    g_live -= n;
    /* what was there is gone: poison it (a kernel reading freed or
     * uninitialised memory sees 0xDB, not stale data that happens to fit) */
    dc_emu_dev_enter("cudaFree");
    memset(g_base + off, 0xDB, n);
    dc_emu_dev_leave();
    auto nx = g_free.lower_bound(off);
    if (nx != g_free.end() && nx->first == off + n) {
        n += nx->second;
        g_free.erase(nx);
    }
    auto pv = g_free.lower_bound(off);
    if (pv != g_free.begin()) {
        --pv;
        if (pv->first + pv->second == off) {
            pv->second += n;
            return cudaSuccess;
        }
    }
    g_free[off] = n;
    return cudaSuccess;
}

/* [p, p + n) inside one page-locked range */
static bool locked(const void *p, size_t n)
{
    std::lock_guard<std::recursive_mutex> l(g_gate);
    uintptr_t a = (uintptr_t)p;
    auto it = g_locked.upper_bound(a);
    if (it == g_locked.begin())
        return false;
    --it;
    return a >= it->first && a + n <= it->first + it->second;
}

cudaError_t cudaHostRegister(void *p, size_t n, unsigned)
{
    std::lock_guard<std::recursive_mutex> l(g_gate);
    uintptr_t a = (uintptr_t)p;
    /* any byte of the device arena (reserved whole) refuses it */
    if (p == nullptr || n == 0 ||
        (g_base && a < (uintptr_t)g_base + ARENA && a + n > (uintptr_t)g_base))
        return cudaErrorInvalidValue;
    auto it = g_locked.lower_bound(a);
    if (it != g_locked.end() && it->first < a + n)
        return cudaErrorInvalidValue; /* overlaps one registered after it */
    if (it != g_locked.begin() && (--it, it->first + it->second > a))
        return cudaErrorInvalidValue; /* overlaps one registered before it */
    g_locked[a] = n;
    return cudaSuccess;
}

cudaError_t cudaHostUnregister(void *p)
{
    std::lock_guard<std::recursive_mutex> l(g_gate);
    return g_locked.erase((uintptr_t)p) ? cudaSuccess : cudaErrorInvalidValue;
}

cudaError_t emu_copy(void *d, const void *s, size_t n, cudaMemcpyKind k)
{
    if (n == 0)
        return cudaSuccess;
    bool dd = in_arena(d, n), sd = in_arena(s, n);
    bool ok = k == cudaMemcpyHostToDevice   ? dd && !sd
              : k == cudaMemcpyDeviceToHost ? sd && !dd
              : k == cudaMemcpyDeviceToDevice ? sd && dd
                                             : !sd && !dd;
    if (!ok)
        return cudaErrorInvalidValue;
    dc_emu_dev_enter("cudaMemcpy");
    memcpy(d, s, n);
    dc_emu_dev_leave();
    pcie_slot *sl = my_slot();
    if (k == cudaMemcpyHostToDevice) {
        g_h2d += n;
        if (locked(s, n))
            g_h2d_locked += n;
        if (sl)
            sl->h2d += n;
    } else if (k == cudaMemcpyDeviceToHost) {
        g_d2h += n;
        if (sl)
            sl->d2h += n;
    }
    return cudaSuccess;
}

cudaError_t emu_set(void *d, int v, size_t n)
{
    if (n == 0)
        return cudaSuccess;
    if (!in_arena(d, n))
        return cudaErrorInvalidValue;
    dc_emu_dev_enter("cudaMemset");
    memset(d, v, n);
    dc_emu_dev_leave();
    return cudaSuccess;
}

/* streams: tokens handed out by cudaStreamCreateWithFlags, live until
 * destroyed; work on any other stream but the default one aborts */
static std::mutex g_smu;
static std::set<void *> g_streams;
static thread_local uint64_t t_default_ops;

void emu_stream_use(void *stream)
{
    if (stream == nullptr) {
        t_default_ops++;
        return;
    }
    std::lock_guard<std::mutex> l(g_smu);
    if (!g_streams.count(stream))
        emu_die("emulated CUDA: work queued on a stream that was never created or was "
                "destroyed\n");
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    (void)flags;
    std::lock_guard<std::mutex> l(g_smu);
    *s = new char;
    g_streams.insert(*s);
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    std::lock_guard<std::mutex> l(g_smu);
    if (!g_streams.erase(s))
        return cudaErrorInvalidValue;
    delete (char *)s;
    return cudaSuccess;
}

/* kern_cuda.cu itself, its table renamed */
#define DC_KCU_OPS_NAME dc_kern_cuda_emu_ops
#define DC_KCU_OPS_LABEL "emulated"
#undef DC_LAUNCH
#define DC_LAUNCH(kernel, grid, block, stream) \
    (emu_stream_use(stream), g_launches++, emu_launch((unsigned)(grid), (unsigned)(block), kernel))
/* its headers first, so that only its own definitions land in the
 * namespace (their names would collide with the library's nvcc object) */
#include <stdio.h>
#include <xxhash.h>
extern "C" {
#include "kernels/entropy.h"
#include "kernels/kern_cuda_ops.h"
}
namespace dc_emu_kcu {
#include "kernels/kern_cuda.cu"
}

extern "C" {

void dc_emu_install(void)
{
    {
        std::lock_guard<std::recursive_mutex> l(g_gate);
        arena_init();
    }
    dc_kern_cuda_set_ops(&dc_emu_kcu::dc_kern_cuda_emu_ops);
}

void dc_emu_uninstall(void)
{
    dc_kern_cuda_set_ops(NULL);
}

void dc_emu_pcie(uint64_t *h2d, uint64_t *d2h)
{
    *h2d = g_h2d;
    *d2h = g_d2h;
}

void dc_emu_pcie_reset(void)
{
    g_h2d = 0;
    g_d2h = 0;
}

int dc_emu_pcie_of(pthread_t th, uint64_t *h2d, uint64_t *d2h)
{
    for (auto &s : g_slots)
        if (s.th.load() == th) {
            *h2d = s.h2d;
            *d2h = s.d2h;
            return 1;
        }
    *h2d = *d2h = 0;
    return 0;
}

int dc_emu_is_device(const void *p)
{
    return in_arena(p, 1);
}

size_t dc_emu_live_bytes(void)
{
    std::lock_guard<std::recursive_mutex> l(g_gate);
    return g_live;
}

uint64_t dc_emu_default_stream_ops(void)
{
    return t_default_ops;
}

size_t dc_emu_live_streams(void)
{
    std::lock_guard<std::mutex> l(g_smu);
    return g_streams.size();
}

uint64_t dc_emu_launches(void)
{
    return g_launches;
}

size_t dc_emu_locked_bytes(void)
{
    std::lock_guard<std::recursive_mutex> l(g_gate);
    size_t t = 0;
    for (auto &r : g_locked)
        t += r.second;
    return t;
}

uint64_t dc_emu_h2d_locked(void)
{
    return g_h2d_locked;
}
}
