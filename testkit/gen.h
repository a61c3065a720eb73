/*
 * gen.h - synthetic checkpoint pairs for tests and benchmarks
 * (`deltacast gen`).
 *
 * A transformer-like tensor set (embedding, per layer q/k/v/o and MLP
 * gate/up/down weights and two norms, a final norm, lm_head, and an I64
 * position-id buffer) sized to about `params` weights, written as
 * base.safetensors and next.safetensors side by side, streaming: each
 * tensor is produced in bounded blocks by a pool of threads, so memory use
 * is (threads + 2) x 2 x block_bytes whatever the model size.
 *
 * Output is a pure function of (params, change_rate, model, seed, dtype,
 * block_bytes): every block has its own counter-based random stream
 * (splitmix64 keyed by seed, tensor and block), so the thread count does not
 * change a byte.
 *
 * Change models (issues 3 and 18):
 *   optimizer  FP32 master w (weights N(0, 0.02), o_proj/down_proj
 *              N(0, 0.02 / sqrt(2 layers)), norms 1 + N(0, 0.05)); one
 *              Adam-like step w' = w - lr * r, r = s_t * e * N(0,1) with a
 *              per-tensor scale s_t = exp(0.25 N) and a per-element one
 *              e = exp(0.3 N) (fitted to real AdamW steps written by
 *              perf/train-steps.py; perf/README.md compares them); base =
 *              round(w), next = round(w') to the output dtype,
 *              round-to-nearest-even.  lr is solved by bisection on a sample
 *              so that ~change_rate of the values change.  (For F32 output
 *              the master is double.)
 *   inject     base with weights N(0, 0.02) (all of them) and norms as
 *              above; each element is selected with probability change_rate
 *              and multiplied by (1 + 0.01 N(0,1)), re-rounded; some round
 *              back, so the real rate is below the request.
 * The I64 buffer never changes and does not count as a parameter.
 */
#ifndef DC_TESTKIT_GEN_H
#define DC_TESTKIT_GEN_H

#include "kernels/safetensors.h"

typedef enum dc_gen_model {
    DC_GEN_OPTIMIZER = 0,
    DC_GEN_INJECT = 1,
} dc_gen_model_t;

/* Tensor layouts.  LLAMA: the transformer above.  MOE: 48 layers (24 with
 * experts == 0; fewer when the parameters are too few) of two norms, q/k/v/o
 * with q/k/v biases, and either `experts` experts of gate/up/down (d/2 x d,
 * d x d/2) plus a router, or (experts == 0) a dense MLP (8/3 d) with biases
 * on gate/up/down; hidden size d (a multiple of 8) solved from `params`, the
 * vocabulary absorbing the remainder.  Tens of thousands of small tensors,
 * or a small model of many norms and biases: for per-frame overhead. */
typedef enum dc_gen_layout {
    DC_GEN_LAYOUT_LLAMA = 0,
    DC_GEN_LAYOUT_MOE = 1,
} dc_gen_layout_t;

typedef struct dc_gen_opts {
    uint64_t params;          /* target weight count (>= DC_GEN_MIN_PARAMS) */
    double change_rate;       /* optimizer: [0, 0.9]; inject: [0, 1] */
    dc_gen_model_t model;
    uint64_t seed;
    dc_dtype_t dtype;         /* DC_DTYPE_BF16, DC_DTYPE_F16 or DC_DTYPE_F32 */
    int threads;              /* 0: all online CPUs */
    size_t block_bytes;       /* 0: 16 MiB per file per block */
    /* Optional progress report, called from the calling thread after each
     * block is written (bytes of one file done / total). */
    void (*progress)(void *ctx, uint64_t done, uint64_t total);
    void *progress_ctx;
    dc_gen_layout_t layout; /* 0: LLAMA (the default layout, unchanged) */
    unsigned experts;       /* MOE: experts per layer (0: dense MLP with biases) */
} dc_gen_opts_t;

#define DC_GEN_MIN_PARAMS 2000u

typedef struct dc_gen_result {
    uint64_t params;        /* weights actually generated (floating tensors) */
    uint64_t buffer_elems;  /* I64 buffer elements (unchanged, not params) */
    size_t tensors;
    int layers;
    uint64_t hidden, ffn, vocab;
    uint64_t file_bytes;    /* size of each of the two files */
    uint64_t selected;      /* inject: elements multiplied; optimizer: 0 */
    uint64_t changed;       /* weights whose bytes differ between the files */
    double real_rate;       /* changed / params */
    double lr;              /* optimizer step size (0 for inject) */
    double calib_rate;      /* optimizer: rate predicted on the sample */
    double seconds;
    int threads;
} dc_gen_result_t;

/**
 * Generate the pair into `base_path` and `next_path` (each written through a
 * temporary file and renamed on success).  *res (may be NULL) is filled on
 * success.  DC_ERR_INVALID for bad options, DC_ERR_IO when a file cannot be
 * written (dc_last_error() names it).
 */
dc_status_t dc_gen_write(const dc_gen_opts_t *opts, const char *base_path,
                         const char *next_path, dc_gen_result_t *res);

/** "llama" / "moe"; parse returns DC_ERR_INVALID for anything else. */
const char *dc_gen_layout_name(dc_gen_layout_t l);
dc_status_t dc_gen_layout_parse(const char *s, dc_gen_layout_t *out);

/** "optimizer" / "inject"; parse returns DC_ERR_INVALID for anything else. */
const char *dc_gen_model_name(dc_gen_model_t m);
dc_status_t dc_gen_model_parse(const char *s, dc_gen_model_t *out);

#endif /* DC_TESTKIT_GEN_H */
