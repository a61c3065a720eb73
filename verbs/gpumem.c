/*
 * gpumem.c - device (CUDA) memory in the transports (see gpumem.h).
 */
#include "verbs/gpumem.h"

#include "kernels/kern.h"
#include "kernels/kern_cuda.h"
#include "verbs/fault.h"

#include <dlfcn.h>
#include <link.h>
#include <stddef.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* The driver API's cuPointerGetAttribute, spelled out (no cuda.h needed). */
typedef int (*dc_cu_ptr_attr_fn)(void *data, int attribute, unsigned long long ptr);
#define DC_CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define DC_CU_POINTER_ATTRIBUTE_IS_MANAGED 8
#define DC_CU_MEMORYTYPE_DEVICE 2

static _Atomic(dc_cu_ptr_attr_fn) dc_cu_ptr_attr;
/* dlpi_adds (objects ever loaded) when libcuda was last found missing. */
static _Atomic unsigned long long dc_cu_missing_adds;

static int dc_verbs_adds_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    if (size >= offsetof(struct dl_phdr_info, dlpi_adds) + sizeof(info->dlpi_adds))
        *(unsigned long long *)arg = info->dlpi_adds;
    return 1; /* the first object is enough: the counter is global */
}

static dc_cu_ptr_attr_fn dc_verbs_cu_fn(void)
{
    dc_cu_ptr_attr_fn fn = atomic_load_explicit(&dc_cu_ptr_attr, memory_order_acquire);
    if (fn)
        return fn;
    /* RTLD_NOLOAD: only a driver the process already uses (no device memory
     * can exist otherwise).  dlopen() of a missing name costs ~25 us (a
     * search), so it is asked again only once a library was loaded since
     * (glibc's load counter, ~0.1 us to read). */
    unsigned long long adds = 0;
    dl_iterate_phdr(dc_verbs_adds_cb, &adds);
    if (adds != 0 && adds == atomic_load_explicit(&dc_cu_missing_adds, memory_order_relaxed))
        return NULL;
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (!h) {
        atomic_store_explicit(&dc_cu_missing_adds, adds, memory_order_relaxed);
        return NULL;
    }
    fn = (dc_cu_ptr_attr_fn)(uintptr_t)dlsym(h, "cuPointerGetAttribute");
    if (fn)
        atomic_store_explicit(&dc_cu_ptr_attr, fn, memory_order_release);
    /* the handle stays open (the driver is loaded for good anyway) */
    return fn;
}

/* cuMemGetHandleForAddressRange (CUDA >= 11.7), looked up once in the
 * driver the process uses (types are the driver API's, spelled out). */
typedef int (*dc_cu_get_handle_fn)(void *handle, unsigned long long dptr, size_t size,
                                   int handle_type, unsigned long long flags);
#define DC_CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD 1
static _Atomic(dc_cu_get_handle_fn) dc_cu_get_handle;

dc_status_t dc_verbs_cuda_dmabuf_fd(void *buf, size_t len, int *fd)
{
    dc_cu_get_handle_fn fn = atomic_load_explicit(&dc_cu_get_handle, memory_order_acquire);
    if (!fn && dc_verbs_cu_fn()) {
        /* the driver is loaded (dc_verbs_cu_fn found it): take its handle */
        void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
        if (h)
            fn = (dc_cu_get_handle_fn)(uintptr_t)dlsym(h, "cuMemGetHandleForAddressRange");
        if (fn)
            atomic_store_explicit(&dc_cu_get_handle, fn, memory_order_release);
    }
    if (!fn)
        return dc_error(DC_ERR_UNSUPPORTED, "rdma: the CUDA driver has no "
                                            "cuMemGetHandleForAddressRange (CUDA >= 11.7 "
                                            "and a dma-buf capable driver are needed)");
    int out = -1;
    int rc = fn(&out, (unsigned long long)(uintptr_t)buf, len,
                DC_CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
    if (rc != 0 || out < 0)
        return dc_error(DC_ERR_UNSUPPORTED,
                        "rdma: cuMemGetHandleForAddressRange failed (CUresult %d): the range "
                        "must be page-aligned device memory",
                        rc);
    *fd = out;
    return DC_OK;
}

int dc_verbs_is_cuda_ptr(const void *p)
{
    if (!p)
        return 0;
    dc_cu_ptr_attr_fn fn = dc_verbs_cu_fn();
    if (!fn)
        return 0;
    unsigned long long type = 0, managed = 0; /* wide: the driver writes 4 bytes */
    if (fn(&type, DC_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (unsigned long long)(uintptr_t)p) != 0)
        return 0; /* CUDA_ERROR_INVALID_VALUE: host memory the driver does not know */
    if ((type & 0xffffffffu) != DC_CU_MEMORYTYPE_DEVICE)
        return 0;
    if (fn(&managed, DC_CU_POINTER_ATTRIBUTE_IS_MANAGED, (unsigned long long)(uintptr_t)p) ==
            0 &&
        (managed & 0xffffffffu) != 0)
        return 0; /* managed memory: the CPU can read it */
    return 1;
}

uint32_t dc_verbs_buf_kind(uint32_t mr_kind, const void *buf)
{
    if (mr_kind)
        return mr_kind;
    return dc_verbs_is_cuda_ptr(buf) ? DC_VERBS_MEM_CUDA : DC_VERBS_MEM_HOST;
}

dc_status_t dc_verbs_crc32c(uint32_t kind, const void *buf, size_t len, uint32_t *out)
{
    if (kind != DC_VERBS_MEM_CUDA) {
        *out = dc_crc32c(0, buf, len);
        return DC_OK;
    }
    return dc_kern_cuda_crc32c(buf, len, 0, out, NULL);
}

dc_status_t dc_verbs_copy_in(uint32_t kind, void *dst, const void *src, size_t n)
{
    if (kind != DC_VERBS_MEM_CUDA) {
        if (n)
            memcpy(dst, src, n);
        return DC_OK;
    }
    return dc_kern_cuda_h2d(dst, src, n);
}

bool dc_verbs_fault_on_recv(uint32_t kind, uint8_t *buf, size_t len)
{
    if (kind != DC_VERBS_MEM_CUDA)
        return dc_fault_on_recv(buf, len);
    uint8_t *b = malloc(len ? len : 1);
    if (!b)
        return false;
    bool hit = false;
    if (dc_kern_cuda_d2h(b, buf, len) == DC_OK) {
        hit = dc_fault_on_recv(b, len);
        if (hit && dc_kern_cuda_h2d(buf, b, len) != DC_OK)
            hit = false;
    }
    free(b);
    return hit;
}
