/*
 * kern_cuda.cu - CUDA versions of the host kernels (see kern_cuda.h).
 *
 * Layout of diff: the input is cut into 16-byte "units" (whole elements,
 * since w divides 16) and units into tiles of TILE_UNITS.  A 256-thread
 * block owns one tile and walks it in ROUNDS rounds; in round j thread t
 * owns unit tile*TILE_UNITS + j*256 + t, so loads are coalesced and the
 * order (round, thread, element) is the element order.  One pass: a
 * block takes the next tile, counts its changes per round (block-wide
 * exclusive scans), learns the count before it by decoupled look-back
 * (k_diff1) and writes positions and XOR words to their final slots, so
 * each input byte is read once (the first version counted, scanned and
 * re-read every tile: twice).  The output is exactly dc_kern_diff()'s.
 *
 * CUDA errors are translated to dc_status_t at this boundary.
 *
 * The C ABI is one table (kern_cuda_ops.h): dc_kern_cuda_build_ops in the
 * library; compiled for the CPU against tests/emu/cuda_emu_rt.h the same
 * source gives the tests' emulated table (DC_KCU_OPS_NAME).
 *
 * Device XXH3-128 (kcu_digest128_dev): XXH3's long-input loop keeps 8
 * 64-bit accumulators; within a 1 KiB block the 16 stripes only add into
 * them (mod 2^64: commutative), and only the scramble between blocks is
 * sequential, lane by lane.  So two passes: every block's 8 stripe sums
 * at once, one thread per (block, lane) across the whole GPU (the input
 * read once, 64 B of sums written per KiB); then 8 threads, one per
 * accumulator, walk the blocks adding each sum and scrambling (a chain of
 * a few integer operations per KiB), fed from tiles of sums the piece's
 * 256 threads copy into shared memory.  On an H200: the first version
 * (both in one 32-thread block) 0.4 GB/s; two passes with the chain
 * loading its own sums 8.4 GB/s for one 1 GiB buffer, 352 GB/s for 256
 * chunks of 4 MiB in one call (perf/gpu_bench).
 * Bit-identical to XXH3_128bits (no format change); inputs of <= 240
 * bytes (XXH3's short paths) are copied back and hashed on the host (at
 * most 240 bytes across PCIe).
 */
#ifndef DC_CUDA_EMULATION
#include <cuda_runtime.h>
/* A macro, so that a CPU emulation of the thread model can run the same
 * kernels (used to check the logic on machines without a GPU). */
#define DC_LAUNCH(kernel, grid, block, stream) kernel<<<(grid), (block), 0, (stream)>>>
#endif

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

extern "C" {
#include "kernels/entropy.h"
#include "kernels/kern_cuda_ops.h"
#include "kernels/listpack.h"
}

#define BLOCK 256
#define ROUNDS 8
#define TILE_UNITS (BLOCK * ROUNDS) /* 2048 units = 32 KiB per tile */
#define NONE_BAD 0xFFFFFFFFFFFFFFFFull

/* ------------------------------------------------------------------------ */
/*  Error boundary                                                          */
/* ------------------------------------------------------------------------ */

static dc_status_t cuda_fail(cudaError_t e, const char *what)
{
    dc_status_t st = e == cudaErrorMemoryAllocation ? DC_ERR_NOMEM
                     : (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver)
                         ? DC_ERR_UNSUPPORTED
                         : DC_ERR_IO;
    return dc_error(st, "cuda: %s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

#define CU_TRY(call, what)                                                    \
    do {                                                                      \
        cudaError_t e_ = (call);                                              \
        if (e_ != cudaSuccess) {                                              \
            st = cuda_fail(e_, what);                                         \
            goto out;                                                         \
        }                                                                     \
    } while (0)

static inline cudaStream_t S(void *stream)
{
    return (cudaStream_t)stream;
}

/* An op's scratch (p: device memory from cudaMallocAsync on s, or NULL)
 * freed on s, and s drained: the op returns with nothing of it in flight. */
static void free_wait(void *p, cudaStream_t s)
{
    if (p != NULL) {
        cudaFreeAsync(p, s);
        cudaStreamSynchronize(s);
    }
}

static bool valid_width(unsigned w)
{
    return w == 1 || w == 2 || w == 4 || w == 8;
}

static unsigned grid_for(size_t items, unsigned per_block)
{
    size_t g = (items + per_block - 1) / per_block;
    if (g == 0)
        g = 1;
    if (g > 65535u * 16)
        g = 65535u * 16; /* grid-stride loops cover the rest */
    return (unsigned)g;
}

/* ------------------------------------------------------------------------ */
/*  Device helpers                                                          */
/* ------------------------------------------------------------------------ */

union unit16 {
    uint4 v;
    uint8_t b[16];
};

/* Load the 16-byte unit u of p (bytes beyond `bytes` read as 0). */
__device__ __forceinline__ void load_unit(const uint8_t *p, size_t u, size_t bytes,
                                          bool aligned, unit16 &out)
{
    size_t off = u * 16;
    if (aligned && off + 16 <= bytes) {
        out.v = __ldg(reinterpret_cast<const uint4 *>(p + off));
    } else {
#pragma unroll
        for (int i = 0; i < 16; i++)
            out.b[i] = off + i < bytes ? p[off + i] : 0;
    }
}

/* Bit e set when element e of the unit differs (elements beyond n masked). */
template <int W>
__device__ __forceinline__ uint32_t unit_mask(const unit16 &x, size_t u, size_t n)
{
    constexpr int EPU = 16 / W;
    uint32_t m = 0;
#pragma unroll
    for (int e = 0; e < EPU; e++) {
        bool ch = false;
#pragma unroll
        for (int i = 0; i < W; i++)
            ch |= x.b[e * W + i] != 0;
        m |= (uint32_t)ch << e;
    }
    size_t first = u * EPU;
    if (first + EPU > n) {
        size_t valid = n > first ? n - first : 0;
        m &= (1u << valid) - 1u;
    }
    return m;
}

/* Block-wide exclusive sum of v (BLOCK threads); *total = sum. */
__device__ __forceinline__ unsigned long long block_exscan(unsigned long long v,
                                                           unsigned long long *total)
{
    __shared__ unsigned long long warp_sums[BLOCK / 32];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    unsigned long long x = v;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        unsigned long long y = __shfl_up_sync(0xffffffffu, x, d);
        if (lane >= d)
            x += y;
    }
    if (lane == 31)
        warp_sums[wid] = x;
    __syncthreads();
    if (wid == 0) {
        unsigned long long s = lane < BLOCK / 32 ? warp_sums[lane] : 0;
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            unsigned long long y = __shfl_up_sync(0xffffffffu, s, d);
            if (lane >= d)
                s += y;
        }
        if (lane < BLOCK / 32)
            warp_sums[lane] = s; /* inclusive warp prefix */
    }
    __syncthreads();
    unsigned long long before = wid > 0 ? warp_sums[wid - 1] : 0;
    *total = warp_sums[BLOCK / 32 - 1];
    __syncthreads(); /* warp_sums reused by the next call */
    return before + x - v;
}

/* ------------------------------------------------------------------------ */
/*  diff / count                                                            */
/* ------------------------------------------------------------------------ */

/* Count: each block sums its tiles' changed elements and adds the sum to
 * *total.  A thread loads all ROUNDS of its units before it compares any
 * (eight 16-byte loads of each input in flight per thread). */
template <int W>
__global__ void k_count(const uint8_t *a, const uint8_t *b, size_t n, size_t units, size_t tiles,
                        bool aligned, unsigned long long *total)
{
    const size_t bytes = n * W;
    unsigned long long c = 0;
    for (size_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        unit16 ua[ROUNDS], ub[ROUNDS];
#pragma unroll
        for (int r = 0; r < ROUNDS; r++) {
            size_t u = tile * TILE_UNITS + (size_t)r * BLOCK + threadIdx.x;
            if (u < units) {
                load_unit(a, u, bytes, aligned, ua[r]);
                load_unit(b, u, bytes, aligned, ub[r]);
            }
        }
#pragma unroll
        for (int r = 0; r < ROUNDS; r++) {
            size_t u = tile * TILE_UNITS + (size_t)r * BLOCK + threadIdx.x;
            if (u < units) {
                ua[r].v.x ^= ub[r].v.x;
                ua[r].v.y ^= ub[r].v.y;
                ua[r].v.z ^= ub[r].v.z;
                ua[r].v.w ^= ub[r].v.w;
                c += __popc(unit_mask<W>(ua[r], u, n));
            }
        }
    }
    unsigned long long sum;
    block_exscan(c, &sum);
    if (threadIdx.x == 0 && sum)
        atomicAdd(total, sum);
}

/* Exclusive scan of tile_counts into tile_offs (one block; each thread
 * owns SCAN_ITEMS consecutive tiles per step); *sum = total. */
#define SCAN_ITEMS 16
__global__ void k_scan_tiles(const unsigned long long *tile_counts, size_t tiles,
                             unsigned long long *tile_offs, unsigned long long *sum)
{
    unsigned long long carry = 0;
    for (size_t base = 0; base < tiles; base += (size_t)BLOCK * SCAN_ITEMS) {
        size_t first = base + (size_t)threadIdx.x * SCAN_ITEMS;
        unsigned long long v[SCAN_ITEMS], mine = 0, total;
#pragma unroll
        for (int j = 0; j < SCAN_ITEMS; j++) {
            v[j] = first + j < tiles ? tile_counts[first + j] : 0;
            mine += v[j];
        }
        unsigned long long run = carry + block_exscan(mine, &total);
#pragma unroll
        for (int j = 0; j < SCAN_ITEMS; j++) {
            if (first + j < tiles)
                tile_offs[first + j] = run;
            run += v[j];
        }
        carry += total;
    }
    if (threadIdx.x == 0)
        *sum = carry;
}

/* Element e of a 16-byte unit (w = W), as an integer (little-endian). */
template <int W>
__device__ __forceinline__ unsigned long long unit_elem(const uint4 &v, int e)
{
    const int byte = e * W, word = byte >> 2;
    const unsigned lo = word == 0 ? v.x : word == 1 ? v.y : word == 2 ? v.z : v.w;
    if (W == 8) {
        const unsigned hi = word == 0 ? v.y : v.w;
        return (unsigned long long)lo | ((unsigned long long)hi << 32);
    }
    if (W == 4)
        return lo;
    return (lo >> ((byte & 3) * 8)) & (W == 2 ? 0xFFFFu : 0xFFu);
}

template <int W>
__device__ __forceinline__ void store_word(uint8_t *dst, size_t k, unsigned long long v,
                                           bool aligned)
{
    if (aligned) {
        if (W == 1)
            dst[k] = (uint8_t)v;
        else if (W == 2)
            reinterpret_cast<uint16_t *>(dst)[k] = (uint16_t)v;
        else if (W == 4)
            reinterpret_cast<uint32_t *>(dst)[k] = (uint32_t)v;
        else
            reinterpret_cast<unsigned long long *>(dst)[k] = v;
    } else {
#pragma unroll
        for (int i = 0; i < W; i++)
            dst[k * W + i] = (uint8_t)(v >> (8 * i));
    }
}

/* Tile states of the one-pass diff: flag in the top two bits, a count
 * below (one 64-bit word, so flag and count are published together). */
#define TS_AGG (1ull << 62) /* this tile's own count */
#define TS_INC (2ull << 62) /* the count of this tile and all before it */
#define TS_VAL ((1ull << 62) - 1)

/* The diff in one pass over a and b (each byte read once): a block takes
 * the next tile in order (a counter, so every tile before it is held by a
 * block that runs), loads its ROUNDS units of both inputs, counts the
 * changes per round (block-wide scans), then finds how many changes the
 * tiles before it hold by decoupled look-back (Merrill and Garland,
 * "Single-pass Parallel Prefix Scan with Decoupled Look-back", 2016: the
 * tile publishes its own count at once and its running total as soon as
 * the tiles before it are summed; one warp reads 32 tiles' states at a
 * time and adds the published counts back to the nearest running total),
 * and writes positions and XOR words to
 * their final slots.  state: tiles + 1 words, zeroed; the last one is the
 * tile counter.  The total is the last tile's running total. */
template <int W>
__global__ void k_diff1(const uint8_t *a, const uint8_t *b, size_t n, size_t units, size_t tiles,
                        bool aligned, unsigned long long *state, uint32_t *pos, uint8_t *xorw,
                        bool xorw_aligned, size_t cap)
{
    constexpr int EPU = 16 / W;
    const size_t bytes = n * W;
    __shared__ unsigned long long s_tile, s_excl;
    for (;;) {
        if (threadIdx.x == 0)
            s_tile = atomicAdd(&state[tiles], 1ull);
        __syncthreads();
        const size_t tile = (size_t)s_tile;
        if (tile >= tiles)
            break; /* uniform */
        unit16 ua[ROUNDS], ub[ROUNDS];
#pragma unroll
        for (int r = 0; r < ROUNDS; r++) {
            size_t u = tile * TILE_UNITS + (size_t)r * BLOCK + threadIdx.x;
            if (u < units) {
                load_unit(a, u, bytes, aligned, ua[r]);
                load_unit(b, u, bytes, aligned, ub[r]);
            }
        }
        uint32_t m[ROUNDS];
        unsigned long long off[ROUNDS], tile_total = 0;
#pragma unroll
        for (int r = 0; r < ROUNDS; r++) {
            size_t u = tile * TILE_UNITS + (size_t)r * BLOCK + threadIdx.x;
            m[r] = 0;
            if (u < units) {
                ua[r].v.x ^= ub[r].v.x;
                ua[r].v.y ^= ub[r].v.y;
                ua[r].v.z ^= ub[r].v.z;
                ua[r].v.w ^= ub[r].v.w;
                m[r] = unit_mask<W>(ua[r], u, n);
            }
            unsigned long long rt;
            off[r] = tile_total + block_exscan((unsigned long long)__popc(m[r]), &rt);
            tile_total += rt;
        }
        if (threadIdx.x < 32) {
            /* the look-back, one warp: lane l reads the state of tile
             * p - l; a window with a tile not yet published is read again;
             * else the lanes up to the nearest running total add up */
            const int lane = threadIdx.x;
            unsigned long long excl = 0;
            if (tile == 0) {
                if (lane == 0)
                    atomicExch(&state[0], TS_INC | tile_total);
            } else {
                if (lane == 0)
                    atomicExch(&state[tile], TS_AGG | tile_total);
                long long p = (long long)tile - 1;
                for (;;) {
                    const long long q = p - lane;
                    /* past tile 0 (which holds a running total) reads as 0 */
                    const unsigned long long sv =
                        q >= 0 ? *(volatile unsigned long long *)&state[q] : TS_INC;
                    if (__ballot_sync(0xffffffffu, (sv & ~TS_VAL) == 0))
                        continue;
                    const unsigned inc = __ballot_sync(0xffffffffu, (sv & ~TS_VAL) == TS_INC);
                    const int stop = inc ? __ffs(inc) - 1 : 31;
                    unsigned long long v = lane <= stop ? sv & TS_VAL : 0;
#pragma unroll
                    for (int d = 1; d < 32; d <<= 1) {
                        unsigned long long y = __shfl_up_sync(0xffffffffu, v, d);
                        if (lane >= d)
                            v += y;
                    }
                    excl += __shfl_sync(0xffffffffu, v, 31);
                    if (inc)
                        break;
                    p -= 32;
                }
                if (lane == 0)
                    atomicExch(&state[tile], TS_INC | (excl + tile_total));
            }
            if (lane == 0)
                s_excl = excl;
        }
        __syncthreads();
        const unsigned long long excl = s_excl;
        if (tile_total > 0 && excl < cap) {
#pragma unroll
            for (int r = 0; r < ROUNDS; r++) {
                size_t u = tile * TILE_UNITS + (size_t)r * BLOCK + threadIdx.x;
                unsigned long long k = excl + off[r];
                uint32_t mm = m[r];
                while (mm) {
                    int e = __ffs(mm) - 1;
                    mm &= mm - 1;
                    if (k < cap) {
                        pos[k] = (uint32_t)(u * EPU + e);
                        store_word<W>(xorw, k, unit_elem<W>(ua[r].v, e), xorw_aligned);
                    }
                    k++;
                }
            }
        }
        __syncthreads(); /* s_tile and s_excl are rewritten next round */
    }
}

template <int W>
static dc_status_t diff_passes(const void *a, const void *b, size_t n, uint32_t *pos,
                               void *xorw, size_t cap, bool compact, size_t *count,
                               cudaStream_t s)
{
    dc_status_t st = DC_OK;
    const size_t units = (n * W + 15) / 16;
    const size_t tiles = (units + TILE_UNITS - 1) / TILE_UNITS;
    const bool aligned = (((uintptr_t)a | (uintptr_t)b) & 15) == 0;
    const bool xa = ((uintptr_t)xorw & (W - 1)) == 0;
    const size_t words = compact ? tiles + 1 : 1;
    unsigned long long *scratch = NULL, host_sum = 0;

    CU_TRY(cudaMallocAsync((void **)&scratch, words * sizeof(*scratch), s), "diff scratch");
    CU_TRY(cudaMemsetAsync(scratch, 0, words * sizeof(*scratch), s), "diff scratch clear");
    if (compact) {
        DC_LAUNCH(k_diff1<W>, grid_for(tiles, 1), BLOCK, s)(
            (const uint8_t *)a, (const uint8_t *)b, n, units, tiles, aligned, scratch, pos,
            (uint8_t *)xorw, xa, cap);
        CU_TRY(cudaGetLastError(), "diff kernel");
        CU_TRY(cudaMemcpyAsync(&host_sum, scratch + tiles - 1, sizeof(host_sum),
                               cudaMemcpyDeviceToHost, s),
               "diff count copy");
    } else {
        /* enough blocks to fill the GPU; each sums a stride of tiles */
        DC_LAUNCH(k_count<W>, grid_for(tiles, 4), BLOCK, s)(
            (const uint8_t *)a, (const uint8_t *)b, n, units, tiles, aligned, scratch);
        CU_TRY(cudaGetLastError(), "count kernel");
        CU_TRY(cudaMemcpyAsync(&host_sum, scratch, sizeof(host_sum), cudaMemcpyDeviceToHost, s),
               "count copy");
    }
    CU_TRY(cudaFreeAsync(scratch, s), "diff scratch free");
    scratch = NULL;
    CU_TRY(cudaStreamSynchronize(s), "diff");
    *count = (size_t)(compact ? host_sum & TS_VAL : host_sum);
out:
    free_wait(scratch, s);
    return st;
}

static dc_status_t diff_dispatch(const void *a, const void *b, size_t n, unsigned w,
                                 uint32_t *pos, void *xorw, size_t cap, bool compact,
                                 size_t *count, void *stream)
{
    switch (w) {
    case 1: return diff_passes<1>(a, b, n, pos, xorw, cap, compact, count, S(stream));
    case 2: return diff_passes<2>(a, b, n, pos, xorw, cap, compact, count, S(stream));
    case 4: return diff_passes<4>(a, b, n, pos, xorw, cap, compact, count, S(stream));
    default: return diff_passes<8>(a, b, n, pos, xorw, cap, compact, count, S(stream));
    }
}

/* ------------------------------------------------------------------------ */
/*  gather / scatter / dense                                                */
/* ------------------------------------------------------------------------ */

template <int W>
__device__ __forceinline__ void copy_elem(uint8_t *dst, size_t di, const uint8_t *src,
                                          size_t si, bool aligned, bool do_xor)
{
    if (aligned) {
        if (W == 1) {
            dst[di] = do_xor ? (uint8_t)(dst[di] ^ src[si]) : src[si];
        } else if (W == 2) {
            uint16_t *d = reinterpret_cast<uint16_t *>(dst);
            const uint16_t *q = reinterpret_cast<const uint16_t *>(src);
            d[di] = do_xor ? (uint16_t)(d[di] ^ q[si]) : q[si];
        } else if (W == 4) {
            uint32_t *d = reinterpret_cast<uint32_t *>(dst);
            const uint32_t *q = reinterpret_cast<const uint32_t *>(src);
            d[di] = do_xor ? d[di] ^ q[si] : q[si];
        } else {
            unsigned long long *d = reinterpret_cast<unsigned long long *>(dst);
            const unsigned long long *q = reinterpret_cast<const unsigned long long *>(src);
            d[di] = do_xor ? d[di] ^ q[si] : q[si];
        }
    } else {
#pragma unroll
        for (int i = 0; i < W; i++) {
            uint8_t v = src[si * W + i];
            dst[di * W + i] = do_xor ? (uint8_t)(dst[di * W + i] ^ v) : v;
        }
    }
}

template <int W>
__global__ void k_gather(const uint8_t *b, const uint32_t *pos, size_t count, uint8_t *vals,
                         bool aligned)
{
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < count;
         k += (size_t)gridDim.x * blockDim.x)
        copy_elem<W>(vals, k, b, pos[k], aligned, false);
}

template <int W>
__global__ void k_scatter(uint8_t *dst, const uint32_t *pos, size_t count, const uint8_t *src,
                          bool aligned, bool do_xor)
{
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < count;
         k += (size_t)gridDim.x * blockDim.x)
        copy_elem<W>(dst, pos[k], src, k, aligned, do_xor);
}

__global__ void k_validate(const uint32_t *pos, size_t count, size_t n,
                           unsigned long long *bad)
{
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < count;
         k += (size_t)gridDim.x * blockDim.x) {
        uint32_t p = pos[k];
        if (p >= n || (k > 0 && p <= pos[k - 1]))
            atomicMin(bad, (unsigned long long)k);
    }
}

__global__ void k_xor_dense16(uint4 *dst, const uint4 *src, size_t units)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < units;
         i += (size_t)gridDim.x * blockDim.x) {
        uint4 d = dst[i], s = __ldg(src + i);
        d.x ^= s.x;
        d.y ^= s.y;
        d.z ^= s.z;
        d.w ^= s.w;
        dst[i] = d;
    }
}

