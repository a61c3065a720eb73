/*
 * gen.c - synthetic checkpoint pairs, streamed (see gen.h).
 *
 * Pipeline (T workers, S = T + 2 slots of 2 x block_bytes):
 *
 *   blocks 0 1 2 3 ...   (tensor, first element, count) in file order
 *   worker k claims the next block b, waits until slot b % S is free
 *   (block b - S written), fills base/next for it, marks the slot done
 *   calling thread writes block 0, 1, 2 ... in order to both files
 */
#include "testkit/gen.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- random numbers ------------------------------------------------------ */

static inline uint64_t dc_gen_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* splitmix64: counter-based, one stream per (seed, tensor, block). */
typedef struct {
    uint64_t s;
} dc_gen_rng_t;

static inline uint64_t dc_gen_next(dc_gen_rng_t *r)
{
    return dc_gen_mix(r->s += 0x9e3779b97f4a7c15ULL);
}

static dc_gen_rng_t dc_gen_stream(uint64_t seed, uint64_t a, uint64_t b)
{
    dc_gen_rng_t r;
    r.s = dc_gen_mix(dc_gen_mix(dc_gen_mix(seed ^ 0x6a09e667f3bcc909ULL) + a) + b);
    return r;
}

/* Two independent N(0,1) (Marsaglia's polar method, float: no trig; 1.27
 * random words per pair on average). */
static inline void dc_gen_normal2(dc_gen_rng_t *rng, float *z0, float *z1)
{
    float u, v, s;
    do {
        uint64_t r = dc_gen_next(rng);
        u = (float)(int32_t)(uint32_t)(r >> 32) * 0x1p-31f; /* [-1, 1) */
        v = (float)(int32_t)(uint32_t)r * 0x1p-31f;
        s = u * u + v * v;
    } while (s >= 1.0f || s == 0.0f);
    float f = sqrtf(-2.0f * logf(s) / s);
    *z0 = u * f;
    *z1 = v * f;
}

/* --- rounding to the output dtype (round to nearest even) ---------------- */

static inline uint16_t dc_gen_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40);
    x += 0x7fffu + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

static inline float dc_gen_bf16_to_f32(uint16_t h)
{
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static inline uint16_t dc_gen_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf / NaN (quiet, top payload bits kept) */
        return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 | ((ax >> 13) & 0x3ff) : 0));
    if (ax >= 0x477ff000u) /* >= 65520 rounds to infinity */
        return (uint16_t)(sign | 0x7c00);
    if (ax >= 0x38800000u) { /* normal half */
        uint32_t r = ax - 0x38000000u;
        r += 0xfffu + ((r >> 13) & 1);
        return (uint16_t)(sign | (r >> 13));
    }
    /* subnormal half: units of 2^-24, scaling is exact, lrintf rounds to even */
    float a;
    memcpy(&a, &ax, 4);
    return (uint16_t)(sign | (uint16_t)lrintf(a * 0x1p24f));
}

static inline float dc_gen_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
    float f;
    if (e == 0) {
        f = (float)m * 0x1p-24f;
        uint32_t x;
        memcpy(&x, &f, 4);
        x |= sign;
        memcpy(&f, &x, 4);
        return f;
    }
    uint32_t x = sign | (e == 31 ? 0x7f800000u | (m << 13) : ((e + 112) << 23) | (m << 13));
    memcpy(&f, &x, 4);
    return f;
}

/* --- the tensor plan ----------------------------------------------------- */

enum { DC_GEN_WEIGHT, DC_GEN_NORM, DC_GEN_POS };

typedef struct dc_gen_tensor {
    char name[80];
    dc_dtype_t dtype;
    int ndim;
    uint64_t shape[2];
    uint64_t nelems;
    int kind;
    /* the laws (dc_gen_laws): master weights mean + sd N(0,1) (inject:
     * sd_inject, the first model's law, so that its pairs are unchanged);
     * the optimizer step's per-tensor scale */
    float mean, sd, sd_inject, rscale;
} dc_gen_tensor_t;

typedef struct dc_gen_plan {
    dc_gen_tensor_t *t;
    size_t n, cap;
    int layers;
    uint64_t d, ffn, vocab, npos;
    uint64_t params, norm_params;
} dc_gen_plan_t;

static dc_status_t dc_gen_add(dc_gen_plan_t *p, const char *name, dc_dtype_t dt, int kind,
                              uint64_t r, uint64_t c)
{
    /* a name cut short could collide with another tensor's */
    size_t nl = strlen(name);
    if (nl >= sizeof(p->t[0].name))
        return dc_error(DC_ERR_INTERNAL, "gen: tensor name '%s' is longer than %zu bytes", name,
                        sizeof(p->t[0].name) - 1);
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 64;
        dc_gen_tensor_t *t = realloc(p->t, cap * sizeof(*t));
        if (!t)
            return dc_error(DC_ERR_NOMEM, "gen: out of memory");
        p->t = t;
        p->cap = cap;
    }
    dc_gen_tensor_t *t = &p->t[p->n++];
    memset(t, 0, sizeof(*t));
    memcpy(t->name, name, nl + 1);
    t->dtype = dt;
    t->kind = kind;
    t->ndim = c ? 2 : 1;
    t->shape[0] = r;
    t->shape[1] = c;
    t->nelems = c ? r * c : r;
    if (kind != DC_GEN_POS)
        p->params += t->nelems;
    if (kind == DC_GEN_NORM)
        p->norm_params += t->nelems;
    return DC_OK;
}

