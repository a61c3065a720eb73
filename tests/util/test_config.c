/* test_config.c - the tunables table, overrides, size and rate parsing. */
#include "util/dc_util.h"

#include <criterion/criterion.h>
#include <stdlib.h>

Test(config, table_has_documented_defaults)
{
    const dc_config_entry_t *t = dc_config_table();
    int n = 0;
    for (; t[n].name; n++) {
        cr_assert_not_null(t[n].def);
        cr_assert(strlen(t[n].doc) > 5, "%s has no doc", t[n].name);
    }
    cr_assert(n >= 5);
    cr_assert_str_eq(dc_config_get("chunk_size"), "4MiB");
    cr_assert_null(dc_config_get("no_such_key"));
}

Test(config, environment_then_set_overrides)
{
    setenv("DELTACAST_CHUNK_SIZE", "1MiB", 1);
    cr_assert_str_eq(dc_config_get("chunk_size"), "1MiB");
    uint64_t v;
    cr_assert_eq(dc_config_get_size("chunk_size", &v), DC_OK);
    cr_assert_eq(v, 1048576);
    cr_assert_eq(dc_config_set("chunk_size", "64k"), DC_OK);
    cr_assert_str_eq(dc_config_get("chunk_size"), "64k");
    cr_assert_eq(dc_config_get_size("chunk_size", &v), DC_OK);
    cr_assert_eq(v, 64000);
    cr_assert_eq(dc_config_set("chunk_size", NULL), DC_OK);
    cr_assert_str_eq(dc_config_get("chunk_size"), "1MiB");
    cr_assert_eq(dc_config_set("bogus", "1"), DC_ERR_NOT_FOUND);
    cr_assert(strstr(dc_last_error(), "bogus") != NULL);
}

Test(config, bad_size_in_environment_is_reported)
{
    setenv("DELTACAST_CHUNK_SIZE", "lots", 1);
    uint64_t v = 7;
    cr_assert_eq(dc_config_get_size("chunk_size", &v), DC_ERR_INVALID);
    cr_assert_eq(v, 7);
    cr_assert(strstr(dc_last_error(), "chunk_size") != NULL, "%s", dc_last_error());
}

Test(config, print_lists_every_key)
{
    FILE *fp = tmpfile();
    dc_config_print(fp);
    rewind(fp);
    char buf[8192] = {0};
    size_t n = fread(buf, 1, sizeof(buf) - 1, fp);
    buf[n] = 0;
    fclose(fp);
    for (const dc_config_entry_t *t = dc_config_table(); t->name; t++)
        cr_assert(strstr(buf, t->name) != NULL, "%s missing", t->name);
}

Test(config, secret_is_never_printed)
{
    setenv("DELTACAST_SECRET", "hunter2-topsecret", 1);
    FILE *fp = tmpfile();
    dc_config_print(fp);
    rewind(fp);
    char buf[8192] = {0};
    size_t n = fread(buf, 1, sizeof(buf) - 1, fp);
    buf[n] = 0;
    fclose(fp);
    cr_assert(strstr(buf, "hunter2") == NULL);
}

struct size_case {
    const char *s;
    uint64_t v;
};

Test(config, parse_size_accepts)
{
    const struct size_case ok[] = {
        {"0", 0}, {"4096", 4096}, {"4k", 4000}, {"4K", 4000}, {"4KiB", 4096},
        {"4kib", 4096}, {"4MiB", 4194304}, {"4MB", 4000000}, {"1.5GiB", 1610612736},
        {"2e9", 2000000000}, {"1TiB", 1099511627776ull}, {"17B", 17},
    };
    for (size_t i = 0; i < DC_ARRAY_SIZE(ok); i++) {
        uint64_t v = 0;
        cr_assert_eq(dc_parse_size(ok[i].s, &v), DC_OK, "%s", ok[i].s);
        cr_assert_eq(v, ok[i].v, "%s -> %lu", ok[i].s, (unsigned long)v);
    }
}

Test(config, parse_size_rejects)
{
    const char *bad[] = {"", "-1", "+3", "abc", "4X", "4MiBs", "1e30", "0.5", "inf",
                         "nan", "4 MiB extra", "1.5k5"};
    for (size_t i = 0; i < DC_ARRAY_SIZE(bad); i++) {
        uint64_t v = 99;
        cr_assert_eq(dc_parse_size(bad[i], &v), DC_ERR_INVALID, "%s accepted", bad[i]);
        cr_assert_eq(v, 99);
    }
    uint64_t v;
    cr_assert_eq(dc_parse_size(NULL, &v), DC_ERR_INVALID);
}

Test(config, parse_rate)
{
    double r;
    cr_assert_eq(dc_parse_rate("100mbit", &r), DC_OK);
    cr_assert_float_eq(r, 1e8, 1);
    cr_assert_eq(dc_parse_rate("5gbit", &r), DC_OK);
    cr_assert_float_eq(r, 5e9, 1);
    cr_assert_eq(dc_parse_rate("400Gbit", &r), DC_OK);
    cr_assert_float_eq(r, 4e11, 1);
    cr_assert_eq(dc_parse_rate("1.5Gbps", &r), DC_OK);
    cr_assert_float_eq(r, 1.5e9, 1);
    cr_assert_eq(dc_parse_rate("1e9", &r), DC_OK);
    cr_assert_float_eq(r, 1e9, 1);
    cr_assert_eq(dc_parse_rate("0mbit", &r), DC_ERR_INVALID);
    cr_assert_eq(dc_parse_rate("10 parsecs", &r), DC_ERR_INVALID);
    cr_assert_eq(dc_parse_rate("fast", &r), DC_ERR_INVALID);
    cr_assert_eq(dc_parse_rate("-5gbit", &r), DC_ERR_INVALID);
}