__global__ void k_xor_dense1(uint8_t *dst, const uint8_t *src, size_t bytes)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < bytes;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] ^= src[i];
}

/* ------------------------------------------------------------------------ */
/*  CRC32C                                                                  */
/* ------------------------------------------------------------------------ */
/*
 * CRC32C (Castagnoli, reflected 0x82F63B78), bit-exact with dc_crc32c().
 * The CRC register is linear: for a buffer split in pieces, the raw register
 * (before the final inversion) is the XOR over the pieces of
 * raw0(piece) * x^(8 * bytes after the piece) mod P, plus the initial
 * register times x^(8 * len) (raw0: the register after the piece when it
 * starts from 0).  Multiplication by x^(8n) is crc32_combine()'s shift.
 *
 * Main kernel: the 16-byte aligned middle of the buffer as whole 4 KiB tiles
 * (BLOCK units of 16 bytes); block b owns a contiguous range of tiles, and in
 * each tile thread t reads unit t (coalesced uint4 loads).  A thread keeps
 * acc = the raw register of its units as if they were adjacent, each next
 * one 4096 bytes after the previous: acc = update(acc * x^(8*4080), unit)
 * (slicing-by-4 tables and the x^(8*4080) shift as byte tables, all in
 * shared memory).  Then acc * x^(8*16*(BLOCK-1-t)) aligns the threads on the
 * end of the block's range; the block XORs them and thread 0 shifts the sum
 * to the end of the buffer and XORs it into the result word (atomicXor).
 * Rest kernel: the unaligned head (< 16 bytes), the tail (< 4096 + 16
 * bytes) and the initial register, one block, a few bytes per thread.
 * The tables are built at compile time (constexpr).
 */
#define CRC_POLY 0x82F63B78u
#define CRC_TILE (BLOCK * 16) /* bytes per tile */
#define CRC_SHIFT (CRC_TILE - 16)

struct crc_tabs {
    uint32_t t[4][256]; /* slicing-by-4 */
    uint32_t z[4][256]; /* multiply by x^(8*CRC_SHIFT), byte by byte */
    uint32_t p[BLOCK];  /* x^(8*16*k) */
    uint32_t x8[64];    /* x^(8*2^j) */
};

/* a*b mod P, bit-reflected (as kernels/crc32c.c). */
__host__ __device__ constexpr uint32_t crc_gf2_mul(uint32_t a, uint32_t b)
{
    uint32_t prod = 0;
    for (int i = 0; i < 32; i++) {
        prod ^= b & (0u - (a >> 31));
        a <<= 1;
        b = (b >> 1) ^ (CRC_POLY & (0u - (b & 1u)));
    }
    return prod;
}

static constexpr uint32_t crc_xpow8_slow(size_t n)
{
    uint32_t r = 0x80000000u, sq = 0x00800000u; /* x^0, x^8 */
    while (n) {
        if (n & 1)
            r = crc_gf2_mul(r, sq);
        sq = crc_gf2_mul(sq, sq);
        n >>= 1;
    }
    return r;
}

static constexpr crc_tabs crc_make_tabs()
{
    crc_tabs T{};
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (CRC_POLY & (0u - (c & 1u)));
        T.t[0][n] = c;
    }
    for (int k = 1; k < 4; k++)
        for (uint32_t n = 0; n < 256; n++)
            T.t[k][n] = T.t[0][T.t[k - 1][n] & 0xff] ^ (T.t[k - 1][n] >> 8);
    const uint32_t op = crc_xpow8_slow(CRC_SHIFT);
    for (uint32_t n = 0; n < 256; n++)
        for (int k = 0; k < 4; k++)
            T.z[k][n] = crc_gf2_mul(op, n << (8 * k));
    for (int k = 0; k < BLOCK; k++)
        T.p[k] = crc_xpow8_slow((size_t)16 * k);
    T.x8[0] = 0x00800000u;
    for (int j = 1; j < 64; j++)
        T.x8[j] = crc_gf2_mul(T.x8[j - 1], T.x8[j - 1]);
    return T;
}

__device__ const crc_tabs g_crc = crc_make_tabs();

/* x^(8n) mod P. */
__device__ __forceinline__ uint32_t crc_xpow8(unsigned long long n)
{
    uint32_t r = 0x80000000u;
    for (int j = 0; n; j++, n >>= 1)
        if (n & 1)
            r = crc_gf2_mul(r, g_crc.x8[j]);
    return r;
}

/* Raw register after `n` bytes at p, from register c (byte at a time). */
__device__ __forceinline__ uint32_t crc_bytes(uint32_t c, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        c = g_crc.t[0][(c ^ p[i]) & 0xff] ^ (c >> 8);
    return c;
}

__device__ __forceinline__ uint32_t crc_word(const uint32_t (*t)[256], uint32_t c, uint32_t w)
{
    c ^= w;
    return t[3][c & 0xff] ^ t[2][(c >> 8) & 0xff] ^ t[1][(c >> 16) & 0xff] ^ t[0][c >> 24];
}

__global__ void k_crc_main(const uint4 *q, size_t tiles, unsigned long long after,
                           uint32_t *result)
{
    __shared__ uint32_t t[4][256];
    __shared__ uint32_t z[4][256];
    __shared__ uint32_t red[BLOCK];
    for (int i = threadIdx.x; i < 4 * 256; i += BLOCK) {
        t[i >> 8][i & 255] = g_crc.t[i >> 8][i & 255];
        z[i >> 8][i & 255] = g_crc.z[i >> 8][i & 255];
    }
    __syncthreads();
    const size_t t0 = (size_t)blockIdx.x * tiles / gridDim.x;
    const size_t t1 = ((size_t)blockIdx.x + 1) * tiles / gridDim.x;
    uint32_t acc = 0;
    for (size_t tile = t0; tile < t1; tile++) {
        uint4 v = __ldg(q + tile * BLOCK + threadIdx.x);
        if (tile != t0)
            acc = z[0][acc & 0xff] ^ z[1][(acc >> 8) & 0xff] ^ z[2][(acc >> 16) & 0xff] ^
                  z[3][acc >> 24];
        acc = crc_word(t, acc, v.x);
        acc = crc_word(t, acc, v.y);
        acc = crc_word(t, acc, v.z);
        acc = crc_word(t, acc, v.w);
    }
    red[threadIdx.x] = crc_gf2_mul(acc, g_crc.p[BLOCK - 1 - threadIdx.x]);
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s)
            red[threadIdx.x] ^= red[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0 && t1 > t0) {
        unsigned long long dist = (unsigned long long)(tiles - t1) * CRC_TILE + after;
        atomicXor(result, crc_gf2_mul(red[0], crc_xpow8(dist)));
    }
}

/* [0, head) and [tail, len) of p, and the initial register `init`. */
__global__ void k_crc_rest(const uint8_t *p, size_t len, size_t head, size_t tail,
                           uint32_t init, uint32_t *result)
{
    const size_t n = len - tail, per = (n + BLOCK - 1) / BLOCK;
    const size_t lo = tail + DC_MIN(n, (size_t)threadIdx.x * per);
    const size_t hi = tail + DC_MIN(n, ((size_t)threadIdx.x + 1) * per);
    uint32_t x = 0;
    if (hi > lo)
        x = crc_gf2_mul(crc_bytes(0, p + lo, hi - lo), crc_xpow8(len - hi));
    if (threadIdx.x == 0) {
        x ^= crc_gf2_mul(init, crc_xpow8(len));
        if (head)
            x ^= crc_gf2_mul(crc_bytes(0, p, head), crc_xpow8(len - head));
    }
    if (x)
        atomicXor(result, x);
}

/* ------------------------------------------------------------------------ */
/*  XXH3-128 on the device (long inputs; see the file comment)              */
/* ------------------------------------------------------------------------ */

__constant__ uint8_t k_xxh_secret[192] = {
    0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c,
    0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f,
    0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21,
    0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c,
    0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3,
    0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8,
    0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d,
    0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64,
    0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb,
    0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e,
    0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce,
    0x45, 0xcb, 0x3a, 0x8f, 0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e,
};

#define XXH_P32_1 0x9E3779B1ull
#define XXH_P32_2 0x85EBCA77ull
#define XXH_P32_3 0xC2B2AE3Dull
#define XXH_P64_1 0x9E3779B185EBCA87ull
#define XXH_P64_2 0xC2B2AE3D27D4EB4Full
#define XXH_P64_3 0x165667B19E3779F9ull
#define XXH_P64_4 0x85EBCA77C2B2AE63ull
#define XXH_P64_5 0x27D4EB2F165667C5ull
#define XXH_MIN_LONG 241 /* shorter inputs take XXH3's short paths (host) */

__device__ __forceinline__ unsigned long long xxh_rd64(const uint8_t *p)
{
    unsigned long long v = 0;
#pragma unroll
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

__device__ __forceinline__ unsigned long long xxh_sec64(int off)
{
    return xxh_rd64(k_xxh_secret + off);
}

/* Accumulator `lane`'s share of one stripe at `in` with secret offset
 * `soff`: acc[lane] gets data[lane^1] + lo32(key) * hi32(key). */
__device__ __forceinline__ unsigned long long xxh_stripe_part(const uint8_t *in, int soff,
                                                              int lane)
{
    unsigned long long v = xxh_rd64(in + 8 * lane), v1 = xxh_rd64(in + 8 * (lane ^ 1));
    unsigned long long k = v ^ xxh_sec64(soff + 8 * lane);
    return v1 + (k & 0xFFFFFFFFull) * (k >> 32);
}

__device__ __forceinline__ unsigned long long xxh_mul128_fold64(unsigned long long a,
                                                                unsigned long long b)
{
    unsigned long long lo = a * b;
#ifdef DC_CUDA_EMULATION
    unsigned long long hi = (unsigned long long)(((unsigned __int128)a * b) >> 64);
#else
    unsigned long long hi = __umul64hi(a, b);
#endif
    return lo ^ hi;
}

__device__ __forceinline__ unsigned long long xxh_avalanche(unsigned long long h)
{
    h ^= h >> 37;
    h *= 0x165667919E3779F9ull;
    h ^= h >> 32;
    return h;
}

/* The device digests cover pieces of `piece` bytes of p[0, total) (the
 * last one shorter when total is not a multiple; every piece > 240 bytes
 * here); piece q's 1 KiB blocks' sums are sums[q * nbp * 8 ...], nbp =
 * the blocks of a whole piece. */
__device__ __forceinline__ size_t xxh_piece_len(size_t total, size_t piece, size_t q)
{
    const size_t left = total - q * piece;
    return left < piece ? left : piece;
}

/* Pass 1: for piece q, sums[(q * nbp + b) * 8 + lane] = the sum of its
 * block b's stripe parts for accumulator `lane` (b < nb, the blocks before
 * its last, each 16 stripes; block nb, its last, partial: its whole
 * stripes), one thread per (piece, block, lane). */
__global__ void k_xxh3_block_sums(const uint8_t *p, size_t total, size_t piece, size_t npieces,
                                  size_t nbp, unsigned long long *sums)
{
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= npieces * nbp * 8)
        return;
    const size_t q = i / (nbp * 8), b = (i / 8) % nbp;
    const int lane = (int)(i & 7);
    const size_t len = xxh_piece_len(total, piece, q), nb = (len - 1) / 1024;
    if (b > nb)
        return;
    const uint8_t *blk = p + q * piece + b * 1024;
    const int stripes = b < nb ? 16 : (int)(((len - 1) - 1024 * nb) / 64);
    unsigned long long s = 0;
    for (int k = 0; k < stripes; k++)
        s += xxh_stripe_part(blk + 64 * k, 8 * k, lane);
    sums[i] = s;
}

/* Pass 2, one block of XXH_CHAIN_THREADS threads per piece (blockIdx.x):
 * threads 0-7 take accumulator t through the piece's blocks (scrambled
 * after each block but the piece's last: a chain of a few integer
 * operations per block) from tiles of the blocks' sums in shared memory,
 * which warps 1-7 fill, coalesced, one tile ahead (two buffers: the chain
 * never waits on a load but the first); then the last stripe and the
 * 128-bit merge; out[2q] = low64, out[2q + 1] = high64. */
#define XXH_CHAIN_THREADS 256
#define XXH_CHAIN_TILE 256 /* blocks per tile: 2 x 16 KiB of sums in shared memory */
__global__ void k_xxh3_128_chain(const uint8_t *p, size_t total, size_t piece, size_t nbp,
                                 const unsigned long long *sums, unsigned long long *out)
{
    __shared__ unsigned long long acc[8];
    __shared__ unsigned long long tile[2][XXH_CHAIN_TILE * 8];
    const int t = (int)threadIdx.x;
    const size_t q = blockIdx.x, len = xxh_piece_len(total, piece, q), nb = (len - 1) / 1024;
    const uint8_t *in = p + q * piece;
    sums += q * nbp * 8;
    const unsigned long long init[8] = {XXH_P32_3, XXH_P64_1, XXH_P64_2, XXH_P64_3,
                                        XXH_P64_4, XXH_P32_2, XXH_P64_5, XXH_P32_1};
    const unsigned long long sec = t < 8 ? xxh_sec64(192 - 64 + 8 * t) : 0;
    unsigned long long a = t < 8 ? init[t] : 0;
    /* the blocks before the last: scrambled after each */
    const size_t ntiles = (nb + XXH_CHAIN_TILE - 1) / XXH_CHAIN_TILE;
    if (ntiles > 0) {
        const size_t cnt = nb < XXH_CHAIN_TILE ? nb : XXH_CHAIN_TILE;
        for (size_t j = (size_t)t; j < cnt * 8; j += blockDim.x)
            tile[0][j] = sums[j];
    }
    __syncthreads();
    for (size_t ti = 0; ti < ntiles; ti++) {
        const size_t b0 = ti * XXH_CHAIN_TILE;
        if (t < 8) {
            const size_t cnt = nb - b0 < XXH_CHAIN_TILE ? nb - b0 : XXH_CHAIN_TILE;
            const unsigned long long *cur = tile[ti & 1];
#pragma unroll 8
            for (size_t k = 0; k < cnt; k++) {
                a += cur[k * 8 + t];
                a = ((a ^ (a >> 47)) ^ sec) * XXH_P32_1;
            }
        } else if (t >= 32 && ti + 1 < ntiles) {
            /* the next tile, by the warps that do not chain */
            const size_t b1 = b0 + XXH_CHAIN_TILE;
            const size_t cnt = nb - b1 < XXH_CHAIN_TILE ? nb - b1 : XXH_CHAIN_TILE;
            unsigned long long *nxt = tile[(ti + 1) & 1];
            for (size_t j = (size_t)t - 32; j < cnt * 8; j += blockDim.x - 32)
                nxt[j] = sums[b1 * 8 + j];
        }
        __syncthreads();
    }
    if (t < 8) {
        a += sums[nb * 8 + t];                                 /* the last block's stripes */
        a += xxh_stripe_part(in + len - 64, 192 - 64 - 7, t); /* the last stripe */
        acc[t] = a;
    }
    __syncthreads();
    if (t == 0) {
        unsigned long long lo = (unsigned long long)len * XXH_P64_1;
        unsigned long long hi = ~((unsigned long long)len * XXH_P64_2);
        for (int i = 0; i < 4; i++) {
            lo += xxh_mul128_fold64(acc[2 * i] ^ xxh_sec64(11 + 16 * i),
                                    acc[2 * i + 1] ^ xxh_sec64(11 + 16 * i + 8));
            hi += xxh_mul128_fold64(acc[2 * i] ^ xxh_sec64(192 - 64 - 11 + 16 * i),
                                    acc[2 * i + 1] ^ xxh_sec64(192 - 64 - 11 + 16 * i + 8));
        }
        out[2 * q] = xxh_avalanche(lo);
        out[2 * q + 1] = xxh_avalanche(hi);
    }
}

/* ------------------------------------------------------------------------ */
/*  C ABI                                                                   */
/* ------------------------------------------------------------------------ */

static int kcu_available(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky "no driver" error */
        return 0;
    }
    return n > 0;
}

static const char *kcu_why(void)
{
    static thread_local char why[320];
    int n = 0, rt = 0, drv = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaSuccess && n > 0)
        return "";
    cudaGetLastError();
    cudaRuntimeGetVersion(&rt);
    if (cudaDriverGetVersion(&drv) != cudaSuccess)
        drv = 0;
    char drv_s[96];
    if (drv > 0)
        snprintf(drv_s, sizeof(drv_s), "the driver supports CUDA %d.%d", drv / 1000,
                 drv % 1000 / 10);
    else
        snprintf(drv_s, sizeof(drv_s), "no CUDA driver (libcuda.so.1) is installed");
    if (e == cudaSuccess)
        snprintf(why, sizeof(why), "no CUDA device (%s)", drv_s);
    else
        snprintf(why, sizeof(why), "%s (%s): deltacast's CUDA runtime is %d.%d, and %s",
                 cudaGetErrorString(e), cudaGetErrorName(e), rt / 1000, rt % 1000 / 10, drv_s);
    return why;
}

static dc_status_t kcu_props(dc_kern_cuda_props_t *out)
{
    dc_status_t st = DC_OK;
    int dev = 0, clk_khz = 0, bus_bits = 0;
    cudaDeviceProp p;
    dc_kern_cuda_props_t r;
    memset(&r, 0, sizeof(r));
    CU_TRY(cudaGetDevice(&dev), "get device");
    CU_TRY(cudaGetDeviceProperties(&p, dev), "device properties");
    snprintf(r.name, sizeof(r.name), "%s", p.name);
    r.sm_count = p.multiProcessorCount;
    r.cc_major = p.major;
    r.cc_minor = p.minor;
    r.total_mem = p.totalGlobalMem;
    if (cudaDeviceGetAttribute(&clk_khz, cudaDevAttrMemoryClockRate, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, dev) !=
            cudaSuccess) {
        cudaGetLastError();
        clk_khz = 0;
    }
    r.mem_bw_gbs = 2.0 * clk_khz * 1e3 * (bus_bits / 8.0) / 1e9;
    *out = r;
out:
    return st;
}

static dc_status_t kcu_malloc(void **dptr, size_t bytes)
{
    dc_status_t st = DC_OK;
    void *p = NULL;
    CU_TRY(cudaMalloc(&p, bytes ? bytes : 1), "malloc");
    *dptr = p;
out:
    return st;
}

static void kcu_free(void *dptr)
{
    if (dptr != NULL)
        cudaFree(dptr);
}

static dc_status_t kcu_host_register(void *p, size_t bytes)
{
    dc_status_t st = DC_OK;
    if (p == NULL || bytes == 0)
        return dc_error(DC_ERR_INVALID, "cuda: nothing to page-lock");
    CU_TRY(cudaHostRegister(p, bytes, cudaHostRegisterDefault), "page-lock host memory");
out:
    if (st != DC_OK)
        cudaGetLastError(); /* the caller carries on: no stale error for its next launch */
    return st;
}

static void kcu_host_unregister(void *p)
{
    if (p != NULL && cudaHostUnregister(p) != cudaSuccess)
        cudaGetLastError();
}

/* The copies and memsets on the default stream wait for them to finish:
 * from pageable memory cudaMemcpy returns before its DMA lands, and a
 * memset or a device-to-device copy is asynchronous, while the device
 * senders' work runs on their own non-blocking streams (which the default
 * stream does not order). */
static dc_status_t kcu_h2d(void *dst, const void *src, size_t bytes)
{
    dc_status_t st = DC_OK;
    if (bytes) {
        CU_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "copy to device");
        CU_TRY(cudaStreamSynchronize(0), "copy to device");
    }
out:
    return st;
}

static dc_status_t kcu_d2h(void *dst, const void *src, size_t bytes)
{
    dc_status_t st = DC_OK;
    if (bytes)
        CU_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "copy to host");
out:
    return st;
}

static dc_status_t kcu_memset(void *dst, int byte, size_t bytes)
{
    dc_status_t st = DC_OK;
    if (bytes) {
        CU_TRY(cudaMemset(dst, byte, bytes), "memset");
        CU_TRY(cudaStreamSynchronize(0), "memset");
    }
out:
    return st;
}

static dc_status_t kcu_stream_create(void **stream)
{
    dc_status_t st = DC_OK;
    cudaStream_t s = NULL;
    *stream = NULL;
    CU_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream create");
    *stream = (void *)s;
out:
    return st;
}

static void kcu_stream_destroy(void *stream)
{
    if (stream)
        cudaStreamDestroy(S(stream));
}

/* a copy in direction dir (kern_cuda.h DC_KCU_*) on stream, waited for */
static dc_status_t kcu_copy(void *dst, const void *src, size_t bytes, int dir, void *stream)
{
    dc_status_t st = DC_OK;
    const cudaMemcpyKind k = dir == DC_KCU_H2D   ? cudaMemcpyHostToDevice
                             : dir == DC_KCU_D2H ? cudaMemcpyDeviceToHost
                                                 : cudaMemcpyDeviceToDevice;
    if (bytes) {
        CU_TRY(cudaMemcpyAsync(dst, src, bytes, k, S(stream)), "copy");
        CU_TRY(cudaStreamSynchronize(S(stream)), "copy");
    }
out:
    return st;
}

static dc_status_t kcu_sync(void *stream)
{
    dc_status_t st = DC_OK;
    CU_TRY(cudaStreamSynchronize(S(stream)), "stream synchronize");
out:
    return st;
}

static dc_status_t kcu_count_changed(const void *a, const void *b, size_t n,
                                                  unsigned w, size_t *count, void *stream)
{
    if (!valid_width(w))
        return dc_error(DC_ERR_INVALID, "cuda count: element width %u is not 1, 2, 4 or 8", w);
    if (n == 0) {
        *count = 0;
        return DC_OK;
    }
    return diff_dispatch(a, b, n, w, NULL, NULL, 0, false, count, stream);
}