/* Layout like the reference writer: larger dtypes first, then by name. */
static int dc_gen_cmp(const void *a, const void *b)
{
    const dc_gen_tensor_t *x = a, *y = b;
    size_t sx = dc_dtype_size(x->dtype), sy = dc_dtype_size(y->dtype);
    if (sx != sy)
        return sx > sy ? -1 : 1;
    return strcmp(x->name, y->name);
}

static uint64_t dc_gen_round_up(uint64_t v, uint64_t m) { return (v + m - 1) / m * m; }

/*
 * Shape rule (LLaMA-like): ffn = 8/3 d, layers ~ d / 128, so ~12 d^2 per
 * layer and N ~ 0.094 d^3; d is a multiple of 64 (8, 16, 32 for tiny N);
 * the vocabulary absorbs the remainder so the total lands within 2d of N.
 */
static dc_status_t dc_gen_make_plan(uint64_t N, dc_dtype_t dt, dc_gen_plan_t *p)
{
    const uint64_t vmin = 16;
    double d0 = cbrt((double)N / 0.09375);
    uint64_t d;
    if (d0 >= 64)
        d = (uint64_t)llround(d0 / 64) * 64;
    else
        d = d0 >= 24 ? 32 : d0 >= 12 ? 16 : 8;
    uint64_t ffn, per_layer, lmax;
    for (;;) {
        ffn = dc_gen_round_up(d * 8 / 3 + 1, d >= 64 ? 64 : 8);
        per_layer = 4 * d * d + 3 * d * ffn + 2 * d;
        uint64_t fixed = d + 2 * d * vmin;
        lmax = N > fixed ? (N - fixed) / per_layer : 0;
        if (lmax >= 1)
            break;
        if (d > 64)
            d -= 64;
        else if (d > 8)
            d /= 2;
        else
            return dc_error(DC_ERR_INVALID, "gen: %" PRIu64 " parameters are too few (minimum %u)",
                            N, DC_GEN_MIN_PARAMS);
    }
    uint64_t L = (uint64_t)llround((double)d / 128);
    L = DC_MAX(1, DC_MIN(L, lmax));
    uint64_t V = (N - d - L * per_layer) / (2 * d);
    p->layers = (int)L;
    p->d = d;
    p->ffn = ffn;
    p->vocab = V;
    p->npos = DC_MIN(4096, DC_MAX(16, 4 * d));

    dc_status_t st = DC_OK;
    char nm[80];
    st = st ? st : dc_gen_add(p, "model.embed_tokens.weight", dt, DC_GEN_WEIGHT, V, d);
    for (uint64_t l = 0; l < L && !st; l++) {
        static const struct {
            const char *suffix;
            int kind, shape; /* 0: d x d, 1: ffn x d, 2: d x ffn, 3: d */
        } lt[] = {
            {"input_layernorm.weight", DC_GEN_NORM, 3},
            {"self_attn.q_proj.weight", DC_GEN_WEIGHT, 0},
            {"self_attn.k_proj.weight", DC_GEN_WEIGHT, 0},
            {"self_attn.v_proj.weight", DC_GEN_WEIGHT, 0},
            {"self_attn.o_proj.weight", DC_GEN_WEIGHT, 0},
            {"post_attention_layernorm.weight", DC_GEN_NORM, 3},
            {"mlp.gate_proj.weight", DC_GEN_WEIGHT, 1},
            {"mlp.up_proj.weight", DC_GEN_WEIGHT, 1},
            {"mlp.down_proj.weight", DC_GEN_WEIGHT, 2},
        };
        for (size_t k = 0; k < DC_ARRAY_SIZE(lt) && !st; k++) {
            snprintf(nm, sizeof(nm), "model.layers.%" PRIu64 ".%s", l, lt[k].suffix);
            uint64_t r = lt[k].shape == 1 ? ffn : d;
            uint64_t c = lt[k].shape == 0 ? d : lt[k].shape == 1 ? d : lt[k].shape == 2 ? ffn : 0;
            st = dc_gen_add(p, nm, dt, lt[k].kind, r, c);
        }
    }
    st = st ? st : dc_gen_add(p, "model.norm.weight", dt, DC_GEN_NORM, d, 0);
    st = st ? st : dc_gen_add(p, "lm_head.weight", dt, DC_GEN_WEIGHT, V, d);
    st = st ? st : dc_gen_add(p, "model.position_ids", DC_DTYPE_I64, DC_GEN_POS, 1, p->npos);
    if (st != DC_OK)
        return st;
    qsort(p->t, p->n, sizeof(*p->t), dc_gen_cmp);
    return DC_OK;
}

