/* test_log.c - log levels, DELTACAST_LOG parsing and the sink. */
#include "util/dc_util.h"

#include <criterion/criterion.h>
#include <stdlib.h>

Test(log, parse_levels)
{
    dc_log_level_t l;
    cr_assert_eq(dc_log_level_parse("error", &l), DC_OK);
    cr_assert_eq(l, DC_LOG_LEVEL_ERROR);
    cr_assert_eq(dc_log_level_parse("WARN", &l), DC_OK);
    cr_assert_eq(l, DC_LOG_LEVEL_WARN);
    cr_assert_eq(dc_log_level_parse("Info", &l), DC_OK);
    cr_assert_eq(l, DC_LOG_LEVEL_INFO);
    cr_assert_eq(dc_log_level_parse("debug", &l), DC_OK);
    cr_assert_eq(l, DC_LOG_LEVEL_DEBUG);
    l = DC_LOG_LEVEL_INFO;
    cr_assert_eq(dc_log_level_parse("verbose", &l), DC_ERR_INVALID);
    cr_assert_eq(l, DC_LOG_LEVEL_INFO, "output untouched on failure");
    cr_assert(strstr(dc_last_error(), "verbose") != NULL);
    cr_assert_eq(dc_log_level_parse(NULL, &l), DC_ERR_INVALID);
}

/* Each Criterion test runs in its own process, so the env is read fresh. */
Test(log, level_from_environment)
{
    setenv("DELTACAST_LOG", "debug", 1);
    cr_assert_eq(dc_log_get_level(), DC_LOG_LEVEL_DEBUG);
}

Test(log, default_level_is_warn)
{
    unsetenv("DELTACAST_LOG");
    cr_assert_eq(dc_log_get_level(), DC_LOG_LEVEL_WARN);
}

Test(log, bad_environment_falls_back_to_warn)
{
    setenv("DELTACAST_LOG", "loud", 1);
    cr_assert_eq(dc_log_get_level(), DC_LOG_LEVEL_WARN);
}

Test(log, lines_are_filtered_by_level)
{
    FILE *fp = tmpfile();
    cr_assert_not_null(fp);
    dc_log_set_file(fp);
    dc_log_set_level(DC_LOG_LEVEL_WARN);
    dc_log(DC_LOG_LEVEL_ERROR, "an error %d", 1);
    dc_log(DC_LOG_LEVEL_WARN, "a warning");
    dc_log(DC_LOG_LEVEL_INFO, "hidden info");
    DC_LOG_DEBUG("hidden debug");
    dc_log_set_level(DC_LOG_LEVEL_DEBUG);
    DC_LOG_DEBUG("shown debug");
    dc_log_set_file(NULL);
    rewind(fp);
    char buf[4096] = {0};
    size_t n = fread(buf, 1, sizeof(buf) - 1, fp);
    fclose(fp);
    buf[n] = 0;
    cr_assert(strstr(buf, "error: an error 1") != NULL, "%s", buf);
    cr_assert(strstr(buf, "warn: a warning") != NULL);
    cr_assert(strstr(buf, "hidden") == NULL);
    cr_assert(strstr(buf, "debug: shown debug") != NULL);
}