static dc_status_t kcu_diff(const void *a, const void *b, size_t n, unsigned w,
                                         uint32_t *pos, void *xorw, size_t cap, size_t *count,
                                         void *stream)
{
    if (!valid_width(w))
        return dc_error(DC_ERR_INVALID, "cuda diff: element width %u is not 1, 2, 4 or 8", w);
    if (n > (size_t)UINT32_MAX + 1)
        return dc_error(DC_ERR_INVALID, "cuda diff: %zu elements do not fit 32-bit positions",
                        n);
    if (cap > 0 && ((uintptr_t)pos & 3) != 0)
        return dc_error(DC_ERR_INVALID, "cuda diff: positions array is not 4-byte aligned");
    if (n == 0) {
        *count = 0;
        return DC_OK;
    }
    return diff_dispatch(a, b, n, w, pos, xorw, cap, true, count, stream);
}

static dc_status_t kcu_gather(const void *b, unsigned w, const uint32_t *pos,
                                           size_t count, void *vals, void *stream)
{
    dc_status_t st = DC_OK;
    if (!valid_width(w))
        return dc_error(DC_ERR_INVALID, "cuda gather: element width %u is not 1, 2, 4 or 8",
                        w);
    if (count == 0)
        return DC_OK;
    const bool al = (((uintptr_t)b | (uintptr_t)vals) & (w - 1)) == 0;
    const unsigned g = grid_for(count, BLOCK);
    const uint8_t *pb = (const uint8_t *)b;
    uint8_t *pv = (uint8_t *)vals;
    switch (w) {
    case 1: DC_LAUNCH(k_gather<1>, g, BLOCK, S(stream))(pb, pos, count, pv, al); break;
    case 2: DC_LAUNCH(k_gather<2>, g, BLOCK, S(stream))(pb, pos, count, pv, al); break;
    case 4: DC_LAUNCH(k_gather<4>, g, BLOCK, S(stream))(pb, pos, count, pv, al); break;
    default: DC_LAUNCH(k_gather<8>, g, BLOCK, S(stream))(pb, pos, count, pv, al); break;
    }
    CU_TRY(cudaGetLastError(), "gather kernel");
out:
    return st;
}

static dc_status_t scatter(void *dst, size_t n, unsigned w, const uint32_t *pos,
                           const void *src, size_t count, void *stream, bool do_xor)
{
    const char *what = do_xor ? "xor scatter" : "overwrite scatter";
    dc_status_t st = DC_OK;
    unsigned long long *flag = NULL, bad = NONE_BAD;
    cudaStream_t s = S(stream);
    if (!valid_width(w))
        return dc_error(DC_ERR_INVALID, "cuda %s: element width %u is not 1, 2, 4 or 8", what,
                        w);
    if (count == 0)
        return DC_OK;
    if (((uintptr_t)pos & 3) != 0)
        return dc_error(DC_ERR_INVALID, "cuda %s: positions array is not 4-byte aligned",
                        what);
    const unsigned g = grid_for(count, BLOCK);
    CU_TRY(cudaMallocAsync((void **)&flag, sizeof(*flag), s), "scatter flag");
    CU_TRY(cudaMemsetAsync(flag, 0xff, sizeof(*flag), s), "scatter flag");
    DC_LAUNCH(k_validate, g, BLOCK, s)(pos, count, n, flag);
    CU_TRY(cudaGetLastError(), "validate kernel");
    CU_TRY(cudaMemcpyAsync(&bad, flag, sizeof(bad), cudaMemcpyDeviceToHost, s), "flag copy");
    CU_TRY(cudaStreamSynchronize(s), "validate");
    if (bad != NONE_BAD) {
        uint32_t pv[2] = {0, 0};
        size_t k = (size_t)bad;
        CU_TRY(cudaMemcpyAsync(pv, pos + (k > 0 ? k - 1 : 0),
                               (k > 0 ? 2 : 1) * sizeof(uint32_t), cudaMemcpyDeviceToHost, s),
               "position copy");
        CU_TRY(cudaStreamSynchronize(s), "position copy");
        uint32_t cur = k > 0 ? pv[1] : pv[0];
        if (cur >= n)
            st = dc_error(DC_ERR_FORMAT, "%s: position %u at index %zu is out of range (%zu "
                          "elements)", what, cur, k, n);
        else
            st = dc_error(DC_ERR_FORMAT, "%s: positions not strictly increasing at index %zu "
                          "(%u after %u)", what, k, cur, pv[0]);
        goto out;
    }
    {
        const bool al = (((uintptr_t)dst | (uintptr_t)src) & (w - 1)) == 0;
        uint8_t *pd = (uint8_t *)dst;
        const uint8_t *ps = (const uint8_t *)src;
        switch (w) {
        case 1: DC_LAUNCH(k_scatter<1>, g, BLOCK, s)(pd, pos, count, ps, al, do_xor); break;
        case 2: DC_LAUNCH(k_scatter<2>, g, BLOCK, s)(pd, pos, count, ps, al, do_xor); break;
        case 4: DC_LAUNCH(k_scatter<4>, g, BLOCK, s)(pd, pos, count, ps, al, do_xor); break;
        default: DC_LAUNCH(k_scatter<8>, g, BLOCK, s)(pd, pos, count, ps, al, do_xor); break;
        }
        CU_TRY(cudaGetLastError(), "scatter kernel");
        CU_TRY(cudaStreamSynchronize(s), "scatter");
    }
out:
    if (flag != NULL)
        cudaFreeAsync(flag, s);
    return st;
}

static dc_status_t kcu_xor_scatter(void *dst, size_t n, unsigned w,
                                                const uint32_t *pos, const void *xorw,
                                                size_t count, void *stream)
{
    return scatter(dst, n, w, pos, xorw, count, stream, true);
}

static dc_status_t kcu_put_scatter(void *dst, size_t n, unsigned w,
                                                const uint32_t *pos, const void *vals,
                                                size_t count, void *stream)
{
    return scatter(dst, n, w, pos, vals, count, stream, false);
}

static dc_status_t kcu_xor_dense(void *dst, const void *src, size_t bytes,
                                              void *stream)
{
    dc_status_t st = DC_OK;
    if (bytes == 0)
        return DC_OK;
    if ((((uintptr_t)dst | (uintptr_t)src) & 15) == 0) {
        size_t units = bytes / 16, tail = bytes % 16;
        if (units) {
            DC_LAUNCH(k_xor_dense16, grid_for(units, BLOCK * 4), BLOCK, S(stream))(
                (uint4 *)dst, (const uint4 *)src, units);
            CU_TRY(cudaGetLastError(), "xor dense kernel");
        }
        if (tail) {
            DC_LAUNCH(k_xor_dense1, 1, 32, S(stream))((uint8_t *)dst + units * 16,
                                                  (const uint8_t *)src + units * 16, tail);
            CU_TRY(cudaGetLastError(), "xor dense kernel");
        }
    } else {
        DC_LAUNCH(k_xor_dense1, grid_for(bytes, BLOCK * 16), BLOCK, S(stream))(
            (uint8_t *)dst, (const uint8_t *)src, bytes);
        CU_TRY(cudaGetLastError(), "xor dense kernel");
    }
out:
    return st;
}

static dc_status_t kcu_digest128(const void *buf, size_t len, dc_digest_t *out,
                                              void *stream)
{
    dc_status_t st = DC_OK;
    const size_t PIECE = (size_t)8 << 20;
    uint8_t *stage[2] = {NULL, NULL};
    cudaEvent_t ev[2] = {NULL, NULL};
    cudaStream_t s = S(stream);
    XXH3_state_t *xs = XXH3_createState();
    if (xs == NULL)
        return dc_error(DC_ERR_NOMEM, "cuda digest: no memory for the hash state");
    XXH3_128bits_reset(xs);
    if (len > 0) {
        const uint8_t *src = (const uint8_t *)buf;
        size_t pieces = (len + PIECE - 1) / PIECE;
        for (int i = 0; i < 2; i++) {
            CU_TRY(cudaMallocHost((void **)&stage[i], PIECE), "digest staging buffer");
            CU_TRY(cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming), "digest event");
        }
        /* copy piece i+1 while hashing piece i */
        CU_TRY(cudaMemcpyAsync(stage[0], src, DC_MIN(len, PIECE), cudaMemcpyDeviceToHost, s),
               "digest copy");
        CU_TRY(cudaEventRecord(ev[0], s), "digest event");
        for (size_t i = 0; i < pieces; i++) {
            size_t off = i * PIECE, sz = DC_MIN(len - off, PIECE);
            if (i + 1 < pieces) {
                size_t off2 = off + PIECE, sz2 = DC_MIN(len - off2, PIECE);
                CU_TRY(cudaMemcpyAsync(stage[(i + 1) & 1], src + off2, sz2,
                                       cudaMemcpyDeviceToHost, s),
                       "digest copy");
                CU_TRY(cudaEventRecord(ev[(i + 1) & 1], s), "digest event");
            }
            CU_TRY(cudaEventSynchronize(ev[i & 1]), "digest copy");
            XXH3_128bits_update(xs, stage[i & 1], sz);
        }
    }
    {
        XXH128_hash_t h = XXH3_128bits_digest(xs);
        out->lo = h.low64;
        out->hi = h.high64;
    }
out:
    if (st != DC_OK)
        cudaStreamSynchronize(s);
    for (int i = 0; i < 2; i++) {
        if (ev[i] != NULL)
            cudaEventDestroy(ev[i]);
        if (stage[i] != NULL)
            cudaFreeHost(stage[i]);
    }
    XXH3_freeState(xs);
    return st;
}

static dc_status_t kcu_crc32c(const void *buf, size_t len, uint32_t crc,
                                           uint32_t *out, void *stream)
{
    dc_status_t st = DC_OK;
    uint32_t *dres = NULL, host = 0;
    cudaStream_t s = S(stream);
    if (out == NULL || (buf == NULL && len > 0))
        return dc_error(DC_ERR_INVALID, "cuda crc32c: NULL buffer or result");
    if (len == 0) {
        *out = crc;
        return DC_OK;
    }
    const uint8_t *p = (const uint8_t *)buf;
    const size_t head = DC_MIN(len, (size_t)((16 - ((uintptr_t)p & 15)) & 15));
    const size_t tiles = (len - head) / CRC_TILE;
    const size_t tail = head + tiles * CRC_TILE;
    CU_TRY(cudaMallocAsync((void **)&dres, sizeof(*dres), s), "crc32c result");
    CU_TRY(cudaMemsetAsync(dres, 0, sizeof(*dres), s), "crc32c result");
    if (tiles) {
        /* at least 32 tiles (128 KiB) per block once there are enough */
        size_t g = tiles <= 64 ? tiles : DC_MAX((size_t)64, tiles / 32);
        g = DC_MIN(g, (size_t)65535);
        DC_LAUNCH(k_crc_main, (unsigned)g, BLOCK, s)((const uint4 *)(p + head), tiles,
                                           (unsigned long long)(len - tail), dres);
        CU_TRY(cudaGetLastError(), "crc32c kernel");
    }
    DC_LAUNCH(k_crc_rest, 1, BLOCK, s)(p, len, head, tail, ~crc, dres);
    CU_TRY(cudaGetLastError(), "crc32c kernel");
    CU_TRY(cudaMemcpyAsync(&host, dres, sizeof(host), cudaMemcpyDeviceToHost, s),
           "crc32c result copy");
    CU_TRY(cudaFreeAsync(dres, s), "crc32c result free");
    dres = NULL;
    CU_TRY(cudaStreamSynchronize(s), "crc32c");
    *out = ~host;
out:
    free_wait(dres, s);
    return st;
}

/* XXH3-128 of each `piece`-byte piece of device memory buf[0, len) (the
 * last one shorter when len is not a multiple): outs[q] = dc_digest128 of
 * piece q.  Pieces of <= 240 bytes (XXH3's short paths; only the last can
 * be, or all when piece is) are copied back and hashed on the host. */
static dc_status_t kcu_digest128_dev_pieces(const void *buf, size_t len, size_t piece,
                                            dc_digest_t *outs, void *stream)
{
    dc_status_t st = DC_OK;
    cudaStream_t s = S(stream);
    unsigned long long *dres = NULL, *host = NULL;
    if (outs == NULL || (buf == NULL && len > 0) || (piece == 0 && len > 0))
        return dc_error(DC_ERR_INVALID, "cuda digest: NULL buffer or result, or no piece size");
    if (len == 0) {
        XXH128_hash_t h = XXH3_128bits(NULL, 0);
        outs[0].lo = h.low64;
        outs[0].hi = h.high64;
        return DC_OK;
    }
    const size_t npieces = (len + piece - 1) / piece, last = len - (npieces - 1) * piece;
    /* the pieces hashed on the device: all but a short last one */
    const size_t ndev = piece < XXH_MIN_LONG ? 0 : last < XXH_MIN_LONG ? npieces - 1 : npieces;
    if (ndev) {
        const size_t dlen = ndev == npieces ? len : ndev * piece;
        const size_t nbp = (piece - 1) / 1024 + 1, nsum = ndev * nbp * 8;
        /* the results (2 words each), then the blocks' sums (8 words each) */
        CU_TRY(cudaMallocAsync((void **)&dres, (2 * ndev + nsum) * sizeof(*dres), s),
               "digest scratch");
        host = (unsigned long long *)malloc(2 * ndev * sizeof(*host));
        if (host == NULL) {
            st = dc_error(DC_ERR_NOMEM, "cuda digest: no memory for %zu results", ndev);
            goto out;
        }
        const unsigned threads = 256;
        DC_LAUNCH(k_xxh3_block_sums, (unsigned)((nsum + threads - 1) / threads), threads, s)(
            (const uint8_t *)buf, dlen, piece, ndev, nbp, dres + 2 * ndev);
        DC_LAUNCH(k_xxh3_128_chain, (unsigned)ndev, XXH_CHAIN_THREADS, s)((const uint8_t *)buf, dlen, piece, nbp,
                                                          dres + 2 * ndev, dres);
        CU_TRY(cudaGetLastError(), "digest kernel");
        CU_TRY(cudaMemcpyAsync(host, dres, 2 * ndev * sizeof(*host), cudaMemcpyDeviceToHost, s),
               "digest result copy");
        CU_TRY(cudaStreamSynchronize(s), "digest");
        for (size_t q = 0; q < ndev; q++) {
            outs[q].lo = host[2 * q];
            outs[q].hi = host[2 * q + 1];
        }
    }
    for (size_t q = ndev; q < npieces; q++) { /* XXH3's short paths, on the host */
        uint8_t small[XXH_MIN_LONG];
        const size_t l = q + 1 < npieces ? piece : last;
        CU_TRY(cudaMemcpyAsync(small, (const uint8_t *)buf + q * piece, l,
                               cudaMemcpyDeviceToHost, s),
               "digest copy");
        CU_TRY(cudaStreamSynchronize(s), "digest copy");
        XXH128_hash_t h = XXH3_128bits(small, l);
        outs[q].lo = h.low64;
        outs[q].hi = h.high64;
    }
out:
    free(host);
    free_wait(dres, s);
    return st;
}

static dc_status_t kcu_digest128_dev(const void *buf, size_t len, dc_digest_t *out,
                                     void *stream)
{
    if (out == NULL || (buf == NULL && len > 0))
        return dc_error(DC_ERR_INVALID, "cuda digest: NULL buffer or result");
    return kcu_digest128_dev_pieces(buf, len, len ? len : 1, out, stream);
}

/* ------------------------------------------------------------------------ */
/*  Values stream decoder (entropy.h DC_ENT_RAW / RANS / PLANES)            */
/* ------------------------------------------------------------------------ */

/*
 * One 32-thread block decodes one values stream, bit-identical to
 * dc_ent_val_decode() and with its accept/reject verdict (every read
 * bounds-checked; a corrupt stream sets an error code, never a fault).
 * Thread 0 parses each rANS stream's header and table (sequential varints)
 * and fills the slot tables; then a 32-way stream is decoded one lane per
 * state: symbol i by lane i % 32, the lanes whose state fell below 2^15
 * take the next 16-bit words in lane order (a ballot and a popcount give
 * each lane its word), exactly as the CPU loop meets them.  The 1/2/4-way
 * layouts (byte renormalization, one chain through the data) are decoded
 * by thread 0 alone.
 */
enum {
    VD_OK = 0,
    VD_TRUNC_HDR,   /* rANS stream truncated (header) */
    VD_BITS,        /* symbol width byte */
    VD_SCALE,       /* scale out of range */
    VD_TABLE_TRUNC, /* table varints truncated */
    VD_NSYM,        /* symbol count out of range */
    VD_ENTRY,       /* table entry out of range */
    VD_SUM,         /* frequencies do not sum to 2^S */
    VD_STATE,       /* initial state out of range */
    VD_ODD,         /* 32-way data of an odd length */
    VD_DATA_TRUNC,  /* data truncated */
    VD_END,         /* stream does not end cleanly */
    VD_PLANE_LEN,   /* plane length varint bad */
    VD_TRAILING,    /* trailing bytes after the planes */
    VD_RAW_LEN,     /* raw values of the wrong length */
    VD_N
};

static const char *const vd_msg[VD_N] = {
    "ok",
    "rANS stream truncated",
    "rANS stream has the wrong symbol width",
    "rANS scale out of range",
    "rANS table truncated",
    "rANS table has a bad symbol count",
    "rANS table entry out of range",
    "rANS frequencies do not sum to 2^scale",
    "rANS initial state out of range",
    "32-way rANS data of an odd number of bytes",
    "rANS data truncated",
    "rANS stream does not end cleanly",
    "plane: bad length",
    "planes: trailing bytes",
    "raw values of the wrong length",
};

struct vd_shared {
    uint32_t x[32];
    unsigned long long p, end; /* data, relative to the stream */
    unsigned S, ways, err, stream;
};

/* dc_ent_get_varint on [*p, len) */
__device__ static bool vd_varint(const uint8_t *src, size_t len, size_t *p,
                                 unsigned long long *v)
{
    unsigned long long r = 0;
    size_t q = *p;
    for (unsigned i = 0; i < 10; i++) {
        if (q >= len)
            return false;
        uint8_t b = src[q++];
        if (i == 9 && b > 1)
            return false;
        r |= (unsigned long long)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *p = q;
            *v = r;
            return true;
        }
    }
    return false;
}

__device__ static uint32_t vd_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Thread 0: dc_rans_dec_init_slot's checks, the tables (ftab[j] = (f - 1)
 * << 16 | (j - cum), stab[j] = symbol) and the states into sh; sh->err on
 * a bad stream. */
__device__ static void vd_init(const uint8_t *src, size_t len, unsigned bits, uint32_t *ftab,
                               uint16_t *stab, vd_shared *sh)
{
    if (len < 2) {
        sh->err = VD_TRUNC_HDR;
        return;
    }
    unsigned sb = src[0], S = src[1];
    unsigned wf = sb & 0xC0u;
    unsigned ways = wf == 0xC0u ? 32 : wf == 0x40u ? 4 : wf == 0x80u ? 2 : 1;
    sb &= ~0xC0u;
    if (sb != bits) {
        sh->err = VD_BITS;
        return;
    }
    if (S < 8 || S > (ways == 32 ? 15u : 16u)) {
        sh->err = VD_SCALE;
        return;
    }
    const unsigned long long M = 1ull << S;
    size_t p = 2;
    unsigned long long nsym;
    if (!vd_varint(src, len, &p, &nsym)) {
        sh->err = VD_TABLE_TRUNC;
        return;
    }
    if (nsym < 1 || nsym > M || nsym > (1ull << bits)) {
        sh->err = VD_NSYM;
        return;
    }
    unsigned long long c = 0, acc = 0;
    for (unsigned long long k = 0; k < nsym; k++) {
        unsigned long long dl, f;
        if (!vd_varint(src, len, &p, &dl) || !vd_varint(src, len, &p, &f)) {
            sh->err = VD_TABLE_TRUNC;
            return;
        }
        c = k == 0 ? dl : c + dl + 1;
        f += 1;
        if (c >= (1ull << bits) || dl >= (1ull << bits) || f > M || acc + f > M) {
            sh->err = VD_ENTRY;
            return;
        }
        for (unsigned long long j = acc; j < acc + f; j++) {
            ftab[j] = (uint32_t)((f - 1) << 16 | (j - acc));
            stab[j] = (uint16_t)c;
        }
        acc += f;
    }
    if (acc != M) {
        sh->err = VD_SUM;
        return;
    }
    if (len - p < 4ull * ways) {
        sh->err = VD_TRUNC_HDR;
        return;
    }
    const uint32_t L = ways == 32 ? 1u << 15 : 1u << 23;
    for (unsigned j = 0; j < 32; j++)
        sh->x[j] = L;
    for (unsigned j = 0; j < ways; j++) {
        uint32_t x = vd_le32(src + p + 4 * j);
        if (x < L || x >= (1u << 31)) {
            sh->err = VD_STATE;
            return;
        }
        sh->x[j] = x;
    }
    p += 4ull * ways;
    if (ways == 32 && (len - p) % 2) {
        sh->err = VD_ODD;
        return;
    }
    sh->p = p;
    sh->end = len;
    sh->S = S;
    sh->ways = ways;
}

/* A whole rANS stream of count symbols into out + i * stride (all 32
 * threads of the block call it). */