/*
 * MoE layout (gen.h): L layers of norms, attention with q/k/v biases and E
 * experts (E == 0: a dense MLP with biases).  d is the largest multiple of 8
 * whose layers fit N with a vocabulary of at least 16; L shrinks until d >= 8.
 */
static uint64_t dc_gen_moe_ffn(uint64_t d, unsigned E)
{
    return E ? dc_gen_round_up(d / 2, 8) : dc_gen_round_up(d * 8 / 3 + 1, 8);
}

static uint64_t dc_gen_moe_layer(uint64_t d, unsigned E)
{
    uint64_t f = dc_gen_moe_ffn(d, E);
    uint64_t attn = 4 * d * d + 3 * d + 2 * d;
    return attn + (E ? (uint64_t)E * d + 3ull * E * d * f : 3 * d * f + 2 * f + d);
}

static dc_status_t dc_gen_make_plan_moe(uint64_t N, unsigned E, dc_dtype_t dt, dc_gen_plan_t *p)
{
    const uint64_t vmin = 16;
    uint64_t L = E ? 48 : 24, d = 0;
    for (; L >= 1; L--) {
        uint64_t lo = 8;
        if (L * dc_gen_moe_layer(lo, E) + lo + 2 * lo * vmin > N)
            continue;
        while (L * dc_gen_moe_layer(lo + 8, E) + (lo + 8) * (1 + 2 * vmin) <= N)
            lo += 8;
        d = lo;
        break;
    }
    if (d == 0)
        return dc_error(DC_ERR_INVALID,
                        "gen: %" PRIu64 " parameters are too few for the moe layout with %u "
                        "experts",
                        N, E);
    uint64_t f = dc_gen_moe_ffn(d, E);
    uint64_t V = (N - d - L * dc_gen_moe_layer(d, E)) / (2 * d);
    p->layers = (int)L;
    p->d = d;
    p->ffn = f;
    p->vocab = V;
    p->npos = DC_MIN(4096, DC_MAX(16, 4 * d));

    dc_status_t st = DC_OK;
    char nm[96];
    st = st ? st : dc_gen_add(p, "model.embed_tokens.weight", dt, DC_GEN_WEIGHT, V, d);
    for (uint64_t l = 0; l < L && !st; l++) {
        static const struct {
            const char *suffix;
            int kind, shape; /* 0: d x d, 3: d */
        } lt[] = {
            {"input_layernorm.weight", DC_GEN_NORM, 3},
            {"self_attn.q_proj.weight", DC_GEN_WEIGHT, 0},
            {"self_attn.q_proj.bias", DC_GEN_WEIGHT, 3},
            {"self_attn.k_proj.weight", DC_GEN_WEIGHT, 0},
            {"self_attn.k_proj.bias", DC_GEN_WEIGHT, 3},
            {"self_attn.v_proj.weight", DC_GEN_WEIGHT, 0},
            {"self_attn.v_proj.bias", DC_GEN_WEIGHT, 3},
            {"self_attn.o_proj.weight", DC_GEN_WEIGHT, 0},
            {"post_attention_layernorm.weight", DC_GEN_NORM, 3},
        };
        for (size_t k = 0; k < DC_ARRAY_SIZE(lt) && !st; k++) {
            snprintf(nm, sizeof(nm), "model.layers.%" PRIu64 ".%s", l, lt[k].suffix);
            st = dc_gen_add(p, nm, dt, lt[k].kind, d, lt[k].shape == 0 ? d : 0);
        }
        if (E == 0) {
            static const char *const mlp[] = {"gate_proj", "up_proj", "down_proj"};
            for (size_t k = 0; k < 3 && !st; k++) {
                snprintf(nm, sizeof(nm), "model.layers.%" PRIu64 ".mlp.%s.weight", l, mlp[k]);
                st = dc_gen_add(p, nm, dt, DC_GEN_WEIGHT, k < 2 ? f : d, k < 2 ? d : f);
                snprintf(nm, sizeof(nm), "model.layers.%" PRIu64 ".mlp.%s.bias", l, mlp[k]);
                st = st ? st : dc_gen_add(p, nm, dt, DC_GEN_WEIGHT, k < 2 ? f : d, 0);
            }
            continue;
        }
        snprintf(nm, sizeof(nm), "model.layers.%" PRIu64 ".mlp.gate.weight", l);
        st = st ? st : dc_gen_add(p, nm, dt, DC_GEN_WEIGHT, E, d);
        for (unsigned e = 0; e < E && !st; e++) {
            static const char *const ex[] = {"gate_proj", "up_proj", "down_proj"};
            for (size_t k = 0; k < 3 && !st; k++) {
                snprintf(nm, sizeof(nm), "model.layers.%" PRIu64 ".mlp.experts.%u.%s.weight", l, e,
                         ex[k]);
                st = dc_gen_add(p, nm, dt, DC_GEN_WEIGHT, k < 2 ? f : d, k < 2 ? d : f);
            }
        }
    }
    st = st ? st : dc_gen_add(p, "model.norm.weight", dt, DC_GEN_NORM, d, 0);
    st = st ? st : dc_gen_add(p, "lm_head.weight", dt, DC_GEN_WEIGHT, V, d);
    st = st ? st : dc_gen_add(p, "model.position_ids", DC_DTYPE_I64, DC_GEN_POS, 1, p->npos);
    if (st != DC_OK)
        return st;
    qsort(p->t, p->n, sizeof(*p->t), dc_gen_cmp);
    return DC_OK;
}

