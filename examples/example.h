/*
 * example.h - what the C examples share: the toy model they refit, the
 * topology argument, the rank.  Only the public header is used: this is
 * what an application writes.
 *
 * The model: three tensors in one host buffer, in canonical order, with
 * weights that are a pure function of the version (so a receiver can check
 * what it got without the sender).  Version 0 is pseudo-random; version v
 * changes about 1 element in 64 of version v - 1, like an optimizer step
 * under a small learning rate.  examples/sender.py builds the same bytes.
 */
#ifndef EXAMPLE_H
#define EXAMPLE_H

#include <deltacast.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOY_TENSORS 3

/* name, safetensors dtype, elements, bytes per element */
static const struct {
    const char *name, *dtype;
    uint64_t nelems;
    unsigned width;
} toy_layout[TOY_TENSORS] = {
    {"embed.weight", "BF16", 256 * 1024, 2},
    {"layer0.weight", "F32", 128 * 1024, 4},
    {"head.bias", "F32", 1000, 4},
};

typedef struct toy_model {
    dc_refit_tensor_t tensors[TOY_TENSORS];   /* the model, canonical order */
    dc_refit_segment_t segments[TOY_TENSORS]; /* where each tensor lives */
    unsigned char *buf;                       /* every tensor, back to back */
    size_t bytes;
} toy_model_t;

static inline uint64_t toy_mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

/* The buffer and the tables; the weights are version 0.  0 or -1. */
static inline int toy_model_init(toy_model_t *m)
{
    memset(m, 0, sizeof(*m));
    for (int t = 0; t < TOY_TENSORS; t++)
        m->bytes += toy_layout[t].nelems * toy_layout[t].width;
    m->buf = malloc(m->bytes);
    if (!m->buf)
        return -1;
    size_t off = 0;
    for (int t = 0; t < TOY_TENSORS; t++) {
        uint64_t len = toy_layout[t].nelems * toy_layout[t].width;
        m->tensors[t] =
            (dc_refit_tensor_t){toy_layout[t].name, toy_layout[t].dtype, toy_layout[t].nelems};
        m->segments[t] = (dc_refit_segment_t){toy_layout[t].name, 0, len, m->buf + off};
        off += len;
    }
    for (size_t i = 0; i < m->bytes; i++)
        m->buf[i] = (unsigned char)toy_mix(i);
    return 0;
}

/* Version v - 1 -> version v, in place: the "optimizer step". */
static inline void toy_model_step(toy_model_t *m, uint64_t v)
{
    for (int t = 0; t < TOY_TENSORS; t++) {
        unsigned w = toy_layout[t].width;
        unsigned char *p = m->segments[t].ptr;
        for (uint64_t i = 0; i < toy_layout[t].nelems; i++) {
            uint64_t h = toy_mix(v << 40 ^ (uint64_t)t << 32 ^ i);
            if (h % 64 == 0)
                p[i * w] ^= (unsigned char)(1 + (h >> 8) % 255); /* low byte moves */
        }
    }
}

/* The weights of version v, from version 0. */
static inline void toy_model_at(toy_model_t *m, uint64_t v)
{
    for (size_t i = 0; i < m->bytes; i++)
        m->buf[i] = (unsigned char)toy_mix(i);
    for (uint64_t k = 1; k <= v; k++)
        toy_model_step(m, k);
}

/* Write the weights to path (what the loopback test compares).  0 or -1. */
static inline int toy_model_save(const toy_model_t *m, const char *path)
{
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        return -1;
    }
    int ok = fwrite(m->buf, 1, m->bytes, f) == m->bytes;
    if (fclose(f) != 0 || !ok) {
        fprintf(stderr, "%s: write failed\n", path);
        return -1;
    }
    return 0;
}

static inline void toy_model_free(toy_model_t *m)
{
    free(m->buf);
    m->buf = NULL;
}

/* TOPOLOGY argument: "local:N:PORT" (the trainer and N receivers on
 * 127.0.0.1, ports PORT..PORT+N: dc_topo_synthetic_local) or a topology
 * file (YAML).  0 or -1 (said on stderr). */
static inline int example_topology(const char *arg, dc_topo_t **topo)
{
    unsigned n = 0, port = 0;
    char end;
    dc_status_t st;
    if (strncmp(arg, "local:", 6) == 0) {
        if (sscanf(arg + 6, "%u:%u%c", &n, &port, &end) != 2 || n == 0 || port == 0 ||
            port + n > 65535) {
            fprintf(stderr,
                    "topology '%s': want local:N:PORT (N >= 1 receivers, ports "
                    "PORT..PORT+N below 65536)\n",
                    arg);
            return -1;
        }
        st = dc_topo_synthetic_local(1, n, (uint16_t)port, topo);
    } else {
        st = dc_topo_load(arg, topo);
    }
    if (st != DC_OK) {
        fprintf(stderr, "topology %s: %s\n", arg, dc_last_error());
        return -1;
    }
    return 0;
}

/* A RANK argument: a number, or "auto" for the launcher's (mpirun, srun:
 * dc_launch_from_env).  0 or -1 (said on stderr). */
static inline int example_rank(const char *arg, uint32_t *rank)
{
    if (strcmp(arg, "auto") == 0) {
        dc_launch_info_t li = {.size = sizeof(li)};
        if (dc_launch_from_env(&li) != DC_OK || li.rank < 0) {
            fprintf(stderr, "rank auto: no rank from the launcher (%s)\n",
                    li.rank < 0 ? "no OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK or SLURM_PROCID"
                                : dc_last_error());
            return -1;
        }
        *rank = (uint32_t)li.rank;
        return 0;
    }
    char *end;
    unsigned long r = strtoul(arg, &end, 10);
    if (end == arg || *end || r > UINT32_MAX) {
        fprintf(stderr, "rank '%s': want a number or auto\n", arg);
        return -1;
    }
    *rank = (uint32_t)r;
    return 0;
}

/* path with each %r replaced by rank, into out (cap bytes).  0 or -1. */
static inline int example_path(const char *path, uint32_t rank, char *out, size_t cap)
{
    size_t k = 0;
    for (const char *p = path; *p; p++) {
        int n = p[0] == '%' && p[1] == 'r' ? snprintf(out + k, cap - k, "%u", (unsigned)rank)
                                           : snprintf(out + k, cap - k, "%c", *p);
        if (n < 0 || (size_t)n >= cap - k) {
            fprintf(stderr, "path %s: too long\n", path);
            return -1;
        }
        k += (size_t)n;
        p += p[0] == '%' && p[1] == 'r';
    }
    out[k] = 0;
    return 0;
}

#endif /* EXAMPLE_H */
