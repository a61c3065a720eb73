/* test_status.c - dc_status_t names, groups and the per-thread detail. */
#include "util/dc_util.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <errno.h>
#include <pthread.h>

Test(status, names_and_strings_are_distinct)
{
    const dc_status_t all[] = {
        DC_OK, DC_ERR_AGAIN, DC_ERR_CORRUPT, DC_ERR_RESET, DC_ERR_TIMEOUT,
        DC_ERR_BUSY, DC_ERR_CANCELED, DC_ERR_INVALID, DC_ERR_FORMAT, DC_ERR_AUTH,
        DC_ERR_UNSUPPORTED, DC_ERR_NOMEM, DC_ERR_IO, DC_ERR_WRONG_BASE,
        DC_ERR_NOT_FOUND, DC_ERR_VERIFY, DC_ERR_CONFLICT,
        DC_ERR_INTERNAL,
    };
    for (size_t i = 0; i < DC_ARRAY_SIZE(all); i++) {
        cr_assert_str_neq(dc_status_name(all[i]), "DC_ERR_UNKNOWN");
        cr_assert_str_neq(dc_status_str(all[i]), "unknown status");
        for (size_t j = i + 1; j < DC_ARRAY_SIZE(all); j++) {
            cr_assert_str_neq(dc_status_name(all[i]), dc_status_name(all[j]));
            cr_assert_str_neq(dc_status_str(all[i]), dc_status_str(all[j]));
        }
    }
    cr_assert_str_eq(dc_status_name(DC_ERR_CORRUPT), "DC_ERR_CORRUPT");
    cr_assert_str_eq(dc_status_name((dc_status_t)-4242), "DC_ERR_UNKNOWN");
    cr_assert_str_eq(dc_status_str((dc_status_t)77), "unknown status");
}

Test(status, retryable_groups)
{
    cr_assert(!dc_status_is_retryable(DC_OK));
    cr_assert(dc_status_is_retryable(DC_ERR_CORRUPT));
    cr_assert(dc_status_is_retryable(DC_ERR_RESET));
    cr_assert(dc_status_is_retryable(DC_ERR_TIMEOUT));
    cr_assert(dc_status_is_retryable(DC_ERR_AGAIN));
    cr_assert(!dc_status_is_retryable(DC_ERR_INVALID));
    cr_assert(!dc_status_is_retryable(DC_ERR_AUTH));
    cr_assert(!dc_status_is_retryable(DC_ERR_UNSUPPORTED));
    cr_assert(!dc_status_is_retryable(DC_ERR_INTERNAL));
}

Test(status, detail_message_is_recorded_and_cleared)
{
    dc_clear_error();
    cr_assert_str_eq(dc_last_error(), "");
    cr_assert_eq(dc_last_status(), DC_OK);
    dc_status_t st = dc_error(DC_ERR_FORMAT, "header length %d too large", 99);
    cr_assert_eq(st, DC_ERR_FORMAT);
    cr_assert_eq(dc_last_status(), DC_ERR_FORMAT);
    cr_assert_str_eq(dc_last_error(), "header length 99 too large");
    dc_error_prefix("file %s", "a.bin");
    cr_assert_str_eq(dc_last_error(), "file a.bin: header length 99 too large");
    dc_error_errno(DC_ERR_IO, ENOENT, "open %s", "x");
    cr_assert_str_eq(dc_last_error(), "open x: No such file or directory");
    dc_clear_error();
    cr_assert_str_eq(dc_last_error(), "");
}

Test(status, long_detail_is_truncated_not_overflowed)
{
    char big[4096];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = 0;
    dc_error(DC_ERR_INVALID, "%s", big);
    size_t n = strlen(dc_last_error());
    cr_assert(n > 100 && n < 4096);
    for (int i = 0; i < 20; i++)
        dc_error_prefix("prefix-%d", i);
    cr_assert(strlen(dc_last_error()) == n);
}

static void *dc_test_thread(void *arg)
{
    (void)arg;
    /* a fresh thread sees no error of the main thread */
    int clean = dc_last_error()[0] == '\0' && dc_last_status() == DC_OK;
    dc_error(DC_ERR_TIMEOUT, "thread's own error");
    return (void *)(intptr_t)clean;
}

Test(status, detail_is_per_thread)
{
    dc_error(DC_ERR_AUTH, "main thread error");
    pthread_t t;
    void *res;
    cr_assert_eq(pthread_create(&t, NULL, dc_test_thread, NULL), 0);
    pthread_join(t, &res);
    cr_assert_eq((intptr_t)res, 1);
    cr_assert_str_eq(dc_last_error(), "main thread error");
    cr_assert_eq(dc_last_status(), DC_ERR_AUTH);
}

Test(status, errno_mapping)
{
    cr_assert_eq(dc_status_from_errno(ECONNRESET), DC_ERR_RESET);
    cr_assert_eq(dc_status_from_errno(EPIPE), DC_ERR_RESET);
    cr_assert_eq(dc_status_from_errno(ETIMEDOUT), DC_ERR_TIMEOUT);
    cr_assert_eq(dc_status_from_errno(EAGAIN), DC_ERR_AGAIN);
    cr_assert_eq(dc_status_from_errno(ENOMEM), DC_ERR_NOMEM);
    cr_assert_eq(dc_status_from_errno(ENOENT), DC_ERR_NOT_FOUND);
    cr_assert_eq(dc_status_from_errno(EIO), DC_ERR_IO);
}

Test(status, version_and_features)
{
    cr_assert_str_eq(dc_version_string(), DC_VERSION_STRING);
    cr_assert(strstr(dc_build_features(), "ucx=") != NULL);
    cr_assert(strstr(dc_build_features(), "cuda=") != NULL);
}

/* dc_mkdirs: a state directory and its missing parents (`--state st/%r` on
 * a fresh machine); a file in the way is an error that names the path. */
Test(status, mkdirs_creates_parents)
{
    char base[] = "/tmp/dc_mkdirs_XXXXXX";
    cr_assert_not_null(mkdtemp(base));
    char deep[256], file[256];
    snprintf(deep, sizeof(deep), "%s/a/b/c", base);
    cr_assert_eq(dc_mkdirs(deep), DC_OK, "%s", dc_last_error());
    struct stat sb;
    cr_assert(stat(deep, &sb) == 0 && S_ISDIR(sb.st_mode));
    cr_assert_eq(dc_mkdirs(deep), DC_OK); /* exists: fine */
    snprintf(file, sizeof(file), "%s/f", base);
    FILE *f = fopen(file, "w");
    cr_assert_not_null(f);
    fclose(f);
    snprintf(deep, sizeof(deep), "%s/f/x", base);
    cr_assert_eq(dc_mkdirs(deep), DC_ERR_IO);
    cr_assert(strstr(dc_last_error(), "/f") != NULL, "%s", dc_last_error());
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
    cr_assert_eq(system(cmd), 0);
}