/*
 * The optimizer model's laws, fitted to real AdamW steps (perf/train-steps.py:
 * a byte-level GPT trained on real text; perf/README.md compares the two).
 *
 * Weights: N(0, 0.02); the projections back into the residual stream
 * (o_proj, down_proj) N(0, 0.02 / sqrt(2 L)) as in GPT-2 / Megatron
 * initialization (the real model: 0.007-0.010 beside 0.02-0.03), which puts
 * a realistic share of the values at small magnitudes.  Norms 1 + N(0, 0.05).
 *
 * Step: w' = w - lr * r with r = s_t * e * z, z ~ N(0, 1): Adam's
 * m / (sqrt(v) + eps) on noisy gradients is close to normal, not sign-like,
 * and its scale varies from tensor to tensor (s_t = exp(0.25 N(0,1)), one per
 * tensor) and from element to element (e = exp(0.3 N(0,1)), drawn from the
 * popcount of a random word: binomial(64, 1/2), so one extra word and a table
 * lookup per element).  Together |r| / E|r| has quantiles 0.14 (10%), 0.35,
 * 0.76 (median), 1.38, 2.17 (90%), 4.2 (99%); the real steps' 0.14, 0.34,
 * 0.75, 1.39, 2.18, 4.14.  The spread is what makes the change rate saturate
 * gradually for small-magnitude values (a sign-like step changes every
 * value whose grid spacing is below lr and few above).
 */
static void dc_gen_laws(dc_gen_plan_t *p, uint64_t seed)
{
    const float sd_out = 0.02f / sqrtf(2.0f * (float)DC_MAX(p->layers, 1));
    for (size_t i = 0; i < p->n; i++) {
        dc_gen_tensor_t *t = &p->t[i];
        size_t nl = strlen(t->name);
        bool out = (nl >= 13 && strcmp(t->name + nl - 13, "o_proj.weight") == 0) ||
                   (nl >= 16 && strcmp(t->name + nl - 16, "down_proj.weight") == 0);
        t->mean = t->kind == DC_GEN_NORM ? 1.0f : 0.0f;
        t->sd_inject = t->kind == DC_GEN_NORM ? 0.05f : 0.02f;
        t->sd = t->kind == DC_GEN_NORM ? 0.05f : out ? sd_out : 0.02f;
        dc_gen_rng_t rng = dc_gen_stream(seed, i, UINT64_MAX - 1);
        float z0, z1;
        dc_gen_normal2(&rng, &z0, &z1);
        t->rscale = expf(0.25f * z0);
    }
}

/* --- element generation --------------------------------------------------- */

typedef struct dc_gen_ctx {
    const dc_gen_opts_t *o;
    dc_gen_plan_t plan;
    float lr;        /* optimizer step (BF16/F16 master is float) */
    double lr_d;     /* optimizer step for F32 output (double master) */
    uint64_t sel_thresh; /* inject: select when r < thresh */
    bool sel_all;
    float spread[65]; /* per-element step scale by popcount (dc_gen_laws) */
} dc_gen_ctx_t;

static void dc_gen_spread_init(dc_gen_ctx_t *c)
{
    for (int k = 0; k <= 64; k++)
        c->spread[k] = expf(0.3f * (float)(k - 32) / 4.0f); /* binomial(64,1/2): sd 4 */
}

/* The step's r for one element (dc_gen_laws), z ~ N(0,1). */
static inline float dc_gen_step(const dc_gen_ctx_t *c, const dc_gen_tensor_t *t, dc_gen_rng_t *rng,
                                float z)
{
    return t->rscale * c->spread[__builtin_popcountll(dc_gen_next(rng))] * z;
}

