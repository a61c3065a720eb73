/* env.c - every DELTACAST_* environment variable the code reads, and a
 * warning for the others (a typo would otherwise be ignored silently).
 *
 * The tunables are the config table (config.c: DELTACAST_<NAME> for each
 * key); the variables below are read outside it: by the Python binding,
 * the tests, the scripts and the examples.  dc_env_check() warns once per
 * process about each DELTACAST_* variable that is neither, naming the
 * closest known one (edit distance). */
#include "dc_util.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

/* Read outside the config table.  {name, who reads it} */
static const dc_env_var_t dc_env_extra[] = {
    {"DELTACAST_LIB", "python/deltacast.py: the libdeltacast.so to load"},
    {"DELTACAST_BIN", "tests: the deltacast command to run"},
    {"DELTACAST_SRC", "tests: the source tree"},
    {"DELTACAST_BUILD", "tests: the build tree"},
    {"DELTACAST_PORT", "examples/refit.sbatch: the first port of the job"},
    {"DELTACAST_SOAK_TEST", "perf/perf_soak.c: test hook (flip:V:N, hang:V)"},
    {"DELTACAST_TEST_RDMA_ADDR", "tests/verbs: an RDMA-capable address to test on"},
    {"DELTACAST_TEST_RDMA_ADDR2", "tests/verbs: a second RDMA-capable address"},
    {"DELTACAST_TEST_RDMA_DEV", "tests/verbs: the RDMA device to test on"},
    {"DELTACAST_RDMA_VM_DIR", "scripts/rdma-vm.sh: the VM's state directory"},
    {NULL, NULL},
};

const dc_env_var_t *dc_env_extra_table(void)
{
    return dc_env_extra;
}

/* DELTACAST_<KEY> of config key `key` into out. */
static void dc_env_of_key(const char *key, char *out, size_t len)
{
    size_t n = (size_t)snprintf(out, len, "DELTACAST_");
    for (const char *p = key; *p && n + 1 < len; p++)
        out[n++] = (char)toupper((unsigned char)*p);
    out[n < len ? n : len - 1] = 0;
}

int dc_env_known(const char *name)
{
    char buf[96];
    for (const dc_config_entry_t *e = dc_config_table(); e->name; e++) {
        dc_env_of_key(e->name, buf, sizeof(buf));
        if (strcmp(buf, name) == 0)
            return 1;
    }
    for (const dc_env_var_t *v = dc_env_extra; v->name; v++)
        if (strcmp(v->name, name) == 0)
            return 1;
    return 0;
}

/* Levenshtein distance of a and b (each at most 95 bytes are compared). */
static size_t dc_env_distance(const char *a, const char *b)
{
    size_t la = strnlen(a, 95), lb = strnlen(b, 95);
    size_t row[96];
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t sub = diag + (a[i - 1] != b[j - 1]);
            size_t m = DC_MIN(up + 1, row[j - 1] + 1);
            row[j] = DC_MIN(m, sub);
            diag = up;
        }
    }
    return row[lb];
}

const char *dc_env_closest(const char *name, char *out, size_t len)
{
    char buf[96];
    size_t best = SIZE_MAX;
    out[0] = 0;
    for (const dc_config_entry_t *e = dc_config_table(); e->name; e++) {
        dc_env_of_key(e->name, buf, sizeof(buf));
        size_t d = dc_env_distance(name, buf);
        if (d < best) {
            best = d;
            snprintf(out, len, "%s", buf);
        }
    }
    for (const dc_env_var_t *v = dc_env_extra; v->name; v++) {
        size_t d = dc_env_distance(name, v->name);
        if (d < best) {
            best = d;
            snprintf(out, len, "%s", v->name);
        }
    }
    /* a suggestion only where it is near: at most a third of the part after
     * the prefix changed */
    size_t tail = strlen(name) > 10 ? strlen(name) - 10 : 0;
    if (best == SIZE_MAX || best * 3 > tail + 2)
        out[0] = 0;
    return out[0] ? out : NULL;
}

static void dc_env_check_once(void)
{
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, "DELTACAST_", 10) != 0)
            continue;
        const char *eq = strchr(*e, '=');
        size_t n = eq ? (size_t)(eq - *e) : strlen(*e);
        char name[96];
        if (n >= sizeof(name))
            n = sizeof(name) - 1;
        memcpy(name, *e, n);
        name[n] = 0;
        if (dc_env_known(name))
            continue;
        char near[96];
        if (dc_env_closest(name, near, sizeof(near)))
            DC_LOG_WARN("environment %s is not a deltacast variable (ignored): did you mean %s?",
                        name, near);
        else
            DC_LOG_WARN("environment %s is not a deltacast variable (ignored; `deltacast "
                        "--help` lists them)", name);
    }
}

void dc_env_check(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, dc_env_check_once);
}