__device__ static void vd_stream(const uint8_t *src, size_t len, size_t count, unsigned bits,
                                 uint8_t *out, unsigned stride, uint32_t *ftab, uint16_t *stab,
                                 vd_shared *sh)
{
    const unsigned lane = threadIdx.x;
    if (lane == 0)
        vd_init(src, len, bits, ftab, stab, sh);
    __syncthreads();
    const unsigned e0 = sh->err, S = sh->S, ways = sh->ways;
    const size_t end = (size_t)sh->end;
    __syncthreads();
    if (e0) {
        __syncthreads();
        return;
    }
    const uint32_t mask = (1u << S) - 1;
    if (ways == 32) {
        size_t p = (size_t)sh->p;
        uint32_t x = sh->x[lane];
        bool bad = false;
        for (size_t i0 = 0; i0 < count; i0 += 32) {
            const size_t i = i0 + lane;
            unsigned need = 0;
            uint16_t sym = 0;
            if (i < count) {
                uint32_t e = ftab[x & mask];
                sym = stab[x & mask];
                x = ((e >> 16) + 1) * (x >> S) + (e & 0xffff);
                need = x < (1u << 15);
            }
            unsigned m = __ballot_sync(0xffffffffu, need);
            size_t np = p + 2 * (size_t)__popc(m);
            if (np > end) { /* the same for every lane */
                bad = true;
                break;
            }
            if (need) {
                size_t q = p + 2 * (size_t)__popc(m & ((1u << lane) - 1));
                x = x << 16 | (uint32_t)src[q] | (uint32_t)src[q + 1] << 8;
            }
            p = np;
            if (i < count) {
                if (bits == 16) {
                    out[i * stride] = (uint8_t)sym;
                    out[i * stride + 1] = (uint8_t)(sym >> 8);
                } else {
                    out[i * stride] = (uint8_t)sym;
                }
            }
        }
        unsigned off = __ballot_sync(0xffffffffu, !bad && x != (1u << 15));
        if (lane == 0)
            sh->err = bad                  ? (unsigned)VD_DATA_TRUNC
                      : (off || p != end) ? (unsigned)VD_END
                                          : (unsigned)VD_OK;
    } else if (lane == 0) {
        uint32_t xs[4] = {sh->x[0], sh->x[1], sh->x[2], sh->x[3]};
        size_t p = (size_t)sh->p;
        unsigned err = VD_OK;
        for (size_t i = 0; i < count && !err; i++) {
            uint32_t x = xs[i & (ways - 1)];
            uint32_t e = ftab[x & mask];
            uint16_t sym = stab[x & mask];
            x = ((e >> 16) + 1) * (x >> S) + (e & 0xffff);
            while (x < (1u << 23)) {
                if (p >= end) {
                    err = VD_DATA_TRUNC;
                    break;
                }
                x = x << 8 | src[p++];
            }
            xs[i & (ways - 1)] = x;
            if (bits == 16) {
                out[i * stride] = (uint8_t)sym;
                out[i * stride + 1] = (uint8_t)(sym >> 8);
            } else {
                out[i * stride] = (uint8_t)sym;
            }
        }
        if (!err && (p != end || xs[0] != (1u << 23) || xs[1] != (1u << 23) ||
                     xs[2] != (1u << 23) || xs[3] != (1u << 23)))
            err = VD_END;
        sh->err = err;
    }
    __syncthreads();
}

/* res[0] = error code (VD_*), res[1] = the plane (PLANES) */
__global__ void k_values_decode(unsigned method, const uint8_t *src, size_t len, size_t count,
                                unsigned w, uint8_t *out, uint32_t *ftab, uint16_t *stab,
                                unsigned *res)
{
    __shared__ vd_shared sh;
    const unsigned lane = threadIdx.x;
    if (lane == 0) {
        sh.err = VD_OK;
        sh.stream = 0;
    }
    __syncthreads();
    if (method == DC_ENT_RAW) {
        if (len != count * w) {
            if (lane == 0)
                res[0] = VD_RAW_LEN;
            return;
        }
        for (size_t k = lane; k < len; k += 32)
            out[k] = src[k];
        return;
    }
    if (method == DC_ENT_RANS) {
        if (count == 0) {
            if (lane == 0)
                res[0] = len == 0 ? (unsigned)VD_OK : (unsigned)VD_TRAILING;
            return;
        }
        vd_stream(src, len, count, 8 * w, out, w, ftab, stab, &sh);
        if (lane == 0)
            res[0] = sh.err;
        return;
    }
    /* DC_ENT_PLANES: thread 0 reads each plane's length */
    __shared__ unsigned long long qpos, plen;
    if (lane == 0)
        qpos = 0;
    __syncthreads();
    for (unsigned j = 0; j < w; j++) {
        if (lane == 0) {
            size_t q = (size_t)qpos;
            unsigned long long l;
            sh.stream = j;
            if (!vd_varint(src, len, &q, &l) || l > len - q) {
                sh.err = VD_PLANE_LEN;
            } else {
                qpos = q;
                plen = l;
            }
        }
        __syncthreads();
        const unsigned e = sh.err;
        const size_t at = (size_t)qpos, l = (size_t)plen;
        __syncthreads();
        if (e)
            break;
        vd_stream(src + at, l, count, 8, out + j, w, ftab, stab, &sh);
        const unsigned e2 = sh.err;
        __syncthreads();
        if (e2)
            break;
        if (lane == 0)
            qpos = at + l;
    }
    if (lane == 0) {
        res[0] = sh.err ? sh.err : qpos != len ? (unsigned)VD_TRAILING : (unsigned)VD_OK;
        res[1] = sh.stream;
    }
}

static dc_status_t kcu_values_decode(unsigned method, const void *src, size_t len,
                                     size_t count, unsigned w, void *out, void *stream)
{
    dc_status_t st = DC_OK;
    cudaStream_t s = S(stream);
    uint8_t *scratch = NULL;
    unsigned res[2] = {VD_OK, 0};
    if (!valid_width(w))
        return dc_error(DC_ERR_INVALID, "cuda values decode: element width %u is not 1, 2, 4 "
                        "or 8", w);
    if (method == DC_ENT_ZSTD)
        return dc_error(DC_ERR_UNSUPPORTED, "cuda values decode: zstd values have no device "
                        "decoder");
    if (method != DC_ENT_RAW && method != DC_ENT_RANS && method != DC_ENT_PLANES)
        return dc_error(DC_ERR_FORMAT, "unknown values method %u", method);
    if (method == DC_ENT_RANS && w > 2)
        return dc_error(DC_ERR_FORMAT, "rANS values need 1- or 2-byte words");
    /* the slot tables (2^16 slots at most) and the result */
    const size_t tab = (size_t)4 << 16, stb = (size_t)2 << 16;
    CU_TRY(cudaMallocAsync((void **)&scratch, tab + stb + 16, s), "values decode scratch");
    CU_TRY(cudaMemsetAsync(scratch + tab + stb, 0, 16, s), "values decode result");
    DC_LAUNCH(k_values_decode, 1, 32, s)(method, (const uint8_t *)src, len, count, w,
                                         (uint8_t *)out, (uint32_t *)scratch,
                                         (uint16_t *)(scratch + tab),
                                         (unsigned *)(scratch + tab + stb));
    CU_TRY(cudaGetLastError(), "values decode kernel");
    CU_TRY(cudaMemcpyAsync(res, scratch + tab + stb, sizeof(res), cudaMemcpyDeviceToHost, s),
           "values decode result");
    CU_TRY(cudaStreamSynchronize(s), "values decode");
    if (res[0] != VD_OK)
        st = dc_error(DC_ERR_FORMAT, "device values decode (%s, %zu values of %u bytes, %zu "
                      "bytes%s): %s", method == DC_ENT_RAW ? "raw" : method == DC_ENT_RANS
                      ? "rANS" : "planes", count, w, len, method == DC_ENT_PLANES
                      ? (res[1] == 0 ? ", plane 0" : res[1] == 1 ? ", plane 1" : res[1] == 2
                      ? ", plane 2" : ", plane >= 3") : "",
                      res[0] < VD_N ? vd_msg[res[0]] : "unknown error");
out:
    if (scratch != NULL)
        cudaFreeAsync(scratch, s);
    return st;
}

/* ------------------------------------------------------------------------ */
/*  Golomb positions decoder (entropy.h dc_ent_pos_decode)                  */
/* ------------------------------------------------------------------------ */

/*
 * One thread decodes a Golomb positions stream, bit for bit as the CPU's
 * careful path (dc_gd_careful: every read bounds-checked, the same
 * refusals, then dc_golomb_dec_finish's trailing-bits check).  The codes
 * are one chain through the bits: serial on a GPU (a per-thread split at
 * byte boundaries with a fix-up pass is the next step).
 */
enum {
    GD_OK = 0,
    GD_PARAM,    /* bad Golomb parameter varint or value */
    GD_COUNT,    /* more changes than elements */
    GD_TRUNC,    /* stream truncated */
    GD_GAP,      /* gap exceeds chunk */
    GD_REM,      /* bad remainder */
    GD_PAST,     /* position past the chunk */
    GD_TRAILING, /* trailing bytes */
    GD_N
};

static const char *const gd_msg[GD_N] = {
    "ok",
    "bad Golomb parameter",
    "more positions than elements",
    "stream truncated",
    "gap exceeds chunk",
    "bad remainder",
    "position past the chunk",
    "trailing bytes after the positions",
};

struct gd_bits {
    const uint8_t *src;
    size_t len, at; /* byte */
    unsigned bc;    /* bits used of src[at] */
};

__device__ static unsigned long long gd_left(const gd_bits *d)
{
    return (unsigned long long)(d->len - d->at) * 8 - d->bc;
}

/* the next nb (1..57, <= gd_left) bits, right-aligned */
__device__ static unsigned long long gd_peek(const gd_bits *d, unsigned nb)
{
    unsigned long long v = 0;
    size_t have = d->len - d->at;
    for (size_t i = 0; i < have && i < 8; i++)
        v |= (unsigned long long)d->src[d->at + i] << (56 - 8 * i);
    return (v << d->bc) >> (64 - nb);
}

__device__ static void gd_skip(gd_bits *d, unsigned long long nb)
{
    unsigned long long t = d->bc + nb;
    d->at += (size_t)(t >> 3);
    d->bc = (unsigned)(t & 7);
}

/* One stream, by the calling thread: res[0] = GD_*, res[1] = the index
 * of the position that failed */
__device__ static void golomb_run(const uint8_t *src, size_t len, size_t count,
                                  unsigned long long n, uint32_t *pos, unsigned *res)
{
    gd_bits d = {src, len, 0, 0};
    unsigned long long m;
    unsigned err = GD_OK;
    size_t k = 0;
    if (!vd_varint(src, len, &d.at, &m) || m < 1 || m > (1ull << 32)) {
        err = GD_PARAM;
        goto done;
    }
    if (count > n) {
        err = GD_COUNT;
        goto done;
    }
    {
        unsigned b = 0;
        while (b < 64 && (1ull << b) < m)
            b++;
        const unsigned long long cut = (b >= 64 ? 0 : (1ull << b)) - m;
        unsigned long long next = 0;
        for (; k < count; k++) {
            unsigned long long q = 0;
            for (;;) {
                unsigned long long left = gd_left(&d);
                if (left == 0) {
                    err = GD_TRUNC;
                    goto done;
                }
                unsigned nb = left < 57 ? (unsigned)left : 57;
                unsigned long long v = gd_peek(&d, nb);
                if (v == 0) {
                    q += nb;
                    gd_skip(&d, nb);
                    if (q > n) {
                        err = GD_GAP;
                        goto done;
                    }
                    continue;
                }
                unsigned lz = (unsigned)__clzll((long long)v) - (64 - nb);
                q += lz;
                gd_skip(&d, lz + 1);
                break;
            }
            if (q > n) {
                err = GD_GAP;
                goto done;
            }
            unsigned long long rem = 0;
            if (b) {
                if (gd_left(&d) < b - 1) {
                    err = GD_TRUNC;
                    goto done;
                }
                rem = b > 1 ? gd_peek(&d, b - 1) : 0;
                if (rem < cut) {
                    gd_skip(&d, b - 1);
                } else {
                    if (gd_left(&d) < b) {
                        err = GD_TRUNC;
                        goto done;
                    }
                    rem = gd_peek(&d, b) - cut;
                    gd_skip(&d, b);
                    if (rem >= m) {
                        err = GD_REM;
                        goto done;
                    }
                }
            }
            unsigned long long g = q * m + rem, ps = next + g;
            if (g > n || ps >= n) {
                err = GD_PAST;
                goto done;
            }
            pos[k] = (uint32_t)ps;
            next = ps + 1;
        }
        unsigned long long left = gd_left(&d);
        if (left >= 8 || (left && ((src[d.at] << d.bc) & 0xff) != 0))
            err = GD_TRAILING;
    }
done:
    res[0] = err;
    res[1] = (unsigned)k;
}

__global__ void k_golomb_decode(const uint8_t *src, size_t len, size_t count,
                                unsigned long long n, uint32_t *pos, unsigned *res)
{
    if (threadIdx.x != 0 || blockIdx.x != 0)
        return;
    golomb_run(src, len, count, n, pos, res);
}

/* several independent streams (a ctx chunk's classes), one thread each */
struct gd_jobs {
    const uint8_t *src[DC_KERN_CUDA_GOLOMB_MAX_STREAMS];
    size_t len[DC_KERN_CUDA_GOLOMB_MAX_STREAMS], count[DC_KERN_CUDA_GOLOMB_MAX_STREAMS];
    uint32_t *pos[DC_KERN_CUDA_GOLOMB_MAX_STREAMS];
};

__global__ void k_golomb_multi(gd_jobs jobs, unsigned njobs, unsigned long long n, unsigned *res)
{
    const unsigned j = threadIdx.x;
    if (blockIdx.x != 0 || j >= njobs)
        return;
    golomb_run(jobs.src[j], jobs.len[j], jobs.count[j], n, jobs.pos[j], res + 2 * j);
}

static dc_status_t kcu_golomb_decode(const void *src, size_t len, size_t count, uint64_t n,
                                     uint32_t *pos, void *stream)
{
    dc_status_t st = DC_OK;
    cudaStream_t s = S(stream);
    unsigned *dres = NULL, res[2] = {GD_OK, 0};
    if (((uintptr_t)pos & 3) != 0)
        return dc_error(DC_ERR_INVALID, "cuda positions decode: positions array is not 4-byte "
                        "aligned");
    CU_TRY(cudaMallocAsync((void **)&dres, sizeof(res), s), "positions decode result");
    DC_LAUNCH(k_golomb_decode, 1, 1, s)((const uint8_t *)src, len, count,
                                        (unsigned long long)n, pos, dres);
    CU_TRY(cudaGetLastError(), "positions decode kernel");
    CU_TRY(cudaMemcpyAsync(res, dres, sizeof(res), cudaMemcpyDeviceToHost, s),
           "positions decode result");
    CU_TRY(cudaStreamSynchronize(s), "positions decode");
    if (res[0] != GD_OK)
        st = dc_error(DC_ERR_FORMAT, "device positions decode (Golomb, %zu positions in %llu "
                      "elements, %zu bytes): %s at position %u", count,
                      (unsigned long long)n, len, res[0] < GD_N ? gd_msg[res[0]] : "unknown",
                      res[1]);
out:
    if (dres != NULL)
        cudaFreeAsync(dres, s);
    return st;
}

/* ------------------------------------------------------------------------ */
/*  ctx-sparse: ranks by class -> element positions, values applied         */
/* ------------------------------------------------------------------------ */

/*
 * The device half of kernels/ctx.c's decoder (dc_ctx_decode_run's merge and
 * patch), after the class streams and the values stream were decoded:
 *   k_ctx_count  per tile of CTX_TILE elements, its elements per class
 *                (a class = how many thresholds the base word's magnitude
 *                reaches, as ctx.h; one thread per 32 elements, a shared
 *                reduction);
 *   k_ctx_scan   per class, the exclusive prefix of the tile counts (one
 *                block, every class) and the class's population;
 *   k_ctx_check  one thread per change: its rank is below its class's
 *                population and above the class's previous rank (else the
 *                CPU's DC_ERR_FORMAT; nothing written yet);
 *   k_ctx_place  per tile: each class's elements in order in shared memory
 *                (a block scan per class), then every change whose rank
 *                falls in the tile gets its element index (one thread per
 *                change);
 *   k_ctx_apply  one thread per change: its index in element order (its
 *                rank among its class's changes plus, per other class, a
 *                binary search of that class's sorted elements), the
 *                values stream's word there (values are in element order
 *                across classes), the XOR word from it (mode 0 XOR word,
 *                1 step, 2 new word) and the base word, written in place.
 */
#define CTX_PER 32 /* elements per thread (a tile of 8192: few barriers per element) */
#define CTX_TILE (BLOCK * CTX_PER) /* elements per tile */

struct ctx_args {
    unsigned K, mode;
    unsigned long long thrm[DC_KERN_CUDA_CTX_MAX_CLASSES];
    unsigned long long off[DC_KERN_CUDA_CTX_MAX_CLASSES + 1];
};

template <int W> __device__ __forceinline__ unsigned long long ctx_ld(const uint8_t *p, size_t i, bool al)
{
    if (al) {
        if (W == 1)
            return p[i];
        if (W == 2)
            return reinterpret_cast<const uint16_t *>(p)[i];
        if (W == 4)
            return reinterpret_cast<const uint32_t *>(p)[i];
        return reinterpret_cast<const unsigned long long *>(p)[i];
    }
    unsigned long long v = 0;
#pragma unroll
    for (int b = 0; b < W; b++)
        v |= (unsigned long long)p[i * W + b] << (8 * b);
    return v;
}

template <int W> __device__ __forceinline__ void ctx_st(uint8_t *p, size_t i, bool al, unsigned long long v)
{
    if (al) {
        if (W == 1)
            p[i] = (uint8_t)v;
        else if (W == 2)
            reinterpret_cast<uint16_t *>(p)[i] = (uint16_t)v;
        else if (W == 4)
            reinterpret_cast<uint32_t *>(p)[i] = (uint32_t)v;
        else
            reinterpret_cast<unsigned long long *>(p)[i] = v;
        return;
    }
#pragma unroll
    for (int b = 0; b < W; b++)
        p[i * W + b] = (uint8_t)(v >> (8 * b));
}

/* class of a base word: how many thresholds its magnitude (top bit
 * cleared) reaches (ctx.h) */
template <int W> __device__ __forceinline__ unsigned ctx_class(unsigned long long b, const ctx_args &a)
{
    const unsigned long long mag = b & ((1ull << (8 * W - 1)) - 1);
    unsigned c = 0;
    for (unsigned j = 0; j + 1 < a.K; j++)
        c += mag >= a.thrm[j];
    return c;
}

/* ctx.h dc_ctx_key / dc_ctx_unkey and ctx.c dc_ctx_apply_step, for the
 * device (same arithmetic) */
template <int W> __device__ __forceinline__ unsigned long long ctx_key(unsigned long long b)
{
    const unsigned bits = 8 * W;
    const unsigned long long top = 1ull << (bits - 1), all = W == 8 ? ~0ull : (top << 1) - 1;
    const unsigned long long neg = 0 - ((b >> (bits - 1)) & 1);
    return b ^ (top | (neg & all));
}

template <int W> __device__ __forceinline__ unsigned long long ctx_unkey(unsigned long long k)
{
    const unsigned bits = 8 * W;
    const unsigned long long top = 1ull << (bits - 1), all = W == 8 ? ~0ull : (top << 1) - 1;
    const unsigned long long pos = 0 - ((k >> (bits - 1)) & 1);
    return k ^ (top | (~pos & all));
}

template <int W> __device__ __forceinline__ unsigned long long ctx_apply_step(unsigned long long b, unsigned long long z)
{
    const unsigned bits = 8 * W;
    const unsigned long long mask = W == 8 ? ~0ull : (1ull << bits) - 1;
    const unsigned long long d = ((z >> 1) ^ ((0 - (z & 1)) & mask)) & mask;
    return ctx_unkey<W>((ctx_key<W>(b) + d) & mask);
}

/* the class whose ranks hold change j */
__device__ __forceinline__ unsigned ctx_class_of(const ctx_args &a, size_t j)
{
    unsigned c = 0;
    while (c + 1 < a.K && j >= a.off[c + 1])
        c++;
    return c;
}

/* first index in v[0..len) with v[i] >= x (v increasing) */
__device__ __forceinline__ size_t ctx_lower(const uint32_t *v, size_t len, unsigned long long x)
{
    size_t lo = 0, hi = len;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

template <int W>
__global__ void k_ctx_count(const uint8_t *chunk, size_t n, size_t tiles, ctx_args a, bool al,
                            unsigned *cnt)
{
    __shared__ unsigned sh[DC_KERN_CUDA_CTX_MAX_CLASSES][BLOCK];
    const unsigned t = threadIdx.x;
    for (size_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        unsigned c8[DC_KERN_CUDA_CTX_MAX_CLASSES] = {0};
        for (unsigned i = 0; i < CTX_PER; i++) {
            size_t e = tile * CTX_TILE + (size_t)t * CTX_PER + i;
            if (e < n)
                c8[ctx_class<W>(ctx_ld<W>(chunk, e, al), a)]++;
        }
        for (unsigned c = 0; c < a.K; c++)
            sh[c][t] = c8[c];
        __syncthreads();
        for (unsigned s = BLOCK / 2; s > 0; s >>= 1) {
            if (t < s)
                for (unsigned c = 0; c < a.K; c++)
                    sh[c][t] += sh[c][t + s];
            __syncthreads();
        }
        if (t < a.K)
            cnt[tile * a.K + t] = sh[t][0];
        __syncthreads();
    }
}

/* one block, every class: pre[tile * K + c] = class c's elements before
 * the tile; pre[tiles * K + c] = its population.  Each thread sums a run
 * of tiles, a block scan (ping-pong buffers: one barrier a step) of the
 * sums, then each thread writes its run's prefixes. */
__global__ void k_ctx_scan(const unsigned *cnt, size_t tiles, unsigned K, unsigned *pre)
{
    __shared__ unsigned long long sh[2][DC_KERN_CUDA_CTX_MAX_CLASSES][BLOCK];
    const unsigned t = threadIdx.x;
    const size_t per = (tiles + BLOCK - 1) / BLOCK;
    const size_t t0 = DC_MIN((size_t)t * per, tiles), t1 = DC_MIN(t0 + per, tiles);
    unsigned long long sum[DC_KERN_CUDA_CTX_MAX_CLASSES];
    for (unsigned c = 0; c < K; c++) {
        sum[c] = 0;
        for (size_t i = t0; i < t1; i++)
            sum[c] += cnt[i * K + c];
        sh[0][c][t] = sum[c];
    }
    __syncthreads();
    unsigned b = 0;
    for (unsigned d = 1; d < BLOCK; d <<= 1) {
        for (unsigned c = 0; c < K; c++)
            sh[b ^ 1][c][t] = sh[b][c][t] + (t >= d ? sh[b][c][t - d] : 0);
        b ^= 1;
        __syncthreads();
    }
    for (unsigned c = 0; c < K; c++) {
        unsigned long long ex = sh[b][c][t] - sum[c];
        for (size_t i = t0; i < t1; i++) {
            pre[i * K + c] = (unsigned)ex;
            ex += cnt[i * K + c];
        }
        if (t == BLOCK - 1)
            pre[tiles * K + c] = (unsigned)sh[b][c][t];
    }
}

__global__ void k_ctx_check(const uint32_t *ranks, size_t total, ctx_args a, const unsigned *pop,
                            unsigned long long *bad)
{
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < total;
         j += (size_t)gridDim.x * blockDim.x) {
        unsigned c = ctx_class_of(a, j);
        uint32_t r = ranks[j];
        if (r >= pop[c] || (j > a.off[c] && r <= ranks[j - 1]))
            atomicMin(bad, (unsigned long long)j);
    }
}

