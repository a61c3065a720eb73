/*
 * tests/msan/criterion/criterion.h - the subset of Criterion's API that the
 * kernel and codec tests use, for the MemorySanitizer build only.
 *
 * MemorySanitizer needs every instruction that touches memory to be
 * instrumented.  Criterion's runner, and the libraries it starts before any
 * test (libgit2 in criterion_initialize, nanomsg between runner and
 * workers), are Debian's uninstrumented builds: MSan stops in them before
 * the first test.  So scripts/msan.sh compiles the same test files against
 * this header and tests/msan/runner.c instead: each Test() runs in a forked
 * child (as Criterion's workers do), a failed assertion prints file, line,
 * expression and message and fails that test, and the run ends with a
 * "N passed, N failed" line.  The regular builds use real Criterion.
 */
#ifndef DC_MSAN_CRITERION_SHIM_H
#define DC_MSAN_CRITERION_SHIM_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cr_shim_cfg {
    void (*init)(void);
    void (*fini)(void);
    double timeout;
    int disabled;
    const char *description;
};

void cr_shim_register_test(const char *suite, const char *name, void (*fn)(void),
                           const struct cr_shim_cfg *cfg);
void cr_shim_register_suite(const char *suite, const struct cr_shim_cfg *cfg);
__attribute__((noreturn, format(printf, 4, 5))) void
cr_shim_fail(const char *file, int line, const char *expr, const char *fmt, ...);
__attribute__((noreturn, format(printf, 1, 2))) void cr_shim_skip(const char *fmt, ...);
__attribute__((format(printf, 1, 2))) void cr_shim_log(const char *fmt, ...);

#define TestSuite(s, ...)                                                                    \
    static const struct cr_shim_cfg cr_shim_suite_##s = {__VA_ARGS__};                      \
    __attribute__((constructor)) static void cr_shim_suite_reg_##s(void)                     \
    {                                                                                        \
        cr_shim_register_suite(#s, &cr_shim_suite_##s);                                      \
    }

#define Test(s, n, ...)                                                                      \
    static void cr_shim_test_##s##_##n(void);                                                \
    static const struct cr_shim_cfg cr_shim_cfg_##s##_##n = {__VA_ARGS__};                   \
    __attribute__((constructor)) static void cr_shim_reg_##s##_##n(void)                     \
    {                                                                                        \
        cr_shim_register_test(#s, #n, cr_shim_test_##s##_##n, &cr_shim_cfg_##s##_##n);        \
    }                                                                                        \
    static void cr_shim_test_##s##_##n(void)

/* cr_assert(cond) or cr_assert(cond, "format", args...) */
#define cr_assert(c, ...)                                                                    \
    do {                                                                                     \
        if (!(c))                                                                            \
            cr_shim_fail(__FILE__, __LINE__, #c, "" __VA_ARGS__);                            \
    } while (0)
#define cr_shim_cmp(a, op, b, ...)                                                           \
    do {                                                                                     \
        if (!((a)op(b)))                                                                     \
            cr_shim_fail(__FILE__, __LINE__, #a " " #op " " #b, "" __VA_ARGS__);             \
    } while (0)
#define cr_assert_eq(a, b, ...) cr_shim_cmp(a, ==, b, __VA_ARGS__)
#define cr_assert_neq(a, b, ...) cr_shim_cmp(a, !=, b, __VA_ARGS__)
#define cr_assert_lt(a, b, ...) cr_shim_cmp(a, <, b, __VA_ARGS__)
#define cr_assert_leq(a, b, ...) cr_shim_cmp(a, <=, b, __VA_ARGS__)
#define cr_assert_gt(a, b, ...) cr_shim_cmp(a, >, b, __VA_ARGS__)
#define cr_assert_geq(a, b, ...) cr_shim_cmp(a, >=, b, __VA_ARGS__)
#define cr_assert_null(p, ...) cr_shim_cmp((const void *)(p), ==, NULL, __VA_ARGS__)
#define cr_assert_not_null(p, ...) cr_shim_cmp((const void *)(p), !=, NULL, __VA_ARGS__)
#define cr_assert_str_eq(a, b, ...) cr_assert(strcmp((a), (b)) == 0, __VA_ARGS__)
#define cr_assert_str_neq(a, b, ...) cr_assert(strcmp((a), (b)) != 0, __VA_ARGS__)
#define cr_assert_fail(...) cr_shim_fail(__FILE__, __LINE__, "cr_assert_fail", "" __VA_ARGS__)
#define cr_expect cr_assert
#define cr_expect_eq cr_assert_eq
#define cr_expect_neq cr_assert_neq
#define cr_skip_test(...) cr_shim_skip("" __VA_ARGS__)
#define cr_log_info(...) cr_shim_log("" __VA_ARGS__)
#define cr_log_warn(...) cr_shim_log("" __VA_ARGS__)

#endif
