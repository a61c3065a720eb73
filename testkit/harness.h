/*
 * harness.h - the one benchmark harness behind `deltacast perf ...`.
 *
 * A benchmark repeats a measurement (its own loop) and keeps every sample
 * of each metric here; the harness gives the median, min, max and
 * percentiles, the JSON form of a metric for --json, and a progress line.
 * Each benchmark prints its own text table, always with the baseline
 * measured in the same run and the ratio, since these machines are shared
 * and noisy.
 */
#ifndef DC_TESTKIT_HARNESS_H
#define DC_TESTKIT_HARNESS_H

#include "util/dc_util.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

#define DC_PERF_MAX_SAMPLES 256

/** One metric and its samples, e.g. {"encode_gbps", "GB/s", ...}. */
typedef struct dc_perf_metric {
    char name[64];
    char unit[16];
    double samples[DC_PERF_MAX_SAMPLES];
    int n;
} dc_perf_metric_t;

/** Add a sample (silently ignores samples past DC_PERF_MAX_SAMPLES). */
void dc_perf_metric_add(dc_perf_metric_t *m, double v);
void dc_perf_metric_init(dc_perf_metric_t *m, const char *name, const char *unit);

/** Order statistics of a metric's samples (0 when empty). */
double dc_perf_median(const dc_perf_metric_t *m);
double dc_perf_percentile(const dc_perf_metric_t *m, double p); /* p in [0,100] */
double dc_perf_min(const dc_perf_metric_t *m);
double dc_perf_max(const dc_perf_metric_t *m);

/** Median/percentile of a raw array (sorts a copy). */
double dc_perf_percentile_of(const double *v, size_t n, double p);

/** {"median":..,"min":..,"max":..,"p99":..,"n":..,"unit":..} */
json_t *dc_perf_metric_json(const dc_perf_metric_t *m);

/** Print `root` to stdout, indented, with a trailing newline. */
/* For a --json run: keep the real stdout for the JSON alone and send
 * everything else printed to stdout (libraries included) to stderr. */
void dc_perf_json_reserve_stdout(void);
void dc_perf_json_print(json_t *root);

/** A live progress line on stderr when it is a terminal ("\r..."); no-op
 *  otherwise.  dc_perf_progress_end() finishes the line. */
void dc_perf_progress(const char *fmt, ...) DC_PRINTF(1, 2);
void dc_perf_progress_end(void);

#endif /* DC_TESTKIT_HARNESS_H */