template <int W>
__global__ void k_ctx_place(const uint8_t *chunk, size_t n, size_t tiles, ctx_args a, bool al,
                            const unsigned *pre, const uint32_t *ranks, uint32_t *elem)
{
    __shared__ unsigned sh[2][DC_KERN_CUDA_CTX_MAX_CLASSES][BLOCK];
    __shared__ uint16_t slot[CTX_TILE];
    __shared__ unsigned cbase[DC_KERN_CUDA_CTX_MAX_CLASSES];
    __shared__ size_t lo[DC_KERN_CUDA_CTX_MAX_CLASSES], hi[DC_KERN_CUDA_CTX_MAX_CLASSES];
    const unsigned t = threadIdx.x, K = a.K;
    for (size_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        uint8_t cls[CTX_PER];
        unsigned c8[DC_KERN_CUDA_CTX_MAX_CLASSES] = {0};
        for (unsigned i = 0; i < CTX_PER; i++) {
            size_t e = tile * CTX_TILE + (size_t)t * CTX_PER + i;
            cls[i] = 0xff;
            if (e < n) {
                cls[i] = (uint8_t)ctx_class<W>(ctx_ld<W>(chunk, e, al), a);
                c8[cls[i]]++;
            }
        }
        for (unsigned c = 0; c < K; c++)
            sh[0][c][t] = c8[c];
        __syncthreads();
        /* inclusive scan per class over the block's threads (ping-pong
         * buffers: one barrier a step) */
        unsigned pb = 0;
        for (unsigned d = 1; d < BLOCK; d <<= 1) {
            for (unsigned c = 0; c < K; c++)
                sh[pb ^ 1][c][t] = sh[pb][c][t] + (t >= d ? sh[pb][c][t - d] : 0);
            pb ^= 1;
            __syncthreads();
        }
        if (t == 0) {
            unsigned b = 0;
            for (unsigned c = 0; c < K; c++) {
                cbase[c] = b;
                b += sh[pb][c][BLOCK - 1];
            }
        }
        if (t < K) {
            /* the class's changes in this tile: ranks pre[tile] .. pre[tile + 1] - 1 */
            const uint32_t *r = ranks + a.off[t];
            size_t len = (size_t)(a.off[t + 1] - a.off[t]);
            lo[t] = ctx_lower(r, len, pre[tile * K + t]);
            hi[t] = ctx_lower(r, len, pre[(tile + 1) * K + t]);
        }
        __syncthreads();
        {
            unsigned lr[DC_KERN_CUDA_CTX_MAX_CLASSES];
            for (unsigned c = 0; c < K; c++)
                lr[c] = sh[pb][c][t] - c8[c];
            for (unsigned i = 0; i < CTX_PER; i++)
                if (cls[i] != 0xff)
                    slot[cbase[cls[i]] + lr[cls[i]]++] = (uint16_t)(t * CTX_PER + i);
        }
        __syncthreads();
        for (unsigned c = 0; c < K; c++) {
            const uint32_t *r = ranks + a.off[c];
            const unsigned p0 = pre[tile * K + c];
            for (size_t j = lo[c] + t; j < hi[c]; j += BLOCK)
                elem[a.off[c] + j] =
                    (uint32_t)(tile * CTX_TILE + slot[cbase[c] + (r[j] - p0)]);
        }
        __syncthreads();
    }
}

template <int W>
__global__ void k_ctx_apply(uint8_t *chunk, ctx_args a, bool al, const uint32_t *elem,
                            const uint8_t *words, bool wal, size_t total, uint32_t *pos_out,
                            uint8_t *xor_out, bool xal, bool apply)
{
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < total;
         j += (size_t)gridDim.x * blockDim.x) {
        const unsigned c = ctx_class_of(a, j);
        const uint32_t e = elem[j];
        size_t k = j - (size_t)a.off[c];
        for (unsigned c2 = 0; c2 < a.K; c2++)
            if (c2 != c)
                k += ctx_lower(elem + a.off[c2], (size_t)(a.off[c2 + 1] - a.off[c2]), e);
        const unsigned long long v = ctx_ld<W>(words, k, wal), b = ctx_ld<W>(chunk, e, al);
        const unsigned long long x =
            a.mode == 0 ? v : a.mode == 1 ? ctx_apply_step<W>(b, v) ^ b : v ^ b;
        if (pos_out)
            pos_out[k] = e;
        if (xor_out)
            ctx_st<W>(xor_out, k, xal, x);
        if (apply)
            ctx_st<W>(chunk, e, al, b ^ x);
    }
}

template <int W>
static dc_status_t ctx_launch(uint8_t *chunk, size_t n, const ctx_args &a, const uint32_t *ranks,
                              const uint8_t *words, size_t total, uint32_t *pos_out,
                              uint8_t *xor_out, bool apply, cudaStream_t s)
{
    dc_status_t st = DC_OK;
    const bool al = ((uintptr_t)chunk & (W - 1)) == 0, wal = ((uintptr_t)words & (W - 1)) == 0,
               xal = ((uintptr_t)xor_out & (W - 1)) == 0;
    const size_t tiles = (n + CTX_TILE - 1) / CTX_TILE;
    unsigned *cnt = NULL, *pre = NULL;
    uint32_t *elem = NULL;
    unsigned long long *flag = NULL, bad = NONE_BAD;
    const uint32_t *where = ranks;
    if (a.K > 1) {
        CU_TRY(cudaMallocAsync((void **)&cnt, (tiles ? tiles : 1) * a.K * sizeof(unsigned), s),
               "ctx tile counts");
        CU_TRY(cudaMallocAsync((void **)&pre, (tiles + 1) * a.K * sizeof(unsigned), s),
               "ctx class prefix");
        CU_TRY(cudaMallocAsync((void **)&elem, (total ? total : 1) * sizeof(uint32_t), s),
               "ctx positions");
        CU_TRY(cudaMallocAsync((void **)&flag, sizeof(*flag), s), "ctx flag");
        CU_TRY(cudaMemsetAsync(flag, 0xff, sizeof(*flag), s), "ctx flag");
        if (tiles) {
            DC_LAUNCH(k_ctx_count<W>, grid_for(tiles, 1), BLOCK, s)(chunk, n, tiles, a, al, cnt);
            CU_TRY(cudaGetLastError(), "ctx count kernel");
        }
        DC_LAUNCH(k_ctx_scan, 1, BLOCK, s)(cnt, tiles, a.K, pre);
        CU_TRY(cudaGetLastError(), "ctx scan kernel");
        if (total) {
            DC_LAUNCH(k_ctx_check, grid_for(total, BLOCK), BLOCK, s)(ranks, total, a,
                                                                   pre + tiles * a.K, flag);
            CU_TRY(cudaGetLastError(), "ctx check kernel");
        }
        CU_TRY(cudaMemcpyAsync(&bad, flag, sizeof(bad), cudaMemcpyDeviceToHost, s),
               "ctx flag copy");
        CU_TRY(cudaStreamSynchronize(s), "ctx check");
        if (bad != NONE_BAD) {
            unsigned c = 0;
            while (c + 1 < a.K && bad >= a.off[c + 1])
                c++;
            st = dc_error(DC_ERR_FORMAT, "ctx chunk: class %u names a position past its "
                                         "population in the base (device decode, change %llu)",
                          c, bad);
            goto out;
        }
        if (tiles && total) {
            DC_LAUNCH(k_ctx_place<W>, grid_for(tiles, 1), BLOCK, s)(chunk, n, tiles, a, al, pre,
                                                                    ranks, elem);
            CU_TRY(cudaGetLastError(), "ctx place kernel");
        }
        where = elem;
    }
    if (total) {
        DC_LAUNCH(k_ctx_apply<W>, grid_for(total, BLOCK), BLOCK, s)(
            chunk, a, al, where, words, wal, total, pos_out, xor_out, xal, apply);
        CU_TRY(cudaGetLastError(), "ctx apply kernel");
    }
    CU_TRY(cudaStreamSynchronize(s), "ctx apply");
out:
    if (cnt != NULL)
        cudaFreeAsync(cnt, s);
    if (pre != NULL)
        cudaFreeAsync(pre, s);
    if (elem != NULL)
        cudaFreeAsync(elem, s);
    if (flag != NULL)
        cudaFreeAsync(flag, s);
    return st;
}

static dc_status_t kcu_ctx_apply(void *chunk, size_t n, unsigned w,
                                 const dc_kern_cuda_ctx_spec_t *spec, const uint32_t *ranks,
                                 const void *words, uint32_t *pos_out, void *xor_out, int apply,
                                 void *stream)
{
    if (!valid_width(w))
        return dc_error(DC_ERR_INVALID, "cuda ctx apply: element width %u is not 1, 2, 4 or 8",
                        w);
    if (spec->K < 1 || spec->K > DC_KERN_CUDA_CTX_MAX_CLASSES || spec->mode > 2 || n > 0xFFFFFFFFull)
        return dc_error(DC_ERR_INVALID, "cuda ctx apply: %u classes, mode %u, %zu elements",
                        spec->K, spec->mode, n);
    if (((uintptr_t)ranks & 3) != 0 || ((uintptr_t)pos_out & 3) != 0)
        return dc_error(DC_ERR_INVALID, "cuda ctx apply: positions array is not 4-byte aligned");
    ctx_args a;
    memset(&a, 0, sizeof(a));
    a.K = spec->K;
    a.mode = spec->mode;
    for (unsigned j = 0; j + 1 < spec->K; j++)
        a.thrm[j] = spec->thrm[j];
    for (unsigned c = 0; c <= spec->K; c++) {
        a.off[c] = spec->off[c];
        if (c && spec->off[c] < spec->off[c - 1])
            return dc_error(DC_ERR_INVALID, "cuda ctx apply: class offsets decrease");
    }
    const size_t total = spec->off[spec->K];
    uint8_t *ch = (uint8_t *)chunk, *xo = (uint8_t *)xor_out;
    const uint8_t *wd = (const uint8_t *)words;
    cudaStream_t s = S(stream);
    bool ap = apply != 0;
    switch (w) {
    case 1: return ctx_launch<1>(ch, n, a, ranks, wd, total, pos_out, xo, ap, s);
    case 2: return ctx_launch<2>(ch, n, a, ranks, wd, total, pos_out, xo, ap, s);
    case 4: return ctx_launch<4>(ch, n, a, ranks, wd, total, pos_out, xo, ap, s);
    default: return ctx_launch<8>(ch, n, a, ranks, wd, total, pos_out, xo, ap, s);
    }
}

/* ------------------------------------------------------------------------ */
/*  rANS gaps positions (entropy.h DC_ENT_GAPS) from decoded quotients        */
/* ------------------------------------------------------------------------ */

/*
 * The quotients (16-bit symbols of a rANS stream) are decoded by
 * k_values_decode; the escapes (varints, rare) are parsed on the host
 * into a prefix sum; here, per gap k: (q << b | low bits) + 1, where an
 * escape quotient (q == E) adds its varint << b, summed up the gaps:
 *   k_gaps_sum    per tile, the gaps' sum without the escapes' varints and
 *                 the escape count (a gap's own part past the chunk is
 *                 flagged: its position would be too);
 *   k_scan64 / k_ctx_scan   the tiles' prefixes;
 *   k_gaps_write  per tile, a block scan of the threads' escape counts
 *                 (each escape's index) and sums, then the positions.
 */
#define GAPS_PER 8
#define GAPS_TILE (BLOCK * GAPS_PER)

__device__ __forceinline__ unsigned gaps_low(const uint8_t *lo, size_t lo_len, size_t k,
                                             unsigned b)
{
    if (b == 0)
        return 0;
    const unsigned long long bit = (unsigned long long)k * b;
    const size_t at = (size_t)(bit >> 3);
    unsigned v = 0;
    for (unsigned j = 0; j < 4 && at + j < lo_len; j++)
        v |= (unsigned)lo[at + j] << (8 * j);
    return (v >> (bit & 7)) & ((1u << b) - 1);
}

__global__ void k_gaps_sum(const uint16_t *q, const uint8_t *lo, size_t lo_len, unsigned b,
                           unsigned E, size_t count, unsigned long long n, size_t tiles,
                           unsigned long long *tsum, unsigned *tesc, unsigned long long *bad)
{
    __shared__ unsigned long long sh[BLOCK];
    __shared__ unsigned she[BLOCK];
    const unsigned t = threadIdx.x;
    for (size_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        unsigned long long s = 0;
        unsigned e = 0;
        for (unsigned i = 0; i < GAPS_PER; i++) {
            size_t k = tile * GAPS_TILE + (size_t)t * GAPS_PER + i;
            if (k >= count)
                break;
            const unsigned qq = q[k];
            const unsigned long long g = ((unsigned long long)qq << b) | gaps_low(lo, lo_len, k, b);
            if (g >= n)
                atomicMin(bad, (unsigned long long)k);
            s += g + 1;
            e += qq == E;
        }
        sh[t] = s;
        she[t] = e;
        __syncthreads();
        for (unsigned st = BLOCK / 2; st > 0; st >>= 1) {
            if (t < st) {
                sh[t] += sh[t + st];
                she[t] += she[t + st];
            }
            __syncthreads();
        }
        if (t == 0) {
            tsum[tile] = sh[0];
            tesc[tile] = she[0];
        }
        __syncthreads();
    }
}

/* one block: pre[i] = in[0] + .. + in[i - 1], pre[items] = the total */
__global__ void k_scan64(const unsigned long long *in, size_t items, unsigned long long *pre)
{
    __shared__ unsigned long long sh[2][BLOCK];
    const unsigned t = threadIdx.x;
    const size_t per = (items + BLOCK - 1) / BLOCK;
    const size_t i0 = DC_MIN((size_t)t * per, items), i1 = DC_MIN(i0 + per, items);
    unsigned long long sum = 0;
    for (size_t i = i0; i < i1; i++)
        sum += in[i];
    sh[0][t] = sum;
    __syncthreads();
    unsigned pb = 0;
    for (unsigned d = 1; d < BLOCK; d <<= 1) {
        sh[pb ^ 1][t] = sh[pb][t] + (t >= d ? sh[pb][t - d] : 0);
        pb ^= 1;
        __syncthreads();
    }
    unsigned long long ex = sh[pb][t] - sum;
    for (size_t i = i0; i < i1; i++) {
        pre[i] = ex;
        ex += in[i];
    }
    if (t == BLOCK - 1)
        pre[items] = sh[pb][t];
}

__global__ void k_gaps_write(const uint16_t *q, const uint8_t *lo, size_t lo_len, unsigned b,
                             unsigned E, size_t count, size_t tiles,
                             const unsigned long long *tpre, const unsigned *tepre,
                             const unsigned long long *escpre, uint32_t *pos)
{
    __shared__ unsigned long long sh[2][BLOCK];
    __shared__ unsigned she[2][BLOCK];
    const unsigned t = threadIdx.x;
    for (size_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const size_t k0 = tile * GAPS_TILE + (size_t)t * GAPS_PER;
        unsigned e = 0;
        for (unsigned i = 0; i < GAPS_PER && k0 + i < count; i++)
            e += q[k0 + i] == E;
        she[0][t] = e;
        __syncthreads();
        unsigned pb = 0;
        for (unsigned d = 1; d < BLOCK; d <<= 1) {
            she[pb ^ 1][t] = she[pb][t] + (t >= d ? she[pb][t - d] : 0);
            pb ^= 1;
            __syncthreads();
        }
        /* this thread's first escape's index among all */
        const size_t ebase = (size_t)tepre[tile] + (she[pb][t] - e);
        unsigned long long s = 0;
        {
            size_t ei = ebase;
            for (unsigned i = 0; i < GAPS_PER && k0 + i < count; i++) {
                const unsigned qq = q[k0 + i];
                unsigned long long g = ((unsigned long long)qq << b) |
                                       gaps_low(lo, lo_len, k0 + i, b);
                if (qq == E) {
                    g += (escpre[ei + 1] - escpre[ei]) << b;
                    ei++;
                }
                s += g + 1;
            }
        }
        sh[0][t] = s;
        __syncthreads();
        unsigned ps = 0;
        for (unsigned d = 1; d < BLOCK; d <<= 1) {
            sh[ps ^ 1][t] = sh[ps][t] + (t >= d ? sh[ps][t - d] : 0);
            ps ^= 1;
            __syncthreads();
        }
        unsigned long long cur = tpre[tile] + (escpre[tepre[tile]] << b) + (sh[ps][t] - s);
        size_t ei = ebase;
        for (unsigned i = 0; i < GAPS_PER && k0 + i < count; i++) {
            const unsigned qq = q[k0 + i];
            unsigned long long g = ((unsigned long long)qq << b) | gaps_low(lo, lo_len, k0 + i, b);
            if (qq == E) {
                g += (escpre[ei + 1] - escpre[ei]) << b;
                ei++;
            }
            cur += g + 1;
            pos[k0 + i] = (uint32_t)(cur - 1);
        }
        __syncthreads();
    }
}

static dc_status_t kcu_gaps_positions(const uint16_t *q, const void *lo, size_t lo_len,
                                      unsigned b, unsigned E, const uint64_t *escpre, size_t nesc,
                                      uint64_t esc_total, size_t count, uint64_t n, uint32_t *pos,
                                      void *stream)
{
    dc_status_t st = DC_OK;
    cudaStream_t s = S(stream);
    if (b > 16 || n > (1ull << 31) || ((uintptr_t)pos & 3) != 0 || ((uintptr_t)q & 1) != 0)
        return dc_error(DC_ERR_INVALID, "cuda gaps positions: %u low bits, %llu elements, or "
                        "a misaligned array", b, (unsigned long long)n);
    if (count == 0)
        return DC_OK;
    const size_t tiles = (count + GAPS_TILE - 1) / GAPS_TILE;
    unsigned long long *tsum = NULL, *tpre = NULL, *flag = NULL;
    unsigned *tesc = NULL, *tepre = NULL;
    unsigned long long bad = NONE_BAD, tot = 0;
    unsigned etot = 0;
    const uint8_t *lb = (const uint8_t *)lo;
    CU_TRY(cudaMallocAsync((void **)&tsum, tiles * sizeof(*tsum), s), "gaps tile sums");
    CU_TRY(cudaMallocAsync((void **)&tpre, (tiles + 1) * sizeof(*tpre), s), "gaps prefix");
    CU_TRY(cudaMallocAsync((void **)&tesc, tiles * sizeof(*tesc), s), "gaps tile escapes");
    CU_TRY(cudaMallocAsync((void **)&tepre, (tiles + 1) * sizeof(*tepre), s), "gaps escapes");
    CU_TRY(cudaMallocAsync((void **)&flag, sizeof(*flag), s), "gaps flag");
    CU_TRY(cudaMemsetAsync(flag, 0xff, sizeof(*flag), s), "gaps flag");
    DC_LAUNCH(k_gaps_sum, grid_for(tiles, 1), BLOCK, s)(q, lb, lo_len, b, E, count,
                                                        (unsigned long long)n, tiles, tsum, tesc,
                                                        flag);
    CU_TRY(cudaGetLastError(), "gaps sum kernel");
    DC_LAUNCH(k_scan64, 1, BLOCK, s)(tsum, tiles, tpre);
    CU_TRY(cudaGetLastError(), "gaps scan kernel");
    DC_LAUNCH(k_ctx_scan, 1, BLOCK, s)(tesc, tiles, 1u, tepre);
    CU_TRY(cudaGetLastError(), "gaps escape scan kernel");
    CU_TRY(cudaMemcpyAsync(&bad, flag, sizeof(bad), cudaMemcpyDeviceToHost, s), "gaps flag");
    CU_TRY(cudaMemcpyAsync(&tot, tpre + tiles, sizeof(tot), cudaMemcpyDeviceToHost, s),
           "gaps total");
    CU_TRY(cudaMemcpyAsync(&etot, tepre + tiles, sizeof(etot), cudaMemcpyDeviceToHost, s),
           "gaps escapes");
    CU_TRY(cudaStreamSynchronize(s), "gaps sums");
    /* the CPU's refusals (dc_gaps_pos_scalar, dc_gaps_dec_finish): a
     * position past the chunk, escapes not used up or missing */
    if (bad != NONE_BAD || tot + (esc_total << b) > n) {
        st = dc_error(DC_ERR_FORMAT, "gaps: a position past the chunk of %llu (device decode)",
                      (unsigned long long)n);
        goto out;
    }
    if (etot != nesc) {
        st = dc_error(DC_ERR_FORMAT, "gaps stream does not end cleanly (%u escapes, %zu "
                      "escape values; device decode)", etot, nesc);
        goto out;
    }
    DC_LAUNCH(k_gaps_write, grid_for(tiles, 1), BLOCK, s)(q, lb, lo_len, b, E, count, tiles,
                                                          tpre, tepre,
                                                          (const unsigned long long *)escpre,
                                                          pos);
    CU_TRY(cudaGetLastError(), "gaps write kernel");
    CU_TRY(cudaStreamSynchronize(s), "gaps positions");
out:
    if (tsum != NULL)
        cudaFreeAsync(tsum, s);
    if (tpre != NULL)
        cudaFreeAsync(tpre, s);
    if (tesc != NULL)
        cudaFreeAsync(tesc, s);
    if (tepre != NULL)
        cudaFreeAsync(tepre, s);
    if (flag != NULL)
        cudaFreeAsync(flag, s);
    return st;
}