/* Fill `count` elements of tensor `ti` starting at `first`. */
static uint64_t dc_gen_fill(const dc_gen_ctx_t *c, size_t ti, uint64_t blk, uint64_t first,
                            size_t count, uint8_t *base, uint8_t *next, uint64_t *selected)
{
    const dc_gen_tensor_t *t = &c->plan.t[ti];
    if (t->kind == DC_GEN_POS) {
        for (size_t i = 0; i < count; i++) {
            uint64_t v = (first + i) % c->plan.npos;
            dc_store_le64(base + 8 * i, v);
        }
        memcpy(next, base, count * 8);
        return 0;
    }
    dc_gen_rng_t rng = dc_gen_stream(c->o->seed, ti, blk);
    const bool inject = c->o->model == DC_GEN_INJECT;
    const float mean = t->mean, sd = inject ? t->sd_inject : t->sd;
    uint64_t changed = 0, sel = 0;
    float z0, z1;

    switch (c->o->dtype) {
    case DC_DTYPE_BF16:
    case DC_DTYPE_F16: {
        const bool bf = c->o->dtype == DC_DTYPE_BF16;
        uint16_t *b16 = (uint16_t *)(void *)base, *n16 = (uint16_t *)(void *)next;
        for (size_t i = 0; i < count; i++) {
            dc_gen_normal2(&rng, &z0, &z1);
            float w = mean + sd * z0;
            uint16_t a = bf ? dc_gen_bf16(w) : dc_gen_f16(w), b;
            if (!inject) {
                float nw = w - c->lr * dc_gen_step(c, t, &rng, z1);
                b = bf ? dc_gen_bf16(nw) : dc_gen_f16(nw);
            } else if (c->sel_all || dc_gen_next(&rng) < c->sel_thresh) {
                float x = bf ? dc_gen_bf16_to_f32(a) : dc_gen_f16_to_f32(a);
                float y = x * (1.0f + 0.01f * z1);
                b = bf ? dc_gen_bf16(y) : dc_gen_f16(y);
                sel++;
            } else {
                b = a;
            }
            b16[i] = a;
            n16[i] = b;
            changed += a != b;
        }
        break;
    }
    case DC_DTYPE_F32: {
        for (size_t i = 0; i < count; i++) {
            dc_gen_normal2(&rng, &z0, &z1);
            /* double master: 16 more random bits below the float normal */
            uint64_t r = dc_gen_next(&rng);
            double w = mean + sd * ((double)z0 + (double)(r & 0xffff) * 0x1p-40);
            float a = (float)w, b;
            if (!inject) {
                b = (float)(w - c->lr_d * (double)dc_gen_step(c, t, &rng, z1));
            } else if (c->sel_all || dc_gen_next(&rng) < c->sel_thresh) {
                b = a * (1.0f + 0.01f * z1);
                sel++;
            } else {
                b = a;
            }
            memcpy(base + 4 * i, &a, 4);
            memcpy(next + 4 * i, &b, 4);
            changed += memcmp(&a, &b, 4) != 0;
        }
        break;
    }
    default:
        break;
    }
    *selected += sel;
    return changed;
}

/*
 * Optimizer calibration: draw a sample of masters and steps (their own
 * stream) spread over the tensors in proportion to their sizes, each with
 * its tensor's laws, then bisect log(lr) so that the fraction of sampled
 * values whose rounding changes matches the request.
 */
#define DC_GEN_CALIB_N (1u << 18)

static double dc_gen_calib_rate(const dc_gen_ctx_t *c, const double *w, const float *s, size_t n,
                                double lr)
{
    uint64_t ch = 0;
    dc_dtype_t dt = c->o->dtype;
    for (size_t i = 0; i < n; i++) {
        if (dt == DC_DTYPE_F32) {
            ch += (float)w[i] != (float)(w[i] - lr * (double)s[i]);
        } else {
            float x = (float)w[i], y = x - (float)lr * s[i];
            if (dt == DC_DTYPE_BF16)
                ch += dc_gen_bf16(x) != dc_gen_bf16(y);
            else
                ch += dc_gen_f16(x) != dc_gen_f16(y);
        }
    }
    return (double)ch / (double)n;
}

static dc_status_t dc_gen_calibrate(dc_gen_ctx_t *c, double *pred)
{
    const size_t n = DC_GEN_CALIB_N;
    double *w = malloc(n * sizeof(double));
    float *s = malloc(n * sizeof(float));
    if (!w || !s) {
        free(w);
        free(s);
        return dc_error(DC_ERR_NOMEM, "gen: out of memory");
    }
    dc_gen_rng_t rng = dc_gen_stream(c->o->seed, UINT64_MAX, 0);
    size_t ti = 0;
    uint64_t cum = 0; /* parameters in tensors before ti */
    for (size_t i = 0; i < n; i++) {
        /* sample i stands for parameter (i + 1/2) params / n */
        uint64_t at = (uint64_t)(((double)i + 0.5) / (double)n * (double)c->plan.params);
        while (ti < c->plan.n &&
               (c->plan.t[ti].kind == DC_GEN_POS || at >= cum + c->plan.t[ti].nelems)) {
            if (c->plan.t[ti].kind != DC_GEN_POS)
                cum += c->plan.t[ti].nelems;
            ti++;
        }
        const dc_gen_tensor_t *t = &c->plan.t[DC_MIN(ti, c->plan.n - 1)];
        float z0, z1;
        dc_gen_normal2(&rng, &z0, &z1);
        if (c->o->dtype == DC_DTYPE_F32) /* double master, 16 more bits (as dc_gen_fill) */
            w[i] = t->mean + t->sd * ((double)z0 + (double)(i & 0xffff) * 0x1p-40);
        else /* float master, float arithmetic */
            w[i] = (double)(t->mean + t->sd * z0);
        s[i] = dc_gen_step(c, t, &rng, z1);
    }
    double lo = -40, hi = 3; /* log2(lr) */
    double want = c->o->change_rate;
    for (int it = 0; it < 44; it++) {
        double mid = 0.5 * (lo + hi);
        if (dc_gen_calib_rate(c, w, s, n, exp2(mid)) < want)
            lo = mid;
        else
            hi = mid;
    }
    double lr = exp2(0.5 * (lo + hi));
    *pred = dc_gen_calib_rate(c, w, s, n, lr);
    c->lr = (float)lr;
    c->lr_d = lr;
    free(w);
    free(s);
    return DC_OK;
}

