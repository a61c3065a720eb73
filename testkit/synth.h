/*
 * synth.h - the next version of a checkpoint, for multi-version refit jobs
 * (perf refit, the demo, tests) (testkit: not in libdeltacast).
 *
 * `deltacast gen` writes a (base, next) pair.  A job of K consecutive
 * versions needs v2, v3, ... as well; dc_synth_next() derives v(k+1) from
 * vk, streaming (bounded memory), deterministic for a seed:
 *   optimizer  a fraction `rate` of the floating elements moves by one unit
 *              in the last place (up or down): what an optimizer step does
 *              to a BF16 copy of an FP32 master (the value crosses one
 *              rounding boundary);
 *   inject     a fraction `rate` is multiplied by (1 + 0.01 N(0,1)) and
 *              re-rounded (BF16/F32; F16 moves by one ulp).
 * Integer tensors are copied unchanged.  Selection is Bernoulli(rate) per
 * element (geometric gaps).
 */
#ifndef DC_TESTKIT_SYNTH_H
#define DC_TESTKIT_SYNTH_H

#include "util/dc_util.h"

dc_status_t dc_synth_next(const char *src, const char *dst, double rate, int inject,
                          uint64_t seed, uint64_t *changed);

#endif /* DC_TESTKIT_SYNTH_H */
