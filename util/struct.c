/* struct.c - the one rule for public structs that grow (their `size` field).
 *
 * A public struct that may grow begins with `size_t size`, set by the caller
 * to sizeof(the struct it was built with).  Every entry point applies the
 * same rule (include/deltacast.h, "Conventions"):
 *
 *   size < first version's size    refused (DC_ERR_INVALID: size not set)
 *   size < this library's sizeof   accepted: an older caller; the fields
 *                                  it lacks read as 0 (their default)
 *   size > this library's sizeof   a newer caller: accepted when the bytes
 *                                  beyond ours are all zero (fields left at
 *                                  their default), else DC_ERR_UNSUPPORTED
 */
#include "dc_util.h"

/* meson.build's project version and the header's DC_VERSION_* agree */
_Static_assert(DC_PROJECT_VERSION_NUMBER == DC_VERSION_NUMBER,
               "meson.build version and include/deltacast.h DC_VERSION_* differ");

/* Caller's bytes [cur, size) are all zero (a newer caller's fields unset). */
static int dc_struct_tail_zero(const void *p, size_t cur, size_t size)
{
    const unsigned char *b = p;
    for (size_t i = cur; i < size; i++)
        if (b[i])
            return 0;
    return 1;
}

dc_status_t dc_struct_check(const void *p, size_t min, size_t cur, const char *what)
{
    if (!p)
        return dc_error(DC_ERR_INVALID, "%s is NULL", what);
    size_t size;
    memcpy(&size, p, sizeof(size));
    if (size < min)
        return dc_error(DC_ERR_INVALID, "%s: size %zu is smaller than any version of the "
                        "struct (%zu); set size = sizeof", what, size, min);
    if (size > cur && !dc_struct_tail_zero(p, cur, size))
        return dc_error(DC_ERR_UNSUPPORTED, "%s: size %zu is larger than this library's "
                        "(%zu, deltacast %s) and fields it does not know are set: built "
                        "against a newer deltacast.h", what, size, cur, dc_version_string());
    return DC_OK;
}

dc_status_t dc_struct_in(void *local, size_t cur, const void *in, size_t min, const char *what)
{
    dc_status_t st = dc_struct_check(in, min, cur, what);
    if (st != DC_OK)
        return st;
    size_t size;
    memcpy(&size, in, sizeof(size));
    memset(local, 0, cur);
    memcpy(local, in, DC_MIN(size, cur));
    memcpy(local, &cur, sizeof(cur));
    return DC_OK;
}

void dc_struct_out(void *out, const void *local, size_t cur)
{
    size_t size;
    memcpy(&size, out, sizeof(size));
    size_t n = DC_MIN(size, cur);
    if (n > sizeof(size))
        memcpy((char *)out + sizeof(size), (const char *)local + sizeof(size),
               n - sizeof(size));
    memcpy(out, &n, sizeof(n));
}