static dc_status_t kcu_golomb_decode_multi(unsigned streams, const void *const *src,
                                           const size_t *len, const size_t *count, uint64_t n,
                                           uint32_t *const *pos, void *stream)
{
    dc_status_t st = DC_OK;
    cudaStream_t s = S(stream);
    unsigned *dres = NULL, res[2 * DC_KERN_CUDA_GOLOMB_MAX_STREAMS];
    gd_jobs jobs;
    if (streams > DC_KERN_CUDA_GOLOMB_MAX_STREAMS)
        return dc_error(DC_ERR_INVALID, "cuda positions decode: %u streams (at most %u)",
                        streams, (unsigned)DC_KERN_CUDA_GOLOMB_MAX_STREAMS);
    if (streams == 0)
        return DC_OK;
    memset(&jobs, 0, sizeof(jobs));
    for (unsigned j = 0; j < streams; j++) {
        if (((uintptr_t)pos[j] & 3) != 0)
            return dc_error(DC_ERR_INVALID, "cuda positions decode: positions array is not "
                            "4-byte aligned");
        jobs.src[j] = (const uint8_t *)src[j];
        jobs.len[j] = len[j];
        jobs.count[j] = count[j];
        jobs.pos[j] = pos[j];
    }
    CU_TRY(cudaMallocAsync((void **)&dres, sizeof(res), s), "positions decode result");
    DC_LAUNCH(k_golomb_multi, 1, 32, s)(jobs, streams, (unsigned long long)n, dres);
    CU_TRY(cudaGetLastError(), "positions decode kernel");
    CU_TRY(cudaMemcpyAsync(res, dres, 2 * streams * sizeof(unsigned), cudaMemcpyDeviceToHost,
                           s),
           "positions decode result");
    CU_TRY(cudaStreamSynchronize(s), "positions decode");
    for (unsigned j = 0; j < streams; j++)
        if (res[2 * j] != GD_OK) {
            st = dc_error(DC_ERR_FORMAT, "device positions decode (Golomb stream %u of %u, %zu "
                          "positions in %llu elements, %zu bytes): %s at position %u", j,
                          streams, count[j], (unsigned long long)n, len[j],
                          res[2 * j] < GD_N ? gd_msg[res[2 * j]] : "unknown", res[2 * j + 1]);
            break;
        }
out:
    if (dres != NULL)
        cudaFreeAsync(dres, s);
    return st;
}

/* ======================================================================== */
/*  Device sender (engine/devsend.c): the ctx model's inputs on the device.  */
/*  The encoder's parts of ctx.c that read the whole base: the sampled       */
/*  magnitude-bucket histogram (ctx.h dc_ctx_model_hist) and each change's   */
/*  class and rank (ctx_scan.h rank), so that only lists cross PCIe.         */
/* ======================================================================== */

#ifdef DC_CUDA_EMULATION
__device__ __forceinline__ void dcs_atomic_add(unsigned *p, unsigned v)
{
    __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
#else
__device__ __forceinline__ void dcs_atomic_add(unsigned *p, unsigned v)
{
    atomicAdd(p, v);
}
#endif

/* the magnitude (top bit cleared) of element i of w-byte words at p (any
 * alignment; little-endian) */
template <int W>
__device__ __forceinline__ unsigned long long dcs_mag(const uint8_t *p, size_t i)
{
    unsigned long long v = 0;
#pragma unroll
    for (int b = 0; b < W; b++)
        v |= (unsigned long long)p[i * W + b] << (8 * b);
    return v & ((~0ull >> (64 - 8 * W)) >> 1);
}

/* ctx.c's shift from a magnitude to its bucket */
template <int W> __device__ __forceinline__ unsigned dcs_shift()
{
    return W == 1 ? 0 : W == 2 ? 7 : W == 4 ? 23 : 55;
}

/* The histogram of the sampled elements' buckets: the first 64 elements
 * of every `stride` (as ctx.c); one shared histogram per block, added to
 * hist (256 counters, zeroed by the caller). */
template <int W>
__global__ void k_ctx_sample(const uint8_t *base, size_t n, size_t stride, size_t windows,
                             unsigned *hist)
{
    __shared__ unsigned sh[256];
    for (unsigned i = threadIdx.x; i < 256; i += blockDim.x)
        sh[i] = 0;
    __syncthreads();
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < windows * 64;
         j += (size_t)gridDim.x * blockDim.x) {
        size_t e = (j / 64) * stride + j % 64;
        if (e < n)
            dcs_atomic_add(&sh[(unsigned)(dcs_mag<W>(base, e) >> dcs_shift<W>())], 1u);
    }
    __syncthreads();
    for (unsigned i = threadIdx.x; i < 256; i += blockDim.x)
        if (sh[i])
            dcs_atomic_add(&hist[i], sh[i]);
}

#define CTX_ITEMS 8                   /* elements per thread */
#define DCS_TILE (BLOCK * CTX_ITEMS)  /* elements per block */

struct dcs_thr {
    unsigned long long t[8];
};

template <int W>
__device__ __forceinline__ unsigned dcs_class(const uint8_t *base, size_t i, const dcs_thr &thr,
                                              unsigned nt)
{
    unsigned long long m = dcs_mag<W>(base, i);
    unsigned c = 0;
    for (unsigned j = 0; j < nt; j++)
        c += m >= thr.t[j];
    return c;
}

/* Pass 1: per tile, the population of each class (counts[c * tiles + tile]). */
template <int W>
__global__ void k_ctx_cls_count(const uint8_t *base, size_t n, size_t tiles, dcs_thr thr,
                                unsigned nt, unsigned long long *counts)
{
    for (size_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        unsigned cnt[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        size_t e0 = tile * DCS_TILE + (size_t)threadIdx.x * CTX_ITEMS;
        for (int j = 0; j < CTX_ITEMS; j++)
            if (e0 + j < n)
                cnt[dcs_class<W>(base, e0 + j, thr, nt)]++;
        for (unsigned c = 0; c <= nt; c++) {
            unsigned long long total;
            block_exscan(cnt[c], &total);
            if (threadIdx.x == 0)
                counts[c * tiles + tile] = total;
        }
    }
}

/* Pass 3: each change's class and rank (offs: the tiles' exclusive class
 * offsets, pass 2).  A thread ranks the changes among its own elements:
 * the first by binary search in pos, the rest in order. */
template <int W>
__global__ void k_ctx_rank(const uint8_t *base, size_t n, size_t tiles, dcs_thr thr,
                           unsigned nt, const unsigned long long *offs, const uint32_t *pos,
                           size_t count, uint8_t *cls, uint32_t *rnk)
{
    for (size_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        unsigned cnt[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        uint8_t mine[CTX_ITEMS];
        size_t e0 = tile * DCS_TILE + (size_t)threadIdx.x * CTX_ITEMS;
        for (int j = 0; j < CTX_ITEMS; j++) {
            mine[j] = e0 + j < n ? (uint8_t)dcs_class<W>(base, e0 + j, thr, nt) : 0;
            if (e0 + j < n)
                cnt[mine[j]]++;
        }
        unsigned long long pre[8];
        for (unsigned c = 0; c <= nt; c++) {
            unsigned long long total;
            pre[c] = offs[c * tiles + tile] + block_exscan(cnt[c], &total);
        }
        /* first change at or after e0 */
        size_t lo = 0, hi = count;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (pos[mid] < e0)
                lo = mid + 1;
            else
                hi = mid;
        }
        unsigned seen[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int j = 0;
        for (size_t k = lo; k < count && pos[k] < e0 + CTX_ITEMS; k++) {
            int at = (int)(pos[k] - e0);
            for (; j < at; j++)
                seen[mine[j]]++;
            unsigned c = mine[at];
            cls[k] = (uint8_t)c;
            rnk[k] = (uint32_t)(pre[c] + seen[c]);
        }
    }
}

static dc_status_t kcu_d2d(void *dst, const void *src, size_t bytes)
{
    dc_status_t st = DC_OK;
    if (bytes) {
        CU_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice), "device-to-device copy");
        CU_TRY(cudaStreamSynchronize(0), "device-to-device copy");
    }
out:
    return st;
}

static dc_status_t hist_to_host(const unsigned *dh, uint32_t *hist, size_t *d2h,
                                cudaStream_t s);

static dc_status_t kcu_ctx_sample(const void *base, size_t n, unsigned w, uint32_t *hist,
                                  size_t *d2h, void *stream)
{
    dc_status_t st = DC_OK;
    unsigned *dh = NULL;
    cudaStream_t s = S(stream);
    size_t stride = n >= 65536 ? 4096 : n >= 16384 ? 1024 : 64;
    size_t windows = (n + stride - 1) / stride;
    const uint8_t *b = (const uint8_t *)base;
    const unsigned g = grid_for(windows * 64, BLOCK);
    if (!valid_width(w))
        return dc_error(DC_ERR_INVALID, "cuda ctx sample: element width %u is not 1, 2, 4 or 8",
                        w);
    CU_TRY(cudaMallocAsync((void **)&dh, 256 * sizeof(unsigned), s), "ctx sample scratch");
    CU_TRY(cudaMemsetAsync(dh, 0, 256 * sizeof(unsigned), s), "ctx sample zero");
    if (n > 0) {
        switch (w) {
        case 1: DC_LAUNCH(k_ctx_sample<1>, g, BLOCK, s)(b, n, stride, windows, dh); break;
        case 2: DC_LAUNCH(k_ctx_sample<2>, g, BLOCK, s)(b, n, stride, windows, dh); break;
        case 4: DC_LAUNCH(k_ctx_sample<4>, g, BLOCK, s)(b, n, stride, windows, dh); break;
        default: DC_LAUNCH(k_ctx_sample<8>, g, BLOCK, s)(b, n, stride, windows, dh); break;
        }
        CU_TRY(cudaGetLastError(), "ctx sample kernel");
    }
    if ((st = hist_to_host(dh, hist, d2h, s)) != DC_OK)
        goto out;
out:
    free_wait(dh, s);
    return st;
}

template <int W>
static void ctx_rank_launch(const uint8_t *b, size_t n, size_t tiles, const dcs_thr &t,
                            unsigned nt, unsigned long long *counts, unsigned long long *offs,
                            unsigned long long *sums, const uint32_t *pos, size_t count,
                            uint8_t *cls, uint32_t *rnk, cudaStream_t s)
{
    const unsigned g = grid_for(tiles, 1);
    DC_LAUNCH(k_ctx_cls_count<W>, g, BLOCK, s)(b, n, tiles, t, nt, counts);
    for (unsigned c = 0; c <= nt; c++)
        DC_LAUNCH(k_scan_tiles, 1, BLOCK, s)(counts + c * tiles, tiles, offs + c * tiles,
                                             sums + c);
    if (count > 0)
        DC_LAUNCH(k_ctx_rank<W>, g, BLOCK, s)(b, n, tiles, t, nt, offs, pos, count, cls, rnk);
}

static dc_status_t kcu_ctx_rank(const void *base, size_t n, unsigned w, const uint64_t *thr,
                                unsigned nt, const uint32_t *pos, size_t count, uint8_t *cls,
                                uint32_t *rnk, uint64_t *pop, void *stream)
{
    dc_status_t st = DC_OK;
    unsigned long long *scr = NULL;
    cudaStream_t s = S(stream);
    dcs_thr t;
    memset(&t, 0, sizeof(t));
    if (!valid_width(w))
        return dc_error(DC_ERR_INVALID, "cuda ctx rank: element width %u is not 1, 2, 4 or 8", w);
    if (nt > 7 || n > (size_t)UINT32_MAX + 1 || count > n)
        return dc_error(DC_ERR_INVALID, "cuda ctx rank: %u thresholds, %zu changes of %zu "
                        "elements out of range", nt, count, n);
    if (count > 0 && ((uintptr_t)pos & 3) != 0)
        return dc_error(DC_ERR_INVALID, "cuda ctx rank: positions array is not 4-byte aligned");
    for (unsigned j = 0; j < nt; j++)
        t.t[j] = thr[j];
    const size_t tiles = n ? (n + DCS_TILE - 1) / DCS_TILE : 1;
    const size_t K = nt + 1;
    const uint8_t *b = (const uint8_t *)base;
    CU_TRY(cudaMallocAsync((void **)&scr, (2 * K * tiles + K) * sizeof(*scr), s),
           "ctx rank scratch");
    CU_TRY(cudaMemsetAsync(scr, 0, (2 * K * tiles + K) * sizeof(*scr), s), "ctx rank zero");
    if (n > 0) {
        unsigned long long *counts = scr, *offs = scr + K * tiles, *sums = scr + 2 * K * tiles;
        switch (w) {
        case 1: ctx_rank_launch<1>(b, n, tiles, t, nt, counts, offs, sums, pos, count, cls, rnk, s); break;
        case 2: ctx_rank_launch<2>(b, n, tiles, t, nt, counts, offs, sums, pos, count, cls, rnk, s); break;
        case 4: ctx_rank_launch<4>(b, n, tiles, t, nt, counts, offs, sums, pos, count, cls, rnk, s); break;
        default: ctx_rank_launch<8>(b, n, tiles, t, nt, counts, offs, sums, pos, count, cls, rnk, s); break;
        }
        CU_TRY(cudaGetLastError(), "ctx rank kernels");
    }
    CU_TRY(cudaMemcpyAsync(pop, scr + 2 * K * tiles, K * sizeof(*scr), cudaMemcpyDeviceToHost,
                           s),
           "ctx rank populations copy");
    CU_TRY(cudaStreamSynchronize(s), "ctx rank");
out:
    free_wait(scr, s);
    return st;
}

/* ------------------------------------------------------------------------ */
/*  The rank lists packed for PCIe (kernels/listpack.h): the changes grouped */
/*  by class, each class's ranks as LEB128 varints of their gaps.  Pass 1   */
/*  counts classes per tile, a scan per class places every rank in its      */
/*  class's run (pass 2), then the varints' lengths per tile, their scan,   */
/*  and the writes (passes 3, 4).                                            */
/* ------------------------------------------------------------------------ */

#define LP_ITEMS 8
#define LP_TILE (BLOCK * LP_ITEMS)

__device__ __forceinline__ unsigned lp_class(const uint8_t *cls, size_t k)
{
    return cls ? cls[k] : 0u;
}

/* Pass 1: changes per class and tile (counts[c * tiles + tile]). */
__global__ void k_lp_count(const uint8_t *cls, size_t count, size_t tiles, unsigned K,
                           unsigned long long *counts)
{
    for (size_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        unsigned cnt[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        size_t k0 = tile * LP_TILE + (size_t)threadIdx.x * LP_ITEMS;
        for (int j = 0; j < LP_ITEMS; j++)
            if (k0 + j < count)
                cnt[lp_class(cls, k0 + j) & 7]++;
        for (unsigned c = 0; c < K; c++) {
            unsigned long long total;
            block_exscan(cnt[c], &total);
            if (threadIdx.x == 0)
                counts[c * tiles + tile] = total;
        }
    }
}

/* where class c's run starts: the changes of the classes before it */
__device__ __forceinline__ unsigned long long lp_class_start(const unsigned long long *sums,
                                                             unsigned c)
{
    unsigned long long s = 0;
    for (unsigned i = 0; i < c; i++)
        s += sums[i];
    return s;
}

/* Pass 2: every rank to its place in its class's run (offs: the tiles'
 * exclusive counts per class; sums: the classes' totals). */
__global__ void k_lp_place(const uint8_t *cls, const uint32_t *rnk, size_t count, size_t tiles,
                           unsigned K, const unsigned long long *offs,
                           const unsigned long long *sums, uint32_t *idx)
{
    for (size_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        unsigned cnt[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        size_t k0 = tile * LP_TILE + (size_t)threadIdx.x * LP_ITEMS;
        for (int j = 0; j < LP_ITEMS; j++)
            if (k0 + j < count)
                cnt[lp_class(cls, k0 + j) & 7]++;
        unsigned long long at[8];
        for (unsigned c = 0; c < K; c++) {
            unsigned long long total;
            at[c] = lp_class_start(sums, c) + offs[c * tiles + tile] +
                    block_exscan(cnt[c], &total);
        }
        for (int j = 0; j < LP_ITEMS; j++)
            if (k0 + j < count) {
                unsigned c = lp_class(cls, k0 + j) & 7;
                idx[at[c]++] = rnk[k0 + j];
            }
    }
}

/* the gap coded for grouped rank i: the rank itself at the start of a
 * class's run, else rank - previous - 1 (mod 2^32, as listpack.c) */
__device__ __forceinline__ uint32_t lp_gap(const uint32_t *idx, size_t i,
                                           const unsigned long long *sums, unsigned K)
{
    unsigned long long s = 0;
    for (unsigned c = 0; c < K; c++) {
        if (i == s)
            return idx[i];
        s += sums[c];
    }
    return idx[i] - idx[i - 1] - 1u;
}

/* v as a LEB128 varint at out + o; returns the offset after it */
__device__ __forceinline__ size_t lp_put(uint8_t *out, size_t o, uint32_t v)
{
    while (v >= 0x80u) {
        out[o++] = (uint8_t)(v | 0x80u);
        v >>= 7;
    }
    out[o++] = (uint8_t)v;
    return o;
}

__device__ __forceinline__ unsigned lp_len(uint32_t v)
{
    return v < (1u << 7) ? 1 : v < (1u << 14) ? 2 : v < (1u << 21) ? 3 : v < (1u << 28) ? 4 : 5;
}

/* Pass 3 (write == false): the varints' bytes per tile into tlen.  Pass 4
 * (write == true): each thread writes its varints from its tile's offset
 * (toffs) on. */
__global__ void k_lp_varints(const uint32_t *idx, size_t count, size_t tiles, unsigned K,
                             const unsigned long long *sums, unsigned long long *tlen,
                             const unsigned long long *toffs, uint8_t *out, bool write, bool raw)
{
    for (size_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        size_t k0 = tile * LP_TILE + (size_t)threadIdx.x * LP_ITEMS;
        uint32_t g[LP_ITEMS];
        unsigned long long mine = 0;
        for (int j = 0; j < LP_ITEMS; j++) {
            g[j] = k0 + j >= count ? 0u : raw ? idx[k0 + j] : lp_gap(idx, k0 + j, sums, K);
            if (k0 + j < count)
                mine += lp_len(g[j]);
        }
        unsigned long long total, before = block_exscan(mine, &total);
        if (!write) {
            if (threadIdx.x == 0)
                tlen[tile] = total;
            continue;
        }
        size_t o = (size_t)(toffs[tile] + before);
        for (int j = 0; j < LP_ITEMS && k0 + j < count; j++)
            o = lp_put(out, o, g[j]);
    }
}

/* w-byte words (w <= 4) widened for the varint passes */
template <int W>
__global__ void k_pw_widen(const uint8_t *v, size_t count, uint32_t *idx)
{
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < count;
         k += (size_t)gridDim.x * blockDim.x)
        idx[k] = (uint32_t)ctx_ld<W>(v, k, false);
}

/* nibbles of v as a nibble varint: 3 bits a nibble, the 4th the
 * continuation (listpack.h) */
__device__ __forceinline__ unsigned pw_nibs(uint32_t v)
{
    unsigned n = 1;
    while (v >= 8u) {
        v >>= 3;
        n++;
    }
    return n;
}

#ifdef DC_CUDA_EMULATION
__device__ __forceinline__ void pw_or(unsigned *p, unsigned v)
{
    __atomic_fetch_or(p, v, __ATOMIC_RELAXED);
}
#else
__device__ __forceinline__ void pw_or(unsigned *p, unsigned v)
{
    atomicOr(p, v);
}
#endif

/* Pass 1: each tile's bytes as byte varints (tb) and its nibbles as
 * nibble varints (tn). */
__global__ void k_pw_sizes(const uint32_t *idx, size_t count, size_t tiles,
                           unsigned long long *tb, unsigned long long *tn)
{
    for (size_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        size_t k0 = tile * LP_TILE + (size_t)threadIdx.x * LP_ITEMS;
        unsigned long long mb = 0, mn = 0;
        for (int j = 0; j < LP_ITEMS; j++)
            if (k0 + j < count) {
                mb += lp_len(idx[k0 + j]);
                mn += pw_nibs(idx[k0 + j]);
            }
        unsigned long long t1, t2;
        block_exscan(mb, &t1);
        block_exscan(mn, &t2);
        if (threadIdx.x == 0) {
            tb[tile] = t1;
            tn[tile] = t2;
        }
    }
}

/* Pass 2, nibbles: each thread's nibbles from its tile's offset on (in
 * nibbles), ORed into the zeroed words at out (two threads may share a
 * byte) */
__global__ void k_pw_nibbles(const uint32_t *idx, size_t count, size_t tiles,
                             const unsigned long long *toffs, unsigned *out)
{
    for (size_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        size_t k0 = tile * LP_TILE + (size_t)threadIdx.x * LP_ITEMS;
        unsigned long long mine = 0;
        for (int j = 0; j < LP_ITEMS; j++)
            if (k0 + j < count)
                mine += pw_nibs(idx[k0 + j]);
        unsigned long long total, o = toffs[tile] + block_exscan(mine, &total);
        for (int j = 0; j < LP_ITEMS && k0 + j < count; j++) {
            uint32_t v = idx[k0 + j];
            for (;;) {
                unsigned nib = (v & 7u) | (v >= 8u ? 8u : 0u);
                pw_or(&out[o / 8], nib << (4 * (unsigned)(o % 8)));
                o++;
                if (v < 8u)
                    break;
                v >>= 3;
            }
        }
    }
}

/* count 32-bit values at idx (device) as byte or nibble varints, whichever
 * is fewer bytes, into out (4-byte aligned); *len the bytes, *nib which */
static dc_status_t pw_pack_u32(const uint32_t *idx, size_t count, uint8_t *out, size_t *len,
                               int *nib, cudaStream_t s)
{
    dc_status_t st = DC_OK;
    unsigned long long *scr = NULL;
    unsigned long long tot[2] = {0, 0};
    *nib = 0;
    *len = 0;
    if (count == 0)
        return DC_OK;
    if (((uintptr_t)out & 3) != 0)
        return dc_error(DC_ERR_INVALID, "cuda varints: output is not 4-byte aligned");
    const size_t tiles = (count + LP_TILE - 1) / LP_TILE;
    const unsigned gt = grid_for(tiles, 1);
    /* tile bytes, tile nibbles, their offsets, the two totals */
    CU_TRY(cudaMallocAsync((void **)&scr, (4 * tiles + 2) * sizeof(*scr), s), "varints scratch");
    CU_TRY(cudaMemsetAsync(scr, 0, (4 * tiles + 2) * sizeof(*scr), s), "varints zero");
    {
        unsigned long long *tb = scr, *tn = scr + tiles, *ob = scr + 2 * tiles,
                           *on = scr + 3 * tiles, *sums = scr + 4 * tiles;
        DC_LAUNCH(k_pw_sizes, gt, BLOCK, s)(idx, count, tiles, tb, tn);
        DC_LAUNCH(k_scan_tiles, 1, BLOCK, s)(tb, tiles, ob, sums);
        DC_LAUNCH(k_scan_tiles, 1, BLOCK, s)(tn, tiles, on, sums + 1);
        CU_TRY(cudaGetLastError(), "varints sizes");
        CU_TRY(cudaMemcpyAsync(tot, sums, sizeof(tot), cudaMemcpyDeviceToHost, s),
               "varints lengths copy");
        CU_TRY(cudaStreamSynchronize(s), "varints sizes");
        /* nibbles when they take fewer bytes */
        const unsigned long long nb = (tot[1] + 1) / 2;
        if (nb < tot[0]) {
            *nib = 1;
            CU_TRY(cudaMemsetAsync(out, 0, (size_t)((nb + 3) & ~3ull), s), "varints clear");
            DC_LAUNCH(k_pw_nibbles, gt, BLOCK, s)(idx, count, tiles, on, (unsigned *)out);
            tot[0] = nb;
        } else {
            DC_LAUNCH(k_lp_varints, gt, BLOCK, s)(idx, count, tiles, 1u,
                                                  (const unsigned long long *)NULL,
                                                  (unsigned long long *)NULL, ob, out, true,
                                                  true);
        }
        CU_TRY(cudaGetLastError(), "varints kernels");
        CU_TRY(cudaStreamSynchronize(s), "varints");
        *len = (size_t)tot[0];
    }
out:
    free_wait(scr, s);
    return st;
}

/* A 256-counter histogram (device) to hist (host), packed as varints when
 * that is smaller (most of its counters are 0: a nibble each); *d2h the
 * bytes that crossed. */
static dc_status_t hist_to_host(const unsigned *dh, uint32_t *hist, size_t *d2h,
                                cudaStream_t s)
{
    dc_status_t st = DC_OK;
    uint8_t *pk = NULL, hp[256 * 5 + 8];
    size_t len = 0;
    int nib = 0;
    CU_TRY(cudaMallocAsync((void **)&pk, sizeof(hp), s), "histogram packing");
    if ((st = pw_pack_u32(dh, 256, pk, &len, &nib, s)) != DC_OK)
        goto out;
    *d2h = 2 * sizeof(unsigned long long); /* the two lengths */
    if (len < 256 * sizeof(unsigned)) {
        CU_TRY(cudaMemcpyAsync(hp, pk, len, cudaMemcpyDeviceToHost, s), "histogram copy");
        CU_TRY(cudaStreamSynchronize(s), "histogram copy");
        *d2h += len;
        if (dc_listunpack_words(hp, len, 256, 4, nib, hist) != DC_OK) {
            st = dc_error(DC_ERR_IO, "cuda: a packed histogram does not unpack: %s",
                          dc_last_error());
            goto out;
        }
    } else {
        CU_TRY(cudaMemcpyAsync(hist, dh, 256 * sizeof(unsigned), cudaMemcpyDeviceToHost, s),
               "histogram copy");
        CU_TRY(cudaStreamSynchronize(s), "histogram copy");
        *d2h += 256 * sizeof(unsigned);
    }
out:
    free_wait(pk, s);
    return st;
}

static dc_status_t kcu_pack_words(const void *words, size_t count, unsigned w, uint8_t *out,
                                  size_t *len, int *nibbles, void *stream)
{
    dc_status_t st = DC_OK;
    uint32_t *idx = NULL;
    cudaStream_t s = S(stream);
    const uint8_t *v = (const uint8_t *)words;
    *nibbles = 0;
    *len = 0;
    if (w != 1 && w != 2 && w != 4)
        return dc_error(DC_ERR_INVALID, "cuda pack words: element width %u is not 1, 2 or 4", w);
    if (((uintptr_t)out & 3) != 0)
        return dc_error(DC_ERR_INVALID, "cuda pack words: output is not 4-byte aligned");
    if (count == 0)
        return DC_OK;
    {
        const unsigned g = grid_for(count, BLOCK);
        CU_TRY(cudaMallocAsync((void **)&idx, count * sizeof(*idx), s), "pack words widening");
        switch (w) {
        case 1: DC_LAUNCH(k_pw_widen<1>, g, BLOCK, s)(v, count, idx); break;
        case 2: DC_LAUNCH(k_pw_widen<2>, g, BLOCK, s)(v, count, idx); break;
        default: DC_LAUNCH(k_pw_widen<4>, g, BLOCK, s)(v, count, idx); break;
        }
        CU_TRY(cudaGetLastError(), "pack words widening");
        st = pw_pack_u32(idx, count, out, len, nibbles, s);
    }
out:
    free_wait(idx, s);
    return st;
}

/* The count ranks rnk of classes cls (NULL: all class 0) grouped by class
 * into idx (class 0's first, each in element order); counts, offs (K x
 * tiles) and sums (K) the zeroed scratch, sums[c] class c's changes after. */
static void lp_group(const uint8_t *cls, const uint32_t *rnk, size_t count, unsigned K,
                     size_t tiles, unsigned long long *counts, unsigned long long *offs,
                     unsigned long long *sums, uint32_t *idx, cudaStream_t s)
{
    const unsigned g = grid_for(tiles, 1);
    DC_LAUNCH(k_lp_count, g, BLOCK, s)(cls, count, tiles, K, counts);
    for (unsigned c = 0; c < K; c++)
        DC_LAUNCH(k_scan_tiles, 1, BLOCK, s)(counts + c * tiles, tiles, offs + c * tiles,
                                             sums + c);
    DC_LAUNCH(k_lp_place, g, BLOCK, s)(cls, rnk, count, tiles, K, offs, sums, idx);
}

/* each grouped rank's gap (lp_gap) */
__global__ void k_lp_gaps(const uint32_t *idx, size_t count, unsigned K,
                          const unsigned long long *sums, uint32_t *gaps)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x)
        gaps[i] = lp_gap(idx, i, sums, K);
}

