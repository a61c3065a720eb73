/*
 * kern_cuda.cu - CUDA versions of the host kernels (see kern_cuda.h).
 *
 * Layout of diff: the input is cut into 16-byte "units" (whole elements,
 * since w divides 16) and units into tiles of TILE_UNITS.  A 256-thread
 * block owns one tile and walks it in ROUNDS rounds; in round j thread t
 * owns unit tile*TILE_UNITS + j*256 + t, so loads are coalesced and the
 * order (round, thread, element) is the element order.  Pass 1 counts the
 * changed elements per tile, pass 2 scans the tile counts (one block), pass
 * 3 recomputes each tile's changes and, with a block-wide exclusive scan per
 * round, writes positions and XOR words to their final slots.  The output
 * is exactly dc_kern_diff()'s.
 *
 * CUDA errors are translated to dc_status_t at this boundary.
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
#include "kernels/kern_cuda.h"
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

template <int W>
__global__ void k_tile_count(const uint8_t *a, const uint8_t *b, size_t n, size_t units,
                             size_t tiles, bool aligned, unsigned long long *tile_counts)
{
    const size_t bytes = n * W;
    for (size_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        unsigned long long c = 0;
#pragma unroll 2
        for (int r = 0; r < ROUNDS; r++) {
            size_t u = tile * TILE_UNITS + (size_t)r * BLOCK + threadIdx.x;
            if (u >= units)
                break;
            unit16 ua, ub;
            load_unit(a, u, bytes, aligned, ua);
            load_unit(b, u, bytes, aligned, ub);
            ua.v.x ^= ub.v.x;
            ua.v.y ^= ub.v.y;
            ua.v.z ^= ub.v.z;
            ua.v.w ^= ub.v.w;
            c += __popc(unit_mask<W>(ua, u, n));
        }
        unsigned long long total;
        block_exscan(c, &total);
        if (threadIdx.x == 0)
            tile_counts[tile] = total;
    }
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

template <int W>
__device__ __forceinline__ void store_elem(uint8_t *dst, size_t k, const uint8_t *src,
                                           bool aligned)
{
    if (aligned) {
        if (W == 1)
            dst[k] = src[0];
        else if (W == 2)
            reinterpret_cast<uint16_t *>(dst)[k] = (uint16_t)(src[0] | (src[1] << 8));
        else if (W == 4) {
            uint32_t v;
            memcpy(&v, src, 4);
            reinterpret_cast<uint32_t *>(dst)[k] = v;
        } else {
            unsigned long long v;
            memcpy(&v, src, 8);
            reinterpret_cast<unsigned long long *>(dst)[k] = v;
        }
    } else {
#pragma unroll
        for (int i = 0; i < W; i++)
            dst[k * W + i] = src[i];
    }
}

template <int W>
__global__ void k_compact(const uint8_t *a, const uint8_t *b, size_t n, size_t units,
                          size_t tiles, bool aligned, const unsigned long long *tile_counts,
                          const unsigned long long *tile_offs, uint32_t *pos, uint8_t *xorw,
                          bool xorw_aligned, size_t cap)
{
    constexpr int EPU = 16 / W;
    const size_t bytes = n * W;
    for (size_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        /* uniform per block: whole block skips together */
        if (tile_counts[tile] == 0 || tile_offs[tile] >= cap)
            continue;
        unsigned long long k0 = tile_offs[tile];
        for (int r = 0; r < ROUNDS; r++) {
            size_t tile_first = tile * TILE_UNITS + (size_t)r * BLOCK;
            if (tile_first >= units)
                break; /* uniform */
            size_t u = tile_first + threadIdx.x;
            unit16 ua, ub;
            uint32_t m = 0;
            if (u < units) {
                load_unit(a, u, bytes, aligned, ua);
                load_unit(b, u, bytes, aligned, ub);
                ua.v.x ^= ub.v.x;
                ua.v.y ^= ub.v.y;
                ua.v.z ^= ub.v.z;
                ua.v.w ^= ub.v.w;
                m = unit_mask<W>(ua, u, n);
            }
            unsigned long long total;
            unsigned long long k = k0 + block_exscan((unsigned long long)__popc(m), &total);
            while (m) {
                int e = __ffs(m) - 1;
                m &= m - 1;
                if (k < cap) {
                    pos[k] = (uint32_t)(u * EPU + e);
                    store_elem<W>(xorw, k, &ua.b[e * W], xorw_aligned);
                }
                k++;
            }
            k0 += total;
            if (k0 >= cap)
                break; /* uniform */
        }
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
    unsigned long long *scratch = NULL, host_sum = 0;
    const unsigned grid = grid_for(tiles, 1);

    CU_TRY(cudaMallocAsync((void **)&scratch, (2 * tiles + 1) * sizeof(*scratch), s),
           "diff scratch");
    DC_LAUNCH(k_tile_count<W>, grid, BLOCK, s)((const uint8_t *)a, (const uint8_t *)b, n, units,
                                          tiles, aligned, scratch);
    CU_TRY(cudaGetLastError(), "diff count kernel");
    DC_LAUNCH(k_scan_tiles, 1, BLOCK, s)(scratch, tiles, scratch + tiles, scratch + 2 * tiles);
    CU_TRY(cudaGetLastError(), "diff scan kernel");
    if (compact && cap > 0) {
        DC_LAUNCH(k_compact<W>, grid, BLOCK, s)((const uint8_t *)a, (const uint8_t *)b, n, units,
                                           tiles, aligned, scratch, scratch + tiles, pos,
                                           (uint8_t *)xorw, xa, cap);
        CU_TRY(cudaGetLastError(), "diff compact kernel");
    }
    CU_TRY(cudaMemcpyAsync(&host_sum, scratch + 2 * tiles, sizeof(host_sum),
                           cudaMemcpyDeviceToHost, s),
           "diff count copy");
    CU_TRY(cudaFreeAsync(scratch, s), "diff scratch free");
    scratch = NULL;
    CU_TRY(cudaStreamSynchronize(s), "diff");
    *count = (size_t)host_sum;
