/*
 * kern_cuda_none.c - kern_cuda.h when the build has no CUDA (no nvcc):
 * nothing is available and every call says so with DC_ERR_UNSUPPORTED.
 */
#include "kernels/kern_cuda.h"

static dc_status_t no_cuda(void)
{
    return dc_error(DC_ERR_UNSUPPORTED, "CUDA kernels are not built in (nvcc was not found "
                    "when deltacast was configured)");
}

int dc_kern_cuda_available(void) { return 0; }
const char *dc_kern_cuda_why(void)
{
    return "this build has no CUDA kernels (nvcc was not found when it was configured)";
}
dc_status_t dc_kern_cuda_props(dc_kern_cuda_props_t *out) { return no_cuda(); }
dc_status_t dc_kern_cuda_malloc(void **dptr, size_t bytes) { return no_cuda(); }
void dc_kern_cuda_free(void *dptr) {}
dc_status_t dc_kern_cuda_h2d(void *dst, const void *src, size_t bytes) { return no_cuda(); }
dc_status_t dc_kern_cuda_d2h(void *dst, const void *src, size_t bytes) { return no_cuda(); }
dc_status_t dc_kern_cuda_memset(void *dst, int byte, size_t bytes) { return no_cuda(); }
dc_status_t dc_kern_cuda_sync(void *stream) { return no_cuda(); }

dc_status_t dc_kern_cuda_count_changed(const void *a, const void *b, size_t n, unsigned w,
                                       size_t *count, void *stream)
{
    return no_cuda();
}

dc_status_t dc_kern_cuda_diff(const void *a, const void *b, size_t n, unsigned w,
                              uint32_t *pos, void *xorw, size_t cap, size_t *count,
                              void *stream)
{
    return no_cuda();
}

dc_status_t dc_kern_cuda_gather(const void *b, unsigned w, const uint32_t *pos, size_t count,
                                void *vals, void *stream)
{
    return no_cuda();
}

dc_status_t dc_kern_cuda_xor_scatter(void *dst, size_t n, unsigned w, const uint32_t *pos,
                                     const void *xorw, size_t count, void *stream)
{
    return no_cuda();
}

dc_status_t dc_kern_cuda_put_scatter(void *dst, size_t n, unsigned w, const uint32_t *pos,
                                     const void *vals, size_t count, void *stream)
{
    return no_cuda();
}

dc_status_t dc_kern_cuda_xor_dense(void *dst, const void *src, size_t bytes, void *stream)
{
    return no_cuda();
}

dc_status_t dc_kern_cuda_digest128(const void *buf, size_t len, dc_digest_t *out,
                                   void *stream)
{
    return no_cuda();
}

dc_status_t dc_kern_cuda_crc32c(const void *buf, size_t len, uint32_t crc, uint32_t *out,
                                void *stream)
{
    return no_cuda();
}
