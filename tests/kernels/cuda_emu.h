/*
 * cuda_emu.h - a CPU emulation of the CUDA thread model, just enough to run
 * kernels/kern_cuda.cu without a GPU (blocks run one after another, each
 * thread of a block is a std::thread; __syncthreads, __shfl_up_sync and
 * __ballot_sync are barriers).  It checks the kernels' logic (indexing,
 * scans, ordering, caps, validation) against the CPU reference, not performance or the memory
 * model.  g++ >= 12 (C++20).
 *
 * The runtime API below it is tests/emu/cuda_emu_rt.h's: "device memory" is
 * an arena mapped PROT_NONE, opened only while an emulated kernel or copy
 * runs (under one process-wide lock), so host code touching a device
 * pointer faults and the test aborts naming the caller.  Kernel launches
 * open it around the whole grid.
 */
#pragma once
#include <atomic>
#include <barrier>
#include <condition_variable>
#include <functional>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>
#define DC_CUDA_EMULATION 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __constant__
struct uint4 { unsigned x, y, z, w; };
struct dim { unsigned x; };
inline thread_local dim threadIdx, blockIdx, blockDim, gridDim;
inline std::barrier<> *g_bar;
inline std::vector<std::barrier<> *> g_warp_bars;
inline unsigned long long g_shfl[1024];
inline void __syncthreads() { g_bar->arrive_and_wait(); }
template <typename T> T __shfl_up_sync(unsigned, T v, int d) {
    unsigned t = threadIdx.x, w = t / 32, lane = t % 32;
    g_shfl[t] = (unsigned long long)v;
    g_warp_bars[w]->arrive_and_wait();
    T r = lane >= (unsigned)d ? (T)g_shfl[t - d] : v;
    g_warp_bars[w]->arrive_and_wait();
    return r;
}
template <typename T> T __shfl_sync(unsigned, T v, int src) {
    unsigned t = threadIdx.x, w = t / 32;
    g_shfl[t] = (unsigned long long)v;
    g_warp_bars[w]->arrive_and_wait();
    T r = (T)g_shfl[w * 32 + (unsigned)src];
    g_warp_bars[w]->arrive_and_wait();
    return r;
}
// the warp's predicates as a mask (lane k's in bit k)
inline unsigned __ballot_sync(unsigned, int pred) {
    unsigned t = threadIdx.x, w = t / 32, n = std::min(32u, blockDim.x - w * 32);
    g_shfl[t] = pred != 0;
    g_warp_bars[w]->arrive_and_wait();
    unsigned m = 0;
    for (unsigned k = 0; k < n; k++)
        m |= (g_shfl[w * 32 + k] ? 1u : 0u) << k;
    g_warp_bars[w]->arrive_and_wait();
    return m;
}
template <typename T> T __ldg(const T *p) { return *p; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(unsigned x) { return __builtin_ffs((int)x); }
inline int __clzll(long long x) { return __builtin_clzll((unsigned long long)x); }
inline std::mutex g_atomic_mu;
inline unsigned long long atomicMin(unsigned long long *p, unsigned long long v) {
    std::lock_guard<std::mutex> l(g_atomic_mu); unsigned long long o = *p; if (v < o) *p = v; return o; }

inline unsigned atomicXor(unsigned *p, unsigned v) {
    std::lock_guard<std::mutex> l(g_atomic_mu); unsigned o = *p; *p = o ^ v; return o; }
inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) {
    std::lock_guard<std::mutex> l(g_atomic_mu); unsigned long long o = *p; *p = o + v; return o; }
inline unsigned long long atomicExch(unsigned long long *p, unsigned long long v) {
    std::lock_guard<std::mutex> l(g_atomic_mu); unsigned long long o = *p; *p = v; return o; }

// the arena's gate (cuda_emu_rt.cc): open around emulated device work
void dc_emu_dev_enter(const char *what);
void dc_emu_dev_leave(void);
// Worker threads persist across launches (one OS thread per emulated
// thread index, created once): a launch hands each of its b threads the
// whole grid, block after block, with a barrier between blocks (shared
// memory is reused).  Creating 256 threads per block made the tests spend
// minutes in the kernel.
struct emu_pool {
    std::mutex mu;
    std::condition_variable cv, done_cv;
    std::vector<std::thread> *ts = new std::vector<std::thread>; // never joined
    unsigned long gen = 0;
    unsigned active = 0, pending = 0;
    const std::function<void(unsigned)> *job = nullptr;
    void worker(unsigned id) {
        unsigned long seen = 0;
        std::unique_lock<std::mutex> l(mu);
        for (;;) {
            cv.wait(l, [&] { return gen != seen; });
            seen = gen;
            if (id >= active)
                continue;
            const std::function<void(unsigned)> *f = job;
            l.unlock();
            (*f)(id);
            l.lock();
            if (--pending == 0)
                done_cv.notify_all();
        }
    }
    void launch(unsigned n, const std::function<void(unsigned)> &f) {
        std::unique_lock<std::mutex> l(mu);
        while (ts->size() < n) {
            unsigned id = (unsigned)ts->size();
            ts->emplace_back([this, id] { worker(id); });
            ts->back().detach();
        }
        job = &f;
        active = n;
        pending = n;
        gen++;
        cv.notify_all();
        done_cv.wait(l, [&] { return pending == 0; });
    }
};
inline emu_pool &emu_pool_get() { static emu_pool *p = new emu_pool; return *p; }
template <typename K> struct emu_launcher {
    unsigned g, b; K k;
    template <typename... A> void operator()(A... args) {
        dc_emu_dev_enter("kernel launch");
        std::barrier<> bar(b);
        std::vector<std::barrier<> *> wb;
        for (unsigned w = 0; w < (b + 31) / 32; w++) wb.push_back(new std::barrier<>(std::min(32u, b - w * 32)));
        g_bar = &bar; g_warp_bars = wb;
        std::function<void(unsigned)> f = [&](unsigned t) {
            for (unsigned bi = 0; bi < g; bi++) {
                threadIdx.x = t; blockIdx.x = bi; blockDim.x = b; gridDim.x = g;
                k(args...);
                bar.arrive_and_wait();
            }
        };
        emu_pool_get().launch(b, f);
        for (auto *p : wb) delete p;
        dc_emu_dev_leave();
    }
};
template <typename K> emu_launcher<K> emu_launch(unsigned g, unsigned b, K k) { return {g, b, k}; }
// every piece of work names its stream: one never created (or destroyed)
// aborts the test; work on the default stream is counted per thread
// (tests/emu/cuda_emu_rt.cc)
void emu_stream_use(void *stream);
#define DC_LAUNCH(kernel, grid, block, stream) \
    (emu_stream_use(stream), emu_launch((unsigned)(grid), (unsigned)(block), kernel))

