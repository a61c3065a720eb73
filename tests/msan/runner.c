/*
 * tests/msan/runner.c - the test runner of the MemorySanitizer and
 * ThreadSanitizer builds (see criterion/criterion.h beside it): every
 * registered Test() in a forked child with its suite's init/fini and
 * timeout, an "ok" / "not ok" / "ok ... # skip" line each (TAP-like, so
 * that .ci/count.py counts the cases), and "N passed, N failed, N skipped"
 * at the end.  Exit 0 only when none failed.  Argument: a substring of
 * "suite::name" to run only those.
 */
#include "criterion/criterion.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#define CR_SHIM_MAX 1024

static struct {
    const char *suite, *name;
    void (*fn)(void);
    const struct cr_shim_cfg *cfg;
} tests[CR_SHIM_MAX];
static int ntests;
static struct {
    const char *name;
    const struct cr_shim_cfg *cfg;
} suites[64];
static int nsuites;

void cr_shim_register_test(const char *suite, const char *name, void (*fn)(void),
                           const struct cr_shim_cfg *cfg)
{
    if (ntests == CR_SHIM_MAX) {
        fprintf(stderr, "runner: more than %d tests\n", CR_SHIM_MAX);
        abort();
    }
    tests[ntests].suite = suite;
    tests[ntests].name = name;
    tests[ntests].fn = fn;
    tests[ntests].cfg = cfg;
    ntests++;
}

void cr_shim_register_suite(const char *suite, const struct cr_shim_cfg *cfg)
{
    if (nsuites < 64) {
        suites[nsuites].name = suite;
        suites[nsuites].cfg = cfg;
        nsuites++;
    }
}

void cr_shim_fail(const char *file, int line, const char *expr, const char *fmt, ...)
{
    fprintf(stderr, "%s:%d: Assertion failed: %s", file, line, expr);
    if (fmt && *fmt) {
        va_list ap;
        va_start(ap, fmt);
        fputs(": ", stderr);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
    }
    fputc('\n', stderr);
    fflush(stderr);
    _exit(1);
}

void cr_shim_skip(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("skipped: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    fflush(stderr);
    _exit(98); /* not 77: MemorySanitizer exits 77 on a report */
}

void cr_shim_log(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static const struct cr_shim_cfg *suite_cfg(const char *name)
{
    for (int i = 0; i < nsuites; i++)
        if (strcmp(suites[i].name, name) == 0)
            return suites[i].cfg;
    return NULL;
}

int main(int argc, char **argv)
{
    int passed = 0, failed = 0, skipped = 0;
    for (int i = 0; i < ntests; i++) {
        char full[256];
        snprintf(full, sizeof(full), "%s::%s", tests[i].suite, tests[i].name);
        if (argc > 1 && !strstr(full, argv[1]))
            continue;
        const struct cr_shim_cfg *sc = suite_cfg(tests[i].suite), *tc = tests[i].cfg;
        if (tc->disabled || (sc && sc->disabled)) {
            skipped++;
            continue;
        }
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 2;
        }
        if (pid == 0) {
            double to = tc->timeout > 0 ? tc->timeout : sc && sc->timeout > 0 ? sc->timeout : 600;
            alarm((unsigned)to);
            void (*init)(void) = tc->init ? tc->init : sc ? sc->init : NULL;
            void (*fini)(void) = tc->fini ? tc->fini : sc ? sc->fini : NULL;
            if (init)
                init();
            tests[i].fn();
            if (fini)
                fini();
            _exit(0);
        }
        int status = 0;
        waitpid(pid, &status, 0);
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
            passed++;
            printf("ok   %s\n", full);
        } else if (WIFEXITED(status) && WEXITSTATUS(status) == 98) {
            skipped++;
            printf("ok %s # skip\n", full);
        } else {
            failed++;
            if (WIFSIGNALED(status))
                printf("not ok %s (signal %d%s)\n", full, WTERMSIG(status),
                       WTERMSIG(status) == SIGALRM ? ": timed out" : "");
            else
                printf("not ok %s (exit %d%s)\n", full, WEXITSTATUS(status),
                       WEXITSTATUS(status) == 66 ? ": a ThreadSanitizer report" : "");
        }
        fflush(stdout);
    }
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}