static dc_status_t kcu_pack_ranks(const uint8_t *cls, const uint32_t *rnk, size_t count,
                                  unsigned K, uint8_t *out, size_t *len, int *nibbles,
                                  uint64_t *ccnt, void *stream)
{
    dc_status_t st = DC_OK;
    unsigned long long *scr = NULL;
    uint32_t *idx = NULL;
    cudaStream_t s = S(stream);
    *nibbles = 0;
    *len = 0;
    if (K < 1 || K > 8 || (!cls && K != 1))
        return dc_error(DC_ERR_INVALID, "cuda pack ranks: %u classes%s", K,
                        cls ? "" : " without a class list");
    if (count > 0 && ((uintptr_t)rnk & 3) != 0)
        return dc_error(DC_ERR_INVALID, "cuda pack ranks: ranks array is not 4-byte aligned");
    const size_t tiles = count ? (count + LP_TILE - 1) / LP_TILE : 1;
    /* counts, offs (K x tiles each), sums (K) */
    const size_t words = 2 * K * tiles + K;
    CU_TRY(cudaMallocAsync((void **)&scr, words * sizeof(*scr), s), "pack ranks scratch");
    CU_TRY(cudaMemsetAsync(scr, 0, words * sizeof(*scr), s), "pack ranks zero");
    if (count > 0) {
        unsigned long long *counts = scr, *offs = scr + K * tiles, *sums = scr + 2 * K * tiles;
        /* the ranks grouped, then their gaps */
        CU_TRY(cudaMallocAsync((void **)&idx, 2 * count * sizeof(*idx), s),
               "pack ranks grouping");
        lp_group(cls, rnk, count, K, tiles, counts, offs, sums, idx, s);
        DC_LAUNCH(k_lp_gaps, grid_for(count, BLOCK), BLOCK, s)(idx, count, K, sums,
                                                                 idx + count);
        CU_TRY(cudaGetLastError(), "pack ranks kernels");
        if ((st = pw_pack_u32(idx + count, count, out, len, nibbles, s)) != DC_OK)
            goto out;
    }
    {
        unsigned long long res[8];
        CU_TRY(cudaMemcpyAsync(res, scr + 2 * K * tiles, K * sizeof(*scr),
                               cudaMemcpyDeviceToHost, s),
               "pack ranks counts copy");
        CU_TRY(cudaStreamSynchronize(s), "pack ranks");
        for (unsigned c = 0; c < K; c++)
            ccnt[c] = res[c];
    }
out:
    if (idx != NULL)
        cudaFreeAsync(idx, s);
    free_wait(scr, s);
    return st;
}

/* ------------------------------------------------------------------------ */
/*  The ctx values on demand (kernels/codec.h dc_codec_vals_t): the step    */
/*  and new words from the base and XOR words, the histogram of the base    */
/*  words' magnitude buckets, and each word list's order-0 histogram as its */
/*  counts in the order the symbols first appear (what ent_values.c sums    */
/*  its entropy in), so that the host picks the values mode without the    */
/*  words.                                                                  */
/* ------------------------------------------------------------------------ */

#ifdef DC_CUDA_EMULATION
__device__ __forceinline__ void vh_atomic_min(unsigned *p, unsigned v)
{
    unsigned o = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (v < o && !__atomic_compare_exchange_n(p, &o, v, true, __ATOMIC_RELAXED,
                                                 __ATOMIC_RELAXED)) {
    }
}
#else
__device__ __forceinline__ void vh_atomic_min(unsigned *p, unsigned v)
{
    atomicMin(p, v);
}
#endif

/* ctx.c dc_ctx_step_word: zigzag(key(next) - key(base)) mod 2^(8W) */
template <int W>
__device__ __forceinline__ unsigned long long vh_step(unsigned long long b, unsigned long long nx)
{
    const unsigned bits = 8 * W;
    const unsigned long long mask = W == 8 ? ~0ull : (1ull << bits) - 1;
    const unsigned long long d = (ctx_key<W>(nx) - ctx_key<W>(b)) & mask;
    const unsigned long long neg = 0 - ((d >> (bits - 1)) & 1);
    return ((d << 1) ^ (neg & mask)) & mask;
}

template <int W>
__global__ void k_vh_words(const uint8_t *bw, const uint8_t *xv, size_t count, uint8_t *steps,
                           uint8_t *neww, uint8_t *bkt, unsigned *bhist)
{
    __shared__ unsigned sh[256];
    for (unsigned i = threadIdx.x; i < 256; i += blockDim.x)
        sh[i] = 0;
    __syncthreads();
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < count;
         k += (size_t)gridDim.x * blockDim.x) {
        unsigned long long b = ctx_ld<W>(bw, k, false), x = ctx_ld<W>(xv, k, false);
        ctx_st<W>(steps, k, false, vh_step<W>(b, b ^ x));
        ctx_st<W>(neww, k, false, b ^ x);
        const unsigned bk = (unsigned)(dcs_mag<W>(bw, k) >> dcs_shift<W>());
        bkt[k] = (uint8_t)bk;
        dcs_atomic_add(&sh[bk], 1u);
    }
    __syncthreads();
    for (unsigned i = threadIdx.x; i < 256; i += blockDim.x)
        if (sh[i])
            dcs_atomic_add(&bhist[i], sh[i]);
}

/* each word's symbol counted, and the first index it appears at */
template <int W>
__global__ void k_wh_count(const uint8_t *v, size_t count, unsigned *hist, unsigned *first)
{
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < count;
         k += (size_t)gridDim.x * blockDim.x) {
        unsigned c = (unsigned)ctx_ld<W>(v, k, false);
        dcs_atomic_add(&hist[c], 1u);
        vh_atomic_min(&first[c], (unsigned)k);
    }
}

/* every symbol's count at the index it first appears at (at[]: all ones
 * elsewhere) */
__global__ void k_wh_mark(const unsigned *hist, const unsigned *first, unsigned nbins,
                          unsigned *at)
{
    for (unsigned c = blockIdx.x * blockDim.x + threadIdx.x; c < nbins;
         c += gridDim.x * blockDim.x)
        if (hist[c])
            at[first[c]] = hist[c];
}

/* the marks kept in index order as LEB128 varints of count - 1: pass 1
 * (write false) sums their bytes per tile into tcnt, pass 2 writes them
 * from the tiles' offsets toffs */
__device__ __forceinline__ uint32_t wh_value(const unsigned *at, const uint8_t *syms,
                                             unsigned w, size_t k)
{
    if (!syms)
        return at[k] - 1u;
    return w == 1 ? syms[k] : (uint32_t)syms[2 * k] | (uint32_t)syms[2 * k + 1] << 8;
}

/* (syms: the words of w bytes; then each mark's word instead of its count:
 * the symbols in the same order) */
__global__ void k_wh_compact(const unsigned *at, size_t count, size_t tiles,
                             unsigned long long *tcnt, const unsigned long long *toffs,
                             uint8_t *out, bool write, const uint8_t *syms, unsigned w)
{
    for (size_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        size_t k0 = tile * LP_TILE + (size_t)threadIdx.x * LP_ITEMS;
        unsigned mine = 0;
        for (int j = 0; j < LP_ITEMS; j++)
            if (k0 + j < count && at[k0 + j] != 0xFFFFFFFFu)
                mine += lp_len(wh_value(at, syms, w, k0 + j));
        unsigned long long total, before = block_exscan(mine, &total);
        if (!write) {
            if (threadIdx.x == 0)
                tcnt[tile] = total;
            continue;
        }
        size_t o = (size_t)(toffs[tile] + before);
        for (int j = 0; j < LP_ITEMS; j++)
            if (k0 + j < count && at[k0 + j] != 0xFFFFFFFFu)
                o = lp_put(out, o, wh_value(at, syms, w, k0 + j));
    }
}

static dc_status_t kcu_ctx_values(const void *bw, const void *xorv, size_t count, unsigned w,
                                  void *steps, void *neww, uint8_t *bkt, uint32_t *bhist,
                                  size_t *d2h, void *stream)
{
    dc_status_t st = DC_OK;
    unsigned *dh = NULL;
    cudaStream_t s = S(stream);
    const uint8_t *b = (const uint8_t *)bw, *x = (const uint8_t *)xorv;
    uint8_t *ps = (uint8_t *)steps, *pn = (uint8_t *)neww;
    const unsigned g = grid_for(count, BLOCK);
    if (!valid_width(w))
        return dc_error(DC_ERR_INVALID, "cuda ctx values: element width %u is not 1, 2, 4 or 8",
                        w);
    CU_TRY(cudaMallocAsync((void **)&dh, 256 * sizeof(unsigned), s), "ctx values scratch");
    CU_TRY(cudaMemsetAsync(dh, 0, 256 * sizeof(unsigned), s), "ctx values zero");
    if (count > 0) {
        switch (w) {
        case 1: DC_LAUNCH(k_vh_words<1>, g, BLOCK, s)(b, x, count, ps, pn, bkt, dh); break;
        case 2: DC_LAUNCH(k_vh_words<2>, g, BLOCK, s)(b, x, count, ps, pn, bkt, dh); break;
        case 4: DC_LAUNCH(k_vh_words<4>, g, BLOCK, s)(b, x, count, ps, pn, bkt, dh); break;
        default: DC_LAUNCH(k_vh_words<8>, g, BLOCK, s)(b, x, count, ps, pn, bkt, dh); break;
        }
        CU_TRY(cudaGetLastError(), "ctx values kernel");
    }
    *d2h = 0;
    if (bhist && (st = hist_to_host(dh, bhist, d2h, s)) != DC_OK)
        goto out;
    CU_TRY(cudaStreamSynchronize(s), "ctx values");
out:
    free_wait(dh, s);
    return st;
}

static dc_status_t word_hist(const void *words, size_t count, unsigned w, uint8_t *out,
                             size_t *len, bool syms, cudaStream_t s);

static dc_status_t kcu_word_hist(const void *words, size_t count, unsigned w, uint8_t *out,
                                 size_t *len, void *stream)
{
    return word_hist(words, count, w, out, len, false, S(stream));
}

static dc_status_t kcu_word_syms(const void *words, size_t count, unsigned w, uint8_t *out,
                                 size_t *len, void *stream)
{
    return word_hist(words, count, w, out, len, true, S(stream));
}

/* the histogram's counts (syms false) or its symbols (true), in the order
 * the words first appear, as LEB128 varints */
static dc_status_t word_hist(const void *words, size_t count, unsigned w, uint8_t *out,
                             size_t *len, bool syms, cudaStream_t s)
{
    dc_status_t st = DC_OK;
    unsigned *scr = NULL;
    unsigned long long *tsc = NULL;
    const uint8_t *v = (const uint8_t *)words;
    if (w != 1 && w != 2)
        return dc_error(DC_ERR_INVALID, "cuda word histogram: element width %u is not 1 or 2",
                        w);
    if (count > 0xFFFFFFFEu)
        return dc_error(DC_ERR_INVALID, "cuda word histogram: %zu words", count);
    const unsigned nbins = 1u << (8 * w);
    const size_t tiles = count ? (count + LP_TILE - 1) / LP_TILE : 1;
    unsigned long long total = 0;
    /* hist, first (nbins each), at (count) */
    CU_TRY(cudaMallocAsync((void **)&scr, (2 * (size_t)nbins + count + 1) * sizeof(unsigned), s),
           "word histogram scratch");
    CU_TRY(cudaMallocAsync((void **)&tsc, (2 * tiles + 1) * sizeof(*tsc), s),
           "word histogram tiles");
    CU_TRY(cudaMemsetAsync(scr, 0, nbins * sizeof(unsigned), s), "word histogram zero");
    CU_TRY(cudaMemsetAsync(scr + nbins, 0xFF, (nbins + count + 1) * sizeof(unsigned), s),
           "word histogram marks");
    CU_TRY(cudaMemsetAsync(tsc, 0, (2 * tiles + 1) * sizeof(*tsc), s), "word histogram tiles");
    if (count > 0) {
        unsigned *hist = scr, *first = scr + nbins, *at = scr + 2 * nbins;
        unsigned long long *tcnt = tsc, *toffs = tsc + tiles, *sum = tsc + 2 * tiles;
        const unsigned g = grid_for(count, BLOCK), gt = grid_for(tiles, 1);
        if (w == 1)
            DC_LAUNCH(k_wh_count<1>, g, BLOCK, s)(v, count, hist, first);
        else
            DC_LAUNCH(k_wh_count<2>, g, BLOCK, s)(v, count, hist, first);
        DC_LAUNCH(k_wh_mark, grid_for(nbins, BLOCK), BLOCK, s)(hist, first, nbins, at);
        DC_LAUNCH(k_wh_compact, gt, BLOCK, s)(at, count, tiles, tcnt,
                                              (const unsigned long long *)NULL,
                                              (uint8_t *)NULL, false, syms ? v : NULL, w);
        DC_LAUNCH(k_scan_tiles, 1, BLOCK, s)(tcnt, tiles, toffs, sum);
        DC_LAUNCH(k_wh_compact, gt, BLOCK, s)(at, count, tiles,
                                              (unsigned long long *)NULL, toffs, out, true,
                                              syms ? v : NULL, w);
        CU_TRY(cudaGetLastError(), "word histogram kernels");
        CU_TRY(cudaMemcpyAsync(&total, sum, sizeof(total), cudaMemcpyDeviceToHost, s),
               "word histogram count copy");
    }
    CU_TRY(cudaStreamSynchronize(s), "word histogram");
    *len = (size_t)total;
out:
    if (tsc != NULL)
        cudaFreeAsync(tsc, s);
    free_wait(scr, s);
    return st;
}

/* ------------------------------------------------------------------------ */
/*  Golomb positions on the device, byte for byte what entropy.h            */
/*  dc_ent_pos_encode writes for each class's ranks: the ranks grouped by   */
/*  class (lp_group); each class's count and last rank to the host, which   */
/*  takes m from dc_ent_pos_param as the CPU encoder does; each code's bits */
/*  per class and tile, their scans; each class's stream at its byte: m as */
/*  a varint, then the codes (q zeros, a one, the truncated binary          */
/*  remainder, MSB first), ORed into the zeroed output.                     */
/* ------------------------------------------------------------------------ */

struct gl_args {
    unsigned long long start[9]; /* grouped index of class c's first rank */
    unsigned long long at[8];    /* the output bit of class c's first code */
    unsigned long long hdr[8];   /* the output byte of class c's m varint */
    unsigned m[8], cut[8], b[8];
    unsigned K;
};

__device__ __forceinline__ unsigned gl_class(const gl_args &a, size_t i)
{
    unsigned c = 0;
    while (c + 1 < a.K && i >= a.start[c + 1])
        c++;
    return c;
}

/* grouped rank i's code: *len its bits, *v its one and remainder (the last
 * *vb bits of it; q zeros before them) */
