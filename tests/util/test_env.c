/* test_env.c - DELTACAST_* variables: every one the code reads is known
 * (util/env.c), a typo gets one warning naming the closest known one, in
 * the library and in the command. */
#include "testenv.h"
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/dc_util.h"

Test(env, config_keys_and_extras_are_known)
{
    cr_assert(dc_env_known("DELTACAST_CHUNK_SIZE"));
    cr_assert(dc_env_known("DELTACAST_LOG"));
    cr_assert(dc_env_known("DELTACAST_TLS_KEY_FILE"));
    cr_assert(dc_env_known("DELTACAST_LIB"));
    cr_assert(dc_env_known("DELTACAST_BIN"));
    cr_assert(dc_env_known("DELTACAST_SOAK_TEST"));
    cr_assert(!dc_env_known("DELTACAST_CHUNK_SIZ"));
    cr_assert(!dc_env_known("DELTACAST_"));
    for (const dc_env_var_t *v = dc_env_extra_table(); v->name; v++)
        cr_assert(strncmp(v->name, "DELTACAST_", 10) == 0 && v->doc && v->doc[0], "%s", v->name);
}

Test(env, closest_known_name)
{
    char out[96];
    cr_assert_str_eq(dc_env_closest("DELTACAST_CHUNK_SIZ", out, sizeof(out)),
                     "DELTACAST_CHUNK_SIZE");
    cr_assert_str_eq(dc_env_closest("DELTACAST_TIMEOUTMS", out, sizeof(out)),
                     "DELTACAST_TIMEOUT_MS");
    cr_assert_str_eq(dc_env_closest("DELTACAST_SECERT", out, sizeof(out)), "DELTACAST_SECRET");
    cr_assert_str_eq(dc_env_closest("DELTACAST_TRANSPROT", out, sizeof(out)),
                     "DELTACAST_TRANSPORT");
    /* nothing near: no suggestion */
    cr_assert_null(dc_env_closest("DELTACAST_QQQQQQQQQQQQQQQQQ", out, sizeof(out)));
    cr_assert_str_eq(out, "");
    /* long and odd names are bounded */
    char big[400];
    memset(big, 'A', sizeof(big) - 1);
    big[sizeof(big) - 1] = 0;
    memcpy(big, "DELTACAST_", 10);
    dc_env_closest(big, out, sizeof(out));
}

/* The command with a typo in its environment: one warning naming the
 * variable and the closest known one; a known variable: none. */
Test(env, command_warns_about_a_typo)
{
    const char *bin = dc_test_bin();
    cr_assert_not_null(bin);
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "DELTACAST_CHUNK_SIZ=1MiB DELTACAST_LOG=warn '%s' --version 2>&1 >/dev/null", bin);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    char out[4096];
    size_t n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = 0;
    pclose(p);
    cr_assert(strstr(out, "DELTACAST_CHUNK_SIZ is not a deltacast variable"), "%s", out);
    cr_assert(strstr(out, "did you mean DELTACAST_CHUNK_SIZE?"), "%s", out);
    cr_assert(strstr(out, "warn"), "%s", out);
    /* once */
    cr_assert_null(strstr(strstr(out, "CHUNK_SIZ is") + 1, "CHUNK_SIZ is"), "%s", out);
    snprintf(cmd, sizeof(cmd), "DELTACAST_CHUNK_SIZE=1MiB '%s' --version 2>&1 >/dev/null", bin);
    p = popen(cmd, "r");
    cr_assert_not_null(p);
    n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = 0;
    pclose(p);
    cr_assert(!strstr(out, "not a deltacast variable"), "%s", out);
}