out:
    if (scratch != NULL) {
        cudaFreeAsync(scratch, s);
        cudaStreamSynchronize(s);
    }
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
/*  C ABI                                                                   */
/* ------------------------------------------------------------------------ */

extern "C" int dc_kern_cuda_available(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky "no driver" error */
        return 0;
    }
    return n > 0;
}

extern "C" const char *dc_kern_cuda_why(void)
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

extern "C" dc_status_t dc_kern_cuda_props(dc_kern_cuda_props_t *out)
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

extern "C" dc_status_t dc_kern_cuda_malloc(void **dptr, size_t bytes)
{
    dc_status_t st = DC_OK;
    void *p = NULL;
    CU_TRY(cudaMalloc(&p, bytes ? bytes : 1), "malloc");
    *dptr = p;
out:
    return st;
}

extern "C" void dc_kern_cuda_free(void *dptr)
{
    if (dptr != NULL)
        cudaFree(dptr);
}

extern "C" dc_status_t dc_kern_cuda_h2d(void *dst, const void *src, size_t bytes)
{
    dc_status_t st = DC_OK;
    if (bytes)
        CU_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "copy to device");
out:
    return st;
}

extern "C" dc_status_t dc_kern_cuda_d2h(void *dst, const void *src, size_t bytes)
{
    dc_status_t st = DC_OK;
    if (bytes)
        CU_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "copy to host");
out:
    return st;
}

extern "C" dc_status_t dc_kern_cuda_memset(void *dst, int byte, size_t bytes)
{
    dc_status_t st = DC_OK;
    if (bytes)
        CU_TRY(cudaMemset(dst, byte, bytes), "memset");
out:
    return st;
}

extern "C" dc_status_t dc_kern_cuda_sync(void *stream)
{
    dc_status_t st = DC_OK;
    CU_TRY(cudaStreamSynchronize(S(stream)), "stream synchronize");
out:
    return st;
}

extern "C" dc_status_t dc_kern_cuda_count_changed(const void *a, const void *b, size_t n,
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

extern "C" dc_status_t dc_kern_cuda_diff(const void *a, const void *b, size_t n, unsigned w,
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

extern "C" dc_status_t dc_kern_cuda_gather(const void *b, unsigned w, const uint32_t *pos,
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
        CU_TRY(cudaMemcpy(pv, pos + (k > 0 ? k - 1 : 0), (k > 0 ? 2 : 1) * sizeof(uint32_t),
                          cudaMemcpyDeviceToHost),
               "position copy");
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

extern "C" dc_status_t dc_kern_cuda_xor_scatter(void *dst, size_t n, unsigned w,
                                                const uint32_t *pos, const void *xorw,
                                                size_t count, void *stream)
{
    return scatter(dst, n, w, pos, xorw, count, stream, true);
}

extern "C" dc_status_t dc_kern_cuda_put_scatter(void *dst, size_t n, unsigned w,
                                                const uint32_t *pos, const void *vals,
                                                size_t count, void *stream)
{
    return scatter(dst, n, w, pos, vals, count, stream, false);
}

extern "C" dc_status_t dc_kern_cuda_xor_dense(void *dst, const void *src, size_t bytes,
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

extern "C" dc_status_t dc_kern_cuda_digest128(const void *buf, size_t len, dc_digest_t *out,
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

extern "C" dc_status_t dc_kern_cuda_crc32c(const void *buf, size_t len, uint32_t crc,
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
    if (dres != NULL) {
        cudaFreeAsync(dres, s);
        cudaStreamSynchronize(s);
    }
    return st;
}