/* --- the streaming pipeline ---------------------------------------------- */

typedef struct dc_gen_block {
    size_t tensor;
    uint64_t index; /* block number within the tensor */
    uint64_t first;
    size_t count;
} dc_gen_block_t;

typedef struct dc_gen_slot {
    uint8_t *base, *next;
    uint64_t done; /* block id + 1 when filled */
    uint64_t changed, selected;
} dc_gen_slot_t;

typedef struct dc_gen_pool {
    dc_gen_ctx_t *c;
    dc_gen_block_t *blocks;
    uint64_t nblocks;
    dc_gen_slot_t *slots;
    size_t nslots;
    pthread_mutex_t mu;
    pthread_cond_t cv_done, cv_free;
    uint64_t claim, written;
    bool abort;
} dc_gen_pool_t;

static void *dc_gen_worker(void *arg)
{
    dc_gen_pool_t *p = arg;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        uint64_t b = p->claim;
        if (b >= p->nblocks || p->abort) {
            pthread_mutex_unlock(&p->mu);
            return NULL;
        }
        p->claim++;
        while (!p->abort && b >= p->written + p->nslots)
            pthread_cond_wait(&p->cv_free, &p->mu);
        if (p->abort) {
            pthread_mutex_unlock(&p->mu);
            return NULL;
        }
        pthread_mutex_unlock(&p->mu);

        dc_gen_slot_t *s = &p->slots[b % p->nslots];
        const dc_gen_block_t *bl = &p->blocks[b];
        uint64_t sel = 0;
        uint64_t ch = dc_gen_fill(p->c, bl->tensor, bl->index, bl->first, bl->count, s->base,
                                  s->next, &sel);

        pthread_mutex_lock(&p->mu);
        s->changed = ch;
        s->selected = sel;
        s->done = b + 1;
        pthread_cond_broadcast(&p->cv_done);
        pthread_mutex_unlock(&p->mu);
    }
}

const char *dc_gen_layout_name(dc_gen_layout_t l)
{
    return l == DC_GEN_LAYOUT_MOE ? "moe" : "llama";
}

dc_status_t dc_gen_layout_parse(const char *s, dc_gen_layout_t *out)
{
    if (s && strcmp(s, "llama") == 0)
        *out = DC_GEN_LAYOUT_LLAMA;
    else if (s && strcmp(s, "moe") == 0)
        *out = DC_GEN_LAYOUT_MOE;
    else
        return dc_error(DC_ERR_INVALID, "unknown layout '%s' (llama or moe)", s ? s : "");
    return DC_OK;
}

const char *dc_gen_model_name(dc_gen_model_t m)
{
    return m == DC_GEN_INJECT ? "inject" : "optimizer";
}

dc_status_t dc_gen_model_parse(const char *s, dc_gen_model_t *out)
{
    if (s && strcmp(s, "optimizer") == 0)
        *out = DC_GEN_OPTIMIZER;
    else if (s && strcmp(s, "inject") == 0)
        *out = DC_GEN_INJECT;
    else
        return dc_error(DC_ERR_INVALID, "unknown change model '%s' (optimizer or inject)",
                        s ? s : "");
    return DC_OK;
}

