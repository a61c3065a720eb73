/* harness.c - samples, order statistics, JSON and progress output. */
#include "testkit/harness.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void dc_perf_metric_init(dc_perf_metric_t *m, const char *name, const char *unit)
{
    memset(m, 0, sizeof(*m));
    snprintf(m->name, sizeof(m->name), "%s", name);
    snprintf(m->unit, sizeof(m->unit), "%s", unit);
}

void dc_perf_metric_add(dc_perf_metric_t *m, double v)
{
    if (m->n < DC_PERF_MAX_SAMPLES)
        m->samples[m->n++] = v;
}

static int dc_perf_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double dc_perf_percentile_of(const double *v, size_t n, double p)
{
    if (n == 0)
        return 0;
    double *c = malloc(n * sizeof(*c));
    if (!c)
        return 0;
    memcpy(c, v, n * sizeof(*c));
    qsort(c, n, sizeof(*c), dc_perf_cmp);
    double r;
    if (p <= 0) {
        r = c[0];
    } else if (p >= 100) {
        r = c[n - 1];
    } else if (p == 50) {
        r = (n % 2) ? c[n / 2] : 0.5 * (c[n / 2 - 1] + c[n / 2]);
    } else {
        /* nearest-rank */
        size_t k = (size_t)((p / 100.0) * (double)n + 0.999999);
        if (k < 1)
            k = 1;
        if (k > n)
            k = n;
        r = c[k - 1];
    }
    free(c);
    return r;
}

double dc_perf_percentile(const dc_perf_metric_t *m, double p)
{
    return dc_perf_percentile_of(m->samples, (size_t)m->n, p);
}

double dc_perf_median(const dc_perf_metric_t *m) { return dc_perf_percentile(m, 50); }
double dc_perf_min(const dc_perf_metric_t *m) { return dc_perf_percentile(m, 0); }
double dc_perf_max(const dc_perf_metric_t *m) { return dc_perf_percentile(m, 100); }

json_t *dc_perf_metric_json(const dc_perf_metric_t *m)
{
    return json_pack("{s:f, s:f, s:f, s:f, s:i, s:s}", "median", dc_perf_median(m), "min",
                     dc_perf_min(m), "max", dc_perf_max(m), "p99", dc_perf_percentile(m, 99),
                     "n", m->n, "unit", m->unit);
}

/* The stream the JSON goes to: stdout, or the real stdout saved by
 * dc_perf_json_reserve_stdout(). */
static FILE *dc_perf_json_out;

void dc_perf_json_reserve_stdout(void)
{
    if (dc_perf_json_out)
        return;
    fflush(stdout);
    int fd = dup(STDOUT_FILENO);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        if (fd >= 0)
            close(fd);
        return;
    }
    /* from now on, whatever a library prints to stdout (UCX writes its
     * error lines there) lands on stderr and cannot corrupt the JSON */
    if (dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
        fclose(f);
        return;
    }
    dc_perf_json_out = f;
}

void dc_perf_json_print(json_t *root)
{
    FILE *out = dc_perf_json_out ? dc_perf_json_out : stdout;
    char *s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
    if (s) {
        fputs(s, out);
        fputc('\n', out);
        free(s);
    }
    fflush(out);
}

static bool dc_perf_progress_active;

void dc_perf_progress(const char *fmt, ...)
{
    if (!isatty(STDERR_FILENO))
        return;
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    fprintf(stderr, "\r\033[K%s", line);
    fflush(stderr);
    dc_perf_progress_active = true;
}

void dc_perf_progress_end(void)
{
    if (dc_perf_progress_active) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
        dc_perf_progress_active = false;
    }
}
