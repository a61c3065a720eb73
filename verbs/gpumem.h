/*
 * gpumem.h - device (CUDA) memory in the transports (verbs/gpumem.c).
 *
 * What ucx.c and rdma.c need to move messages that live in GPU memory
 * without the CPU ever reading them: recognising a device pointer, the hop
 * CRC32C computed by the GPU (kernels/kern_cuda.h), copies between host
 * bytes that arrived and a device buffer, and the fault hook's corrupt= on a
 * device buffer.  Every function takes the memory kind (DC_VERBS_MEM_HOST or
 * DC_VERBS_MEM_CUDA) and does the plain CPU thing for host memory.
 *
 * In a build without CUDA kernels (no nvcc), detection still works (it only
 * needs the driver, through dlopen) so that device memory is refused with a
 * clear error instead of being read by the CPU; the CRC32C and the copies of
 * device memory fail with DC_ERR_UNSUPPORTED.
 */
#ifndef DC_VERBS_GPUMEM_H
#define DC_VERBS_GPUMEM_H

#include "verbs/transport.h"

/**
 * 1 when `p` is CUDA device memory (cuPointerGetAttribute, MEMORY_TYPE
 * DEVICE and not managed), else 0.  The driver (libcuda.so.1) is only asked
 * when the process has already loaded it: a process that never touched CUDA
 * has no device memory, and pays nothing.  Thread-safe.
 */
int dc_verbs_is_cuda_ptr(const void *p);

/** A dma-buf file descriptor for device memory [buf, buf + len) (for
 *  ibv_reg_dmabuf_mr), through the CUDA driver the process uses (the one
 *  loader of this file); DC_ERR_UNSUPPORTED with the reason otherwise. */
dc_status_t dc_verbs_cuda_dmabuf_fd(void *buf, size_t len, int *fd);

/** The kind of a message buffer: the registration's when there is one,
 *  else DC_VERBS_MEM_CUDA for a detected device pointer, else host. */
uint32_t dc_verbs_buf_kind(uint32_t mr_kind, const void *buf);

/** *out = dc_crc32c(0, buf, len) for a buffer of `kind` (device memory: the
 *  CUDA kernel, synchronous).  Errors only for device memory. */
dc_status_t dc_verbs_crc32c(uint32_t kind, const void *buf, size_t len, uint32_t *out);

/** Copy `n` host bytes into `dst` of `kind`. */
dc_status_t dc_verbs_copy_in(uint32_t kind, void *dst, const void *src, size_t n);

/** The fault hook's corrupt= on a received buffer of `kind` (device memory
 *  through a host bounce buffer).  Returns what dc_fault_on_recv() does. */
bool dc_verbs_fault_on_recv(uint32_t kind, uint8_t *buf, size_t len);

#endif /* DC_VERBS_GPUMEM_H */