dc_status_t dc_gen_write(const dc_gen_opts_t *o, const char *base_path, const char *next_path,
                         dc_gen_result_t *res)
{
    dc_status_t st = DC_OK;
    double t0 = dc_now_s();
    dc_gen_ctx_t c = {.o = o};
    dc_gen_pool_t p = {.c = &c};
    dc_st_desc_t *descs = NULL;
    dc_st_writer_t *wb = NULL, *wn = NULL;
    pthread_t *tids = NULL;
    int nthreads = 0, started = 0;
    double pred = 0;
    uint8_t *hdr = NULL;
    size_t hdr_len = 0;

    if (!o || !base_path || !next_path)
        return dc_error(DC_ERR_INVALID, "gen: bad arguments");
    if (o->params < DC_GEN_MIN_PARAMS)
        return dc_error(DC_ERR_INVALID, "gen: --params %" PRIu64 " is below the minimum %u",
                        o->params, DC_GEN_MIN_PARAMS);
    if (o->dtype != DC_DTYPE_BF16 && o->dtype != DC_DTYPE_F16 && o->dtype != DC_DTYPE_F32)
        return dc_error(DC_ERR_INVALID, "gen: dtype %s not supported (bf16, f16, f32)",
                        dc_dtype_name(o->dtype));
    if (o->model != DC_GEN_OPTIMIZER && o->model != DC_GEN_INJECT)
        return dc_error(DC_ERR_INVALID, "gen: unknown model");
    double rmax = o->model == DC_GEN_OPTIMIZER ? 0.9 : 1.0;
    if (!(o->change_rate >= 0 && o->change_rate <= rmax))
        return dc_error(DC_ERR_INVALID, "gen: change rate %g outside [0, %g]", o->change_rate,
                        rmax);

    if (o->layout != DC_GEN_LAYOUT_LLAMA && o->layout != DC_GEN_LAYOUT_MOE)
        return dc_error(DC_ERR_INVALID, "gen: unknown layout");
    if (o->layout == DC_GEN_LAYOUT_MOE && o->experts > 4096)
        return dc_error(DC_ERR_INVALID, "gen: %u experts (at most 4096)", o->experts);
    st = o->layout == DC_GEN_LAYOUT_MOE
             ? dc_gen_make_plan_moe(o->params, o->experts, o->dtype, &c.plan)
             : dc_gen_make_plan(o->params, o->dtype, &c.plan);
    if (st != DC_OK)
        goto out;
    dc_gen_laws(&c.plan, o->seed);
    dc_gen_spread_init(&c);
    if (o->model == DC_GEN_OPTIMIZER) {
        if (o->change_rate > 0) {
            st = dc_gen_calibrate(&c, &pred);
            if (st != DC_OK)
                goto out;
        }
    } else {
        c.sel_all = o->change_rate >= 1.0;
        c.sel_thresh = c.sel_all ? 0 : (uint64_t)ldexp(o->change_rate, 64);
    }

    /* headers */
    descs = calloc(c.plan.n, sizeof(*descs));
    if (!descs) {
        st = dc_error(DC_ERR_NOMEM, "gen: out of memory");
        goto out;
    }
    for (size_t i = 0; i < c.plan.n; i++) {
        descs[i].name = c.plan.t[i].name;
        descs[i].dtype = c.plan.t[i].dtype;
        descs[i].ndim = c.plan.t[i].ndim;
        descs[i].shape[0] = c.plan.t[i].shape[0];
        descs[i].shape[1] = c.plan.t[i].shape[1];
    }
    char meta[512];
    const char *dtn = o->dtype == DC_DTYPE_BF16 ? "bf16" : o->dtype == DC_DTYPE_F16 ? "f16" : "f32";
    snprintf(meta, sizeof(meta),
             "{\"generator\":\"deltacast gen %s\",\"model\":\"%s\",\"seed\":\"%" PRIu64
             "\",\"change_rate\":\"%.17g\",\"dtype\":\"%s\",\"params\":\"%" PRIu64
             "\",\"lr\":\"%.9g\"}",
             dc_version_string(), dc_gen_model_name(o->model), o->seed, o->change_rate, dtn,
             c.plan.params, o->model == DC_GEN_OPTIMIZER ? c.lr_d : 0.0);
    if (o->layout == DC_GEN_LAYOUT_MOE) /* the default layout's bytes stay as they were */
        snprintf(meta + strlen(meta) - 1, sizeof(meta) - strlen(meta) + 1,
                 ",\"layout\":\"moe\",\"experts\":\"%u\"}", o->experts);
    uint64_t dsize;
    st = dc_st_header_build(descs, c.plan.n, meta, &hdr, &hdr_len, &dsize);
    if (st != DC_OK)
        goto out;
    st = dc_st_writer_create_raw(base_path, hdr, hdr_len, dsize, &wb);
    if (st != DC_OK)
        goto out;
    st = dc_st_writer_create_raw(next_path, hdr, hdr_len, dsize, &wn);
    if (st != DC_OK)
        goto out;

    /* blocks */
    size_t bbytes = o->block_bytes ? o->block_bytes : (16u << 20);
    bbytes = DC_MAX(bbytes, 64);
    uint64_t nb = 0, total_bytes = 0;
    for (size_t i = 0; i < c.plan.n; i++) {
        uint64_t per = bbytes / dc_dtype_size(c.plan.t[i].dtype);
        nb += (c.plan.t[i].nelems + per - 1) / per;
        total_bytes += c.plan.t[i].nelems * dc_dtype_size(c.plan.t[i].dtype);
    }
    p.blocks = calloc(nb ? nb : 1, sizeof(*p.blocks));
    if (!p.blocks) {
        st = dc_error(DC_ERR_NOMEM, "gen: out of memory");
        goto out;
    }
    for (size_t i = 0; i < c.plan.n; i++) {
        uint64_t per = bbytes / dc_dtype_size(c.plan.t[i].dtype);
        for (uint64_t f = 0, k = 0; f < c.plan.t[i].nelems; f += per, k++) {
            dc_gen_block_t *b = &p.blocks[p.nblocks++];
            b->tensor = i;
            b->index = k;
            b->first = f;
            b->count = (size_t)DC_MIN(per, c.plan.t[i].nelems - f);
        }
    }

    nthreads = o->threads > 0 ? o->threads : dc_cpu_count();
    nthreads = DC_MIN(nthreads, 256);
    p.nslots = (size_t)nthreads + 2;
    p.slots = calloc(p.nslots, sizeof(*p.slots));
    tids = calloc((size_t)nthreads, sizeof(*tids));
    if (!p.slots || !tids) {
        st = dc_error(DC_ERR_NOMEM, "gen: out of memory");
        goto out;
    }
    for (size_t i = 0; i < p.nslots; i++) {
        p.slots[i].base = malloc(bbytes);
        p.slots[i].next = malloc(bbytes);
        if (!p.slots[i].base || !p.slots[i].next) {
            st = dc_error(DC_ERR_NOMEM, "gen: out of memory for %zu-byte blocks", bbytes);
            goto out;
        }
    }
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.cv_done, NULL);
    pthread_cond_init(&p.cv_free, NULL);
    for (; started < nthreads; started++) {
        int e = pthread_create(&tids[started], NULL, dc_gen_worker, &p);
        if (e) {
            st = dc_error_errno(DC_ERR_NOMEM, e, "gen: cannot start a thread");
            break;
        }
    }

    uint64_t changed = 0, selected = 0, done_bytes = 0;
    for (uint64_t b = 0; b < p.nblocks && st == DC_OK; b++) {
        dc_gen_slot_t *s = &p.slots[b % p.nslots];
        pthread_mutex_lock(&p.mu);
        while (s->done != b + 1)
            pthread_cond_wait(&p.cv_done, &p.mu);
        pthread_mutex_unlock(&p.mu);
        const dc_gen_block_t *bl = &p.blocks[b];
        size_t len = bl->count * dc_dtype_size(c.plan.t[bl->tensor].dtype);
        st = dc_st_writer_write(wb, s->base, len);
        if (st == DC_OK)
            st = dc_st_writer_write(wn, s->next, len);
        if (c.plan.t[bl->tensor].kind != DC_GEN_POS) {
            changed += s->changed;
            selected += s->selected;
        }
        done_bytes += len;
        pthread_mutex_lock(&p.mu);
        p.written = b + 1;
        if (st != DC_OK)
            p.abort = true;
        pthread_cond_broadcast(&p.cv_free);
        pthread_mutex_unlock(&p.mu);
        if (o->progress)
            o->progress(o->progress_ctx, done_bytes, total_bytes);
    }
    pthread_mutex_lock(&p.mu);
    p.abort = true;
    pthread_cond_broadcast(&p.cv_free);
    pthread_mutex_unlock(&p.mu);
    for (int i = 0; i < started; i++)
        pthread_join(tids[i], NULL);
    pthread_cond_destroy(&p.cv_free);
    pthread_cond_destroy(&p.cv_done);
    pthread_mutex_destroy(&p.mu);
    if (st != DC_OK)
        goto out;

    st = dc_st_writer_finish(wb);
    wb = NULL;
    if (st != DC_OK)
        goto out;
    st = dc_st_writer_finish(wn);
    wn = NULL;
    if (st != DC_OK)
        goto out;

    if (res) {
        memset(res, 0, sizeof(*res));
        res->params = c.plan.params;
        res->buffer_elems = c.plan.npos;
        res->tensors = c.plan.n;
        res->layers = c.plan.layers;
        res->hidden = c.plan.d;
        res->ffn = c.plan.ffn;
        res->vocab = c.plan.vocab;
        res->file_bytes = hdr_len + total_bytes;
        res->selected = selected;
        res->changed = changed;
        res->real_rate = c.plan.params ? (double)changed / (double)c.plan.params : 0;
        res->lr = o->model == DC_GEN_OPTIMIZER ? c.lr_d : 0;
        res->calib_rate = pred;
        res->seconds = dc_now_s() - t0;
        res->threads = nthreads;
    }

out:
    if (wb)
        dc_st_writer_abort(wb);
    if (wn)
        dc_st_writer_abort(wn);
    if (p.slots)
        for (size_t i = 0; i < p.nslots; i++) {
            free(p.slots[i].base);
            free(p.slots[i].next);
        }
    free(p.slots);
    free(tids);
    free(p.blocks);
    free(descs);
    free(hdr);
    free(c.plan.t);
    return st;
}
