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
    char buf[32768] = {0};
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
    char buf[32768] = {0};
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

/* --- the typed table (0.2) ------------------------------------------------ */

Test(config, every_entry_is_typed_and_its_default_parses)
{
    for (const dc_config_entry_t *t = dc_config_table(); t->name; t++) {
        cr_assert(t->where && *t->where, "%s: where is it read?", t->name);
        cr_assert_eq(dc_config_find(t->name), t);
        switch (t->type) {
        case DC_CONFIG_TYPE_STRING:
            break;
        case DC_CONFIG_TYPE_SIZE: {
            uint64_t v;
            cr_assert_eq(dc_config_get_size(t->name, &v), DC_OK, "%s: %s", t->name,
                         dc_last_error());
            break;
        }
        case DC_CONFIG_TYPE_INT: {
            int64_t v;
            dc_status_t st = dc_config_get_int(t->name, &v);
            cr_assert(st == DC_OK || (st == DC_ERR_NOT_FOUND && !*t->def), "%s: %s", t->name,
                      dc_last_error());
            break;
        }
        case DC_CONFIG_TYPE_BOOL: {
            int v;
            cr_assert_eq(dc_config_get_bool(t->name, &v), DC_OK, "%s", t->name);
            break;
        }
        case DC_CONFIG_TYPE_ENUM: {
            unsigned v;
            cr_assert_not_null(t->choices, "%s: enum without choices", t->name);
            cr_assert_eq(dc_config_get_enum(t->name, &v), DC_OK, "%s: %s", t->name,
                         dc_last_error());
            break;
        }
        case DC_CONFIG_TYPE_MS: {
            uint64_t v;
            cr_assert_eq(dc_config_get_ms(t->name, &v), DC_OK, "%s", t->name);
            break;
        }
        default:
            cr_assert_fail("%s: type %d", t->name, (int)t->type);
        }
    }
    cr_assert_null(dc_config_find("no_such_key"));
}

/* Every DELTACAST_* variable the library reads is a key of the table. */
Test(config, former_getenv_keys_are_in_the_table)
{
    const char *keys[] = {"engine_crash_at", "engine_root_crash", "engine_trace", "wan_fifo",
                          "kern_isa", "rdma_device", "fault", "log"};
    for (size_t i = 0; i < DC_ARRAY_SIZE(keys); i++)
        cr_assert_not_null(dc_config_find(keys[i]), "%s missing", keys[i]);
}

Test(config, set_works_for_a_former_getenv_only_key)
{
    setenv("DELTACAST_ENGINE_CRASH_AT", "3", 1);
    int64_t v = -1;
    cr_assert_str_eq(dc_config_get("engine_crash_at"), "3");
    cr_assert_eq(dc_config_get_int("engine_crash_at", &v), DC_OK);
    cr_assert_eq(v, 3);
    cr_assert_eq(dc_config_set("engine_crash_at", "7"), DC_OK);
    cr_assert_eq(dc_config_get_int("engine_crash_at", &v), DC_OK);
    cr_assert_eq(v, 7);
    cr_assert_eq(dc_config_set("engine_crash_at", NULL), DC_OK);
    cr_assert_str_eq(dc_config_get("engine_crash_at"), "3");
    unsetenv("DELTACAST_ENGINE_CRASH_AT");
    cr_assert_str_eq(dc_config_get("engine_crash_at"), "");
    cr_assert_eq(dc_config_get_int("engine_crash_at", &v), DC_ERR_NOT_FOUND);
    cr_assert_eq(v, 7);

    int fifo = -1;
    cr_assert_eq(dc_config_get_bool("wan_fifo", &fifo), DC_OK);
    cr_assert_eq(fifo, 0);
    cr_assert_eq(dc_config_set("wan_fifo", "yes"), DC_OK);
    cr_assert_eq(dc_config_get_bool("wan_fifo", &fifo), DC_OK);
    cr_assert_eq(fifo, 1);
    cr_assert_eq(dc_config_set("engine_trace", "/tmp/trace-dir"), DC_OK);
    cr_assert_str_eq(dc_config_get("engine_trace"), "/tmp/trace-dir");
}