// runtime API (implemented in tests/emu/cuda_emu_rt.cc over the arena)
enum cudaError_t { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2,
                   cudaErrorNoDevice = 100, cudaErrorInsufficientDriver = 35 };
typedef void *cudaStream_t; typedef void *cudaEvent_t;
enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost,
                      cudaMemcpyDeviceToDevice };
#define cudaStreamNonBlocking 1u
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
enum cudaDeviceAttr { cudaDevAttrMemoryClockRate, cudaDevAttrGlobalMemoryBusWidth };
#define cudaEventDisableTiming 2
struct cudaDeviceProp { char name[256]; int multiProcessorCount, major, minor; size_t totalGlobalMem; };
inline const char *cudaGetErrorString(cudaError_t e) {
    return e == cudaErrorMemoryAllocation ? "out of emulated device memory"
           : e == cudaErrorInvalidValue   ? "invalid argument (a copy's pointers are not of its kind)"
                                          : "emulated error"; }
inline const char *cudaGetErrorName(cudaError_t e) {
    return e == cudaErrorMemoryAllocation ? "cudaErrorMemoryAllocation"
           : e == cudaErrorInvalidValue   ? "cudaErrorInvalidValue" : "cudaErrorEmu"; }
inline cudaError_t cudaGetDeviceCount(int *n) { *n = 1; return cudaSuccess; }
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline cudaError_t cudaRuntimeGetVersion(int *v) { *v = 13000; return cudaSuccess; }
inline cudaError_t cudaDriverGetVersion(int *v) { *v = 13000; return cudaSuccess; }
inline cudaError_t cudaGetDevice(int *d) { *d = 0; return cudaSuccess; }
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int) { strcpy(p->name, "emulated (CPU, tests/emu)"); p->multiProcessorCount = 1; p->major = 9; p->minor = 0; p->totalGlobalMem = (size_t)4 << 30; return cudaSuccess; }
inline cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int) { *v = a == cudaDevAttrMemoryClockRate ? 1000 : 64; return cudaSuccess; }
cudaError_t cudaMalloc(void **p, size_t n);
cudaError_t cudaFree(void *p);
inline cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t s) { emu_stream_use(s); return cudaMalloc(p, n); }
inline cudaError_t cudaFreeAsync(void *p, cudaStream_t s) { emu_stream_use(s); return cudaFree(p); }
inline cudaError_t cudaMallocHost(void **p, size_t n) { *p = aligned_alloc(256, (n + 255) / 256 * 256); return *p ? cudaSuccess : cudaErrorMemoryAllocation; }
inline cudaError_t cudaFreeHost(void *p) { free(p); return cudaSuccess; }
#define cudaHostRegisterDefault 0
// page-locking is recorded (tests/emu/cuda_emu_rt.cc): copies from a
// registered range are counted apart; device memory or a range already
// registered is refused, as the driver refuses it
cudaError_t cudaHostRegister(void *p, size_t n, unsigned flags);
cudaError_t cudaHostUnregister(void *p);
cudaError_t emu_copy(void *d, const void *s, size_t n, cudaMemcpyKind k);
cudaError_t emu_set(void *d, int v, size_t n);
inline cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind k) { emu_stream_use(nullptr); return emu_copy(d, s, n, k); }
inline cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind k, cudaStream_t st) { emu_stream_use(st); return emu_copy(d, s, n, k); }
inline cudaError_t cudaMemset(void *d, int v, size_t n) { emu_stream_use(nullptr); return emu_set(d, v, n); }
inline cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t st) { emu_stream_use(st); return emu_set(d, v, n); }
inline cudaError_t cudaStreamSynchronize(cudaStream_t st) { emu_stream_use(st); return cudaSuccess; }
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, int) { *e = (void *)1; return cudaSuccess; }
inline cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t cudaEventDestroy(cudaEvent_t) { return cudaSuccess; }
