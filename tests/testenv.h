/* testenv.h - where a test finds the source tree and the deltacast binary.
 *
 * `meson test` sets DELTACAST_SRC / DELTACAST_BIN; a test binary run by
 * hand (`build/tests/kernels_test_delta`, any cwd, any environment) falls
 * back to the paths meson compiled in, so it never fails for want of an
 * environment variable. */
#ifndef DC_TESTENV_H
#define DC_TESTENV_H

#include <stdlib.h>

static inline const char *dc_test_env_or(const char *var, const char *dflt)
{
    const char *v = getenv(var);
    return (v && *v) ? v : dflt;
}

/* the source tree's root */
static inline const char *dc_test_src(void)
{
    return dc_test_env_or("DELTACAST_SRC", DC_TEST_SRC_DIR);
}

/* the deltacast executable under test */
static inline const char *dc_test_bin(void)
{
    return dc_test_env_or("DELTACAST_BIN", DC_TEST_BIN_PATH);
}

#endif