Test(config, typed_getters_read_good_values)
{
    unsigned e = 99;
    cr_assert_eq(dc_config_set("transport", "ucx"), DC_OK);
    cr_assert_eq(dc_config_get_enum("transport", &e), DC_OK);
    cr_assert_eq(e, 2); /* auto|rdma|ucx|tcp */
    cr_assert_eq(dc_config_get_enum("kern_isa", &e), DC_OK); /* "" allowed: best */
    cr_assert_eq(e, 0);
    int64_t i = -1;
    cr_assert_eq(dc_config_get_int("tcp_streams", &i), DC_OK); /* "auto" */
    cr_assert_eq(i, 0);
    cr_assert_eq(dc_config_set("tcp_streams", "8"), DC_OK);
    cr_assert_eq(dc_config_get_int("tcp_streams", &i), DC_OK);
    cr_assert_eq(i, 8);
    uint64_t ms = 0;
    cr_assert_eq(dc_config_get_ms("timeout_ms", &ms), DC_OK);
    cr_assert_eq(ms, 30000);
    /* the transports read these with dc_config_get_size, as before 0.2 */
    uint64_t sz = 0;
    cr_assert_eq(dc_config_get_size("timeout_ms", &sz), DC_OK);
    cr_assert_eq(sz, 30000);
    cr_assert_eq(dc_config_get_size("tcp_streams", &sz), DC_OK);
    cr_assert_eq(sz, 8);
}

/* A bad value: DC_ERR_INVALID, a detail naming the key and the value, and
 * the output left alone. */
static void expect_bad(dc_status_t st, const char *key, const char *value)
{
    cr_assert_eq(st, DC_ERR_INVALID, "%s=%s accepted", key, value);
    cr_assert(strstr(dc_last_error(), key) != NULL, "%s", dc_last_error());
    cr_assert(strstr(dc_last_error(), value) != NULL, "%s", dc_last_error());
}

Test(config, typed_getters_reject_bad_values)
{
    setenv("DELTACAST_TIMEOUT_MS", "soon", 1);
    uint64_t ms = 5;
    expect_bad(dc_config_get_ms("timeout_ms", &ms), "timeout_ms", "soon");
    cr_assert_eq(ms, 5);
    cr_assert_eq(dc_config_set("timeout_ms", "-3"), DC_OK); /* set does not validate */
    expect_bad(dc_config_get_ms("timeout_ms", &ms), "timeout_ms", "-3");

    unsigned e = 5;
    cr_assert_eq(dc_config_set("transport", "carrier-pigeon"), DC_OK);
    expect_bad(dc_config_get_enum("transport", &e), "transport", "carrier-pigeon");
    cr_assert_eq(e, 5);
    cr_assert_eq(dc_config_set("transport", "TCP"), DC_OK); /* enums are exact */
    expect_bad(dc_config_get_enum("transport", &e), "transport", "TCP");

    int b = 5;
    cr_assert_eq(dc_config_set("wan_fifo", "maybe"), DC_OK);
    expect_bad(dc_config_get_bool("wan_fifo", &b), "wan_fifo", "maybe");
    cr_assert_eq(b, 5);

    int64_t i = 5;
    cr_assert_eq(dc_config_set("threads", "many"), DC_OK);
    expect_bad(dc_config_get_int("threads", &i), "threads", "many");
    cr_assert_eq(dc_config_set("threads", "4x"), DC_OK);
    expect_bad(dc_config_get_int("threads", &i), "threads", "4x");
    cr_assert_eq(dc_config_set("threads", "99999999999999999999"), DC_OK);
    expect_bad(dc_config_get_int("threads", &i), "threads", "99999999999999999999");
    cr_assert_eq(i, 5);

    /* a getter of another type: refused, naming both types */
    cr_assert_eq(dc_config_get_int("chunk_size", &i), DC_ERR_INVALID);
    cr_assert(strstr(dc_last_error(), "chunk_size") && strstr(dc_last_error(), "size"), "%s",
              dc_last_error());
    cr_assert_eq(dc_config_get_enum("chunk_size", &e), DC_ERR_INVALID);
    uint64_t sz;
    cr_assert_eq(dc_config_get_size("transport", &sz), DC_ERR_INVALID);
    cr_assert_eq(dc_config_get_bool("no_such_key", &b), DC_ERR_NOT_FOUND);
}

Test(config, log_key_sets_the_level)
{
    cr_assert_eq(dc_config_set("log", "debug"), DC_OK);
    cr_assert_eq(dc_log_get_level(), DC_LOG_LEVEL_DEBUG);
    unsigned e;
    cr_assert_eq(dc_config_get_enum("log", &e), DC_OK);
    cr_assert_eq(e, 3); /* error|warn|info|debug */
}