__device__ __forceinline__ unsigned long long gl_code(const uint32_t *idx, size_t i,
                                                      const gl_args &a, unsigned c,
                                                      unsigned *v, unsigned *vb)
{
    uint32_t g = i == a.start[c] ? idx[i] : idx[i] - idx[i - 1] - 1u;
    uint32_t m = a.m[c];
    uint32_t q = m > 1 ? g / m : g, r = g - q * m;
    unsigned lt = r < a.cut[c];
    unsigned rb = a.b[c] - lt;
    uint32_t rv = lt ? r : r + a.cut[c];
    *v = (unsigned)(((unsigned long long)1 << rb) | rv);
    *vb = rb + 1;
    return (unsigned long long)q + 1 + rb;
}

/* one byte ORed into the output's words (little-endian) */
__device__ __forceinline__ void gl_or_byte(unsigned *out, unsigned long long byte, unsigned v)
{
    pw_or(&out[byte / 4], v << (8 * (unsigned)(byte % 4)));
}

/* Pass 1 (write false): each class's code bits per tile into
 * bits[c * tiles + tile].  Pass 2 (write true): the codes from offs (the
 * tiles' exclusive bits per class) on, and block 0 writes the headers. */
__global__ void k_gl_codes(const uint32_t *idx, size_t count, size_t tiles, gl_args a,
                           unsigned long long *bits, const unsigned long long *offs,
                           unsigned *out, bool write)
{
    if (write && blockIdx.x == 0 && threadIdx.x < a.K &&
        a.start[threadIdx.x + 1] > a.start[threadIdx.x]) {
        unsigned long long o = a.hdr[threadIdx.x];
        uint32_t m = a.m[threadIdx.x];
        while (m >= 0x80u) {
            gl_or_byte(out, o++, (m & 0x7fu) | 0x80u);
            m >>= 7;
        }
        gl_or_byte(out, o, m);
    }
    for (size_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        size_t k0 = tile * LP_TILE + (size_t)threadIdx.x * LP_ITEMS;
        unsigned long long mine[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int j = 0; j < LP_ITEMS && k0 + j < count; j++) {
            unsigned c = gl_class(a, k0 + j), v, vb;
            mine[c] += gl_code(idx, k0 + j, a, c, &v, &vb);
        }
        unsigned long long o[8];
        for (unsigned c = 0; c < a.K; c++) {
            unsigned long long total, before = block_exscan(mine[c], &total);
            if (!write) {
                if (threadIdx.x == 0)
                    bits[c * tiles + tile] = total;
                continue;
            }
            o[c] = a.at[c] + offs[c * tiles + tile] + before;
        }
        if (!write)
            continue;
        for (int j = 0; j < LP_ITEMS && k0 + j < count; j++) {
            unsigned c = gl_class(a, k0 + j), v, vb;
            unsigned long long len = gl_code(idx, k0 + j, a, c, &v, &vb);
            /* the one and the remainder (<= 33 bits) at bit p, MSB first */
            unsigned long long p = o[c] + (len - vb);
            unsigned sh = (unsigned)(p % 8);
            unsigned long long x = (unsigned long long)v << (64 - vb - sh);
            for (unsigned t = 0; t * 8 < sh + vb; t++)
                gl_or_byte(out, p / 8 + t, (unsigned)(x >> (56 - 8 * t)) & 0xffu);
            o[c] += len;
        }
    }
}

static dc_status_t kcu_golomb_ranks(const uint8_t *cls, const uint32_t *rnk, size_t count,
                                    unsigned K, uint8_t *out, size_t cap, size_t *clen,
                                    uint64_t *ccnt, size_t *d2h, void *stream)
{
    dc_status_t st = DC_OK;
    unsigned long long *scr = NULL;
    uint32_t *idx = NULL;
    cudaStream_t s = S(stream);
    *d2h = 0;
    if (K < 1 || K > 8 || (!cls && K != 1))
        return dc_error(DC_ERR_INVALID, "cuda golomb ranks: %u classes%s", K,
                        cls ? "" : " without a class list");
    if ((count > 0 && ((uintptr_t)rnk & 3) != 0) || ((uintptr_t)out & 3) != 0)
        return dc_error(DC_ERR_INVALID, "cuda golomb ranks: ranks or output not 4-byte aligned");
    for (unsigned c = 0; c < K; c++)
        ccnt[c] = clen[c] = 0;
    if (count == 0)
        return DC_OK;
    {
        const size_t tiles = (count + LP_TILE - 1) / LP_TILE;
        const unsigned g = grid_for(tiles, 1);
        /* counts, offs, bits, boffs (K x tiles each), sums, bsums (K) */
        const size_t words = 4 * K * tiles + 2 * K;
        CU_TRY(cudaMallocAsync((void **)&scr, words * sizeof(*scr), s), "golomb ranks scratch");
        CU_TRY(cudaMemsetAsync(scr, 0, words * sizeof(*scr), s), "golomb ranks zero");
        unsigned long long *counts = scr, *offs = scr + K * tiles, *bits = scr + 2 * K * tiles,
                           *boffs = scr + 3 * K * tiles, *sums = scr + 4 * K * tiles,
                           *bsums = sums + K;
        unsigned long long cnt[8] = {count};
        uint32_t last[8];
        gl_args a;
        memset(&a, 0, sizeof(a));
        a.K = K;
        if (cls == NULL) {
            idx = (uint32_t *)rnk; /* one class, in order already */
        } else {
            /* grouped; the counts to the host, then each class's last rank */
            CU_TRY(cudaMallocAsync((void **)&idx, count * sizeof(*idx), s),
                   "golomb ranks grouping");
            lp_group(cls, rnk, count, K, tiles, counts, offs, sums, idx, s);
            CU_TRY(cudaGetLastError(), "golomb ranks grouping");
            CU_TRY(cudaMemcpyAsync(cnt, sums, K * sizeof(*sums), cudaMemcpyDeviceToHost, s),
                   "golomb ranks counts copy");
            CU_TRY(cudaStreamSynchronize(s), "golomb ranks grouping");
            *d2h += K * sizeof(*sums);
        }
        for (unsigned c = 0; c < K; c++) {
            a.start[c + 1] = a.start[c] + cnt[c];
            if (cnt[c] == 0 || a.start[c + 1] > count)
                continue;
            CU_TRY(cudaMemcpyAsync(&last[c], idx + a.start[c + 1] - 1, sizeof(*last),
                                   cudaMemcpyDeviceToHost, s),
                   "golomb ranks last copy");
            *d2h += sizeof(*last);
        }
        if (a.start[K] != count) {
            st = dc_error(DC_ERR_IO, "cuda golomb ranks: class counts sum to %llu of %zu",
                          a.start[K], count);
            goto out;
        }
        CU_TRY(cudaStreamSynchronize(s), "golomb ranks last");
        /* m as the CPU encoder picks it (its doubles, on the host) */
        for (unsigned c = 0; c < K; c++) {
            uint64_t m = cnt[c] ? dc_ent_pos_param((size_t)cnt[c], (uint64_t)last[c] + 1) : 1;
            unsigned b = 0;
            while (b < 32 && (1ull << b) < m)
                b++;
            a.m[c] = (unsigned)m;
            a.b[c] = b;
            a.cut[c] = (unsigned)((1ull << b) - m);
        }
        DC_LAUNCH(k_gl_codes, g, BLOCK, s)(idx, count, tiles, a, bits, boffs, (unsigned *)out,
                                           false);
        for (unsigned c = 0; c < K; c++)
            DC_LAUNCH(k_scan_tiles, 1, BLOCK, s)(bits + c * tiles, tiles, boffs + c * tiles,
                                                 bsums + c);
        CU_TRY(cudaGetLastError(), "golomb ranks sizes");
        unsigned long long cb[8];
        CU_TRY(cudaMemcpyAsync(cb, bsums, K * sizeof(*bsums), cudaMemcpyDeviceToHost, s),
               "golomb ranks bits copy");
        CU_TRY(cudaStreamSynchronize(s), "golomb ranks sizes");
        *d2h += K * sizeof(*bsums);
        /* each class's stream: m's varint, its codes' bytes */
        size_t o = 0;
        for (unsigned c = 0; c < K; c++) {
            if (cnt[c] == 0)
                continue;
            uint8_t vb[10];
            size_t hl = dc_ent_put_varint(vb, a.m[c]);
            a.hdr[c] = o;
            a.at[c] = 8ull * (o + hl);
            clen[c] = hl + (size_t)((cb[c] + 7) / 8);
            ccnt[c] = cnt[c];
            o += clen[c];
            if (o > cap) {
                st = dc_error(DC_ERR_BUSY, "cuda golomb ranks: streams past %zu bytes", cap);
                goto out;
            }
        }
        CU_TRY(cudaMemsetAsync(out, 0, (o + 3) & ~(size_t)3, s), "golomb ranks clear");
        DC_LAUNCH(k_gl_codes, g, BLOCK, s)(idx, count, tiles, a, bits, boffs, (unsigned *)out,
                                           true);
        CU_TRY(cudaGetLastError(), "golomb ranks codes");
        CU_TRY(cudaStreamSynchronize(s), "golomb ranks codes");
    }
out:
    if (idx != NULL && idx != rnk)
        cudaFreeAsync(idx, s);
    free_wait(scr, s);
    if (st != DC_OK)
        for (unsigned c = 0; c < K; c++)
            clen[c] = 0;
    return st;
}

/* ------------------------------------------------------------------------ */
/*  rANS values on the device, byte for byte what ent_rans.c writes after   */
/*  the table the host made (entropy.h dc_ent_rans_table): the encoder      */
/*  symbols from each symbol's quantized frequency (their cumulative by a   */
/*  block scan), then one thread a state (symbol i by state i % ways, i     */
/*  descending, as the CPU's loops; each state's chain is independent of    */
/*  the others'), each symbol's renormalization output recorded; a scan of  */
/*  their lengths in symbol order places them after the final states.      */
/*  (DC_RANS_L, DC_R32_L: ent_rans.c's initial states; the tests compare    */
/*  every byte with the CPU's.)                                             */
/* ------------------------------------------------------------------------ */

#define RE_L (1u << 23)   /* entropy_internal.h DC_RANS_L */
#define RE_L32 (1u << 15) /* DC_R32_L */

struct re_esym {
    uint32_t x_max, rcp_freq, bias;
    uint32_t cmpl_freq, rcp_shift;
};

/* one block: qs[k] = symbol | (frequency - 1) << 16, increasing symbols;
 * esym[k] as ent_rans.c's dc_rans_table / dc_r32_encode make them, lut[sym]
 * = k */
__global__ void k_re_table(const uint32_t *qs, size_t nsym, unsigned S, unsigned ways,
                           re_esym *esym, uint16_t *lut)
{
    const uint32_t M = 1u << S;
    unsigned long long carry = 0;
    for (size_t base = 0; base < nsym; base += BLOCK) {
        size_t k = base + threadIdx.x;
        uint32_t f = k < nsym ? (qs[k] >> 16) + 1u : 0u;
        unsigned long long total, cum = carry + block_exscan(f, &total);
        if (k < nsym) {
            re_esym e;
            e.x_max = ways == 32 ? f << (31 - S) : ((RE_L >> S) << 8) * f;
            e.cmpl_freq = M - f;
            if (f < 2) {
                e.rcp_freq = ~0u;
                e.rcp_shift = 0;
                e.bias = (uint32_t)cum + M - 1;
            } else {
                uint32_t shift = 0;
                while (f > (1u << shift))
                    shift++;
                e.rcp_freq = (uint32_t)(((1ull << (shift + 31)) + f - 1) / f);
                e.rcp_shift = shift - 1;
                e.bias = (uint32_t)cum;
            }
            esym[k] = e;
            lut[qs[k] & 0xffffu] = (uint16_t)k;
        }
        carry += total;
    }
}

/* thread j < ways: state j's symbols, i descending; rec[i] the output of
 * symbol i (bits 16-17 its length: 0-2 bytes; its bytes in output order
 * in bits 0-15, the first in bits 0-7), then the final state at out + 4j */
template <int W>
__global__ void k_re_lanes(const uint8_t *v, size_t count, unsigned ways, const re_esym *esym,
                           const uint16_t *lut, size_t nsym, uint32_t *rec, uint8_t *out,
                           unsigned *bad)
{
    const unsigned j = threadIdx.x;
    if (blockIdx.x != 0 || j >= ways)
        return;
    uint32_t x = ways == 32 ? RE_L32 : RE_L;
    if (count > j) {
        size_t i = count - 1 - ((count - 1 - j) % ways);
        for (;;) {
            unsigned k = lut[(unsigned)ctx_ld<W>(v, i, false)];
            if (k >= nsym) { /* a word the table does not have: refused */
                *bad = 1;
                k = 0;
            }
            const re_esym e = esym[k];
            uint32_t r;
            if (ways == 32) {
                /* at most one 16-bit word, little-endian */
                unsigned nb = x >= e.x_max;
                r = nb ? (2u << 16) | (x & 0xffffu) : 0u;
                x >>= 16 * nb;
            } else {
                /* 0, 1 (the low byte) or 2 bytes (high, then low) */
                unsigned nb = (unsigned)(x >= e.x_max) +
                              (unsigned)((unsigned long long)x >= (unsigned long long)e.x_max << 8);
                r = nb == 2 ? (2u << 16) | ((x >> 8) & 0xffu) | (x & 0xffu) << 8
                    : nb == 1 ? (1u << 16) | (x & 0xffu)
                              : 0u;
                x >>= 8 * nb;
            }
            rec[i] = r;
            uint32_t q = (uint32_t)(((unsigned long long)x * e.rcp_freq) >> 32) >> e.rcp_shift;
            x = x + e.bias + q * e.cmpl_freq;
            if (i < ways)
                break;
            i -= ways;
        }
    }
    for (int b = 0; b < 4; b++)
        out[4 * j + b] = (uint8_t)(x >> (8 * b));
}

/* pass 1 (write false): the output bytes per tile; pass 2: each symbol's
 * bytes at base + the tile's offset + the thread's */
__global__ void k_re_place(const uint32_t *rec, size_t count, size_t tiles,
                           unsigned long long *tcnt, const unsigned long long *toffs,
                           uint8_t *base, bool write)
{
    for (size_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        size_t k0 = tile * LP_TILE + (size_t)threadIdx.x * LP_ITEMS;
        unsigned mine = 0;
        for (int j = 0; j < LP_ITEMS && k0 + j < count; j++)
            mine += rec[k0 + j] >> 16;
        unsigned long long total, before = block_exscan(mine, &total);
        if (!write) {
            if (threadIdx.x == 0)
                tcnt[tile] = total;
            continue;
        }
        unsigned long long o = toffs[tile] + before;
        for (int j = 0; j < LP_ITEMS && k0 + j < count; j++) {
            uint32_t r = rec[k0 + j];
            for (unsigned b = 0; b < (r >> 16); b++)
                base[o++] = (uint8_t)(r >> (8 * b));
        }
    }
}

static dc_status_t kcu_rans_encode(const void *words, size_t count, unsigned w,
                                   const uint32_t *qs, size_t nsym, unsigned scale, unsigned ways,
                                   uint8_t *out, size_t cap, size_t *len, size_t *h2d,
                                   void *stream)
{
    dc_status_t st = DC_OK;
    uint8_t *scr = NULL;
    cudaStream_t s = S(stream);
    const uint8_t *v = (const uint8_t *)words;
    *len = 0;
    *h2d = 0;
    if ((w != 1 && w != 2) || count == 0 || nsym == 0 || nsym > ((size_t)1 << (8 * w)) ||
        scale < 1 || scale > 16 || (ways != 1 && ways != 2 && ways != 4 && ways != 32) ||
        (ways == 32 && scale > 15))
        return dc_error(DC_ERR_INVALID, "cuda rans encode: %zu words of %u bytes, %zu symbols, "
                        "scale %u, %u ways", count, w, nsym, scale, ways);
    {
        /* the table: increasing symbols of w bytes whose frequencies sum to
         * 2^scale (what dc_ent_rans_table makes; anything else would index
         * past the device's lookup or code a stream no decoder reads) */
        uint64_t fsum = 0;
        for (size_t k = 0; k < nsym; k++) {
            uint32_t sym = qs[k] & 0xffffu;
            if (sym >> (8 * w) != 0 || (k > 0 && sym <= (qs[k - 1] & 0xffffu)))
                return dc_error(DC_ERR_INVALID, "cuda rans encode: table entry %zu (symbol "
                                "%#x) is not an increasing %u-byte symbol", k, sym, w);
            fsum += (qs[k] >> 16) + 1u;
        }
        if (fsum != (uint64_t)1 << scale)
            return dc_error(DC_ERR_INVALID, "cuda rans encode: the table's frequencies sum to "
                            "%llu, not 2^%u", (unsigned long long)fsum, scale);
    }
    if (cap < 4 * (size_t)ways)
        return dc_error(DC_ERR_BUSY, "cuda rans encode: output of %zu bytes", cap);
    {
        const size_t tiles = (count + LP_TILE - 1) / LP_TILE;
        /* qs (nsym), esym (nsym), lut (2^(8w)), rec (count), tiles (2 x
         * tiles + 1), each 16-byte aligned */
        const size_t o_es = (nsym * 4 + 15) & ~(size_t)15,
                     o_lut = o_es + ((nsym * sizeof(re_esym) + 15) & ~(size_t)15),
                     o_rec = o_lut + ((((size_t)2 << (8 * w)) + 15) & ~(size_t)15),
                     o_t = o_rec + ((count * 4 + 15) & ~(size_t)15),
                     total_b = o_t + (2 * tiles + 2) * sizeof(unsigned long long);
        CU_TRY(cudaMallocAsync((void **)&scr, total_b, s), "rans encode scratch");
        uint32_t *dqs = (uint32_t *)scr, *rec = (uint32_t *)(scr + o_rec);
        re_esym *es = (re_esym *)(scr + o_es);
        uint16_t *lut = (uint16_t *)(scr + o_lut);
        unsigned long long *tcnt = (unsigned long long *)(scr + o_t), *toffs = tcnt + tiles,
                           *sum = tcnt + 2 * tiles, bytes = 0;
        unsigned *bad = (unsigned *)(sum + 1), hbad = 0;
        CU_TRY(cudaMemcpyAsync(dqs, qs, nsym * 4, cudaMemcpyHostToDevice, s), "rans table copy");
        *h2d = nsym * 4;
        /* every symbol the table lacks: 0xffff (refused below) */
        CU_TRY(cudaMemsetAsync(lut, 0xff, (size_t)2 << (8 * w), s), "rans table clear");
        CU_TRY(cudaMemsetAsync(bad, 0, sizeof(*bad), s), "rans flag clear");
        DC_LAUNCH(k_re_table, 1, BLOCK, s)(dqs, nsym, scale, ways, es, lut);
        if (w == 1)
            DC_LAUNCH(k_re_lanes<1>, 1, BLOCK, s)(v, count, ways, es, lut, nsym, rec, out, bad);
        else
            DC_LAUNCH(k_re_lanes<2>, 1, BLOCK, s)(v, count, ways, es, lut, nsym, rec, out, bad);
        const unsigned gt = grid_for(tiles, 1);
        DC_LAUNCH(k_re_place, gt, BLOCK, s)(rec, count, tiles, tcnt,
                                            (const unsigned long long *)NULL, (uint8_t *)NULL,
                                            false);
        DC_LAUNCH(k_scan_tiles, 1, BLOCK, s)(tcnt, tiles, toffs, sum);
        CU_TRY(cudaGetLastError(), "rans encode kernels");
        CU_TRY(cudaMemcpyAsync(&bytes, sum, sizeof(bytes), cudaMemcpyDeviceToHost, s),
               "rans encode length copy");
        CU_TRY(cudaMemcpyAsync(&hbad, bad, sizeof(hbad), cudaMemcpyDeviceToHost, s),
               "rans encode flag copy");
        CU_TRY(cudaStreamSynchronize(s), "rans encode");
        if (hbad) {
            st = dc_error(DC_ERR_INVALID, "cuda rans encode: a word whose symbol the table "
                          "does not have");
            goto out;
        }
        if (bytes > cap - 4 * (size_t)ways) {
            st = dc_error(DC_ERR_BUSY, "cuda rans encode: %llu bytes past the output", bytes);
            goto out;
        }
        DC_LAUNCH(k_re_place, gt, BLOCK, s)(rec, count, tiles, (unsigned long long *)NULL,
                                            toffs, out + 4 * ways, true);
        CU_TRY(cudaGetLastError(), "rans encode placement");
        CU_TRY(cudaStreamSynchronize(s), "rans encode placement");
        *len = 4 * (size_t)ways + (size_t)bytes;
    }
out:
    free_wait(scr, s);
    return st;
}

/* ======================== end of the device sender ======================== */

#ifndef DC_KCU_OPS_NAME
#define DC_KCU_OPS_NAME dc_kern_cuda_build_ops
#define DC_KCU_OPS_LABEL "cuda"
#endif
extern "C" const dc_kern_cuda_ops_t DC_KCU_OPS_NAME = {
    DC_KCU_OPS_LABEL, kcu_available, kcu_why, kcu_props, kcu_malloc, kcu_free, kcu_h2d,
    kcu_d2h, kcu_memset, kcu_sync, kcu_count_changed, kcu_diff, kcu_gather, kcu_xor_scatter,
    kcu_put_scatter, kcu_xor_dense, kcu_digest128, kcu_digest128_dev, kcu_crc32c,
    kcu_values_decode, kcu_golomb_decode, kcu_ctx_apply, kcu_gaps_positions,
    kcu_golomb_decode_multi,
    /* device sender */
    kcu_d2d, kcu_ctx_sample, kcu_ctx_rank,
    /* batched device digests */
    kcu_digest128_dev_pieces,
    /* pinned host memory */
    kcu_host_register, kcu_host_unregister,
    /* packed rank lists */
    kcu_pack_ranks,
    /* ctx values on demand */
    kcu_ctx_values, kcu_word_hist, kcu_pack_words,
    /* Golomb positions */
    kcu_golomb_ranks,
    /* streams */
    kcu_stream_create, kcu_stream_destroy, kcu_copy,
    /* rANS values */
    kcu_word_syms, kcu_rans_encode,
};
