/* test_struct.c - the one `size` rule of public structs that grow
 * (util/struct.c): older smaller structs accepted and defaulted, newer
 * larger ones accepted only when the fields we do not know are zero. */
#include "util/dc_util.h"

#include <criterion/criterion.h>
#include <stddef.h>

/* Version 1 had a and b; version 2 (this "library") added c. */
typedef struct {
    size_t size;
    uint32_t a;
    uint64_t b;
} v1_t;
typedef struct {
    size_t size;
    uint32_t a;
    uint64_t b;
    uint64_t c;
} v2_t;
typedef struct {
    size_t size;
    uint32_t a;
    uint64_t b;
    uint64_t c;
    uint64_t d; /* a newer caller's field */
} v3_t;

#define V1 offsetof(v2_t, c)

Test(struct_rule, older_smaller_struct_is_accepted_and_defaulted)
{
    v1_t old = {.size = sizeof(old), .a = 7, .b = 9};
    v2_t local;
    memset(&local, 0xAB, sizeof(local));
    cr_assert_eq(dc_struct_in(&local, sizeof(local), &old, V1, "test"), DC_OK, "%s",
                 dc_last_error());
    cr_assert_eq(local.size, sizeof(local));
    cr_assert_eq(local.a, 7);
    cr_assert_eq(local.b, 9);
    cr_assert_eq(local.c, 0); /* defaulted */
}

Test(struct_rule, current_struct_is_copied)
{
    v2_t in = {.size = sizeof(in), .a = 1, .b = 2, .c = 3}, local;
    cr_assert_eq(dc_struct_in(&local, sizeof(local), &in, V1, "test"), DC_OK);
    cr_assert_eq(memcmp(&in, &local, sizeof(in)), 0);
}

Test(struct_rule, newer_struct_with_zero_tail_is_accepted)
{
    v3_t in = {.size = sizeof(in), .a = 1, .b = 2, .c = 3, .d = 0};
    v2_t local;
    cr_assert_eq(dc_struct_in(&local, sizeof(local), &in, V1, "test"), DC_OK);
    cr_assert_eq(local.size, sizeof(local));
    cr_assert_eq(local.c, 3);
}

Test(struct_rule, newer_struct_with_nonzero_tail_is_refused)
{
    v3_t in = {.size = sizeof(in), .a = 1, .b = 2, .c = 3, .d = 42};
    v2_t local = {.size = 0};
    cr_assert_eq(dc_struct_in(&local, sizeof(local), &in, V1, "my options"),
                 DC_ERR_UNSUPPORTED);
    cr_assert(strstr(dc_last_error(), "my options"), "%s", dc_last_error());
    cr_assert(strstr(dc_last_error(), "newer"), "%s", dc_last_error());
    cr_assert_eq(local.size, 0); /* untouched */
}

Test(struct_rule, size_not_set_is_refused)
{
    v2_t in = {.size = 0, .a = 1};
    v2_t local;
    cr_assert_eq(dc_struct_in(&local, sizeof(local), &in, V1, "opts"), DC_ERR_INVALID);
    cr_assert(strstr(dc_last_error(), "size"), "%s", dc_last_error());
    in.size = V1 - 1;
    cr_assert_eq(dc_struct_check(&in, V1, sizeof(v2_t), "opts"), DC_ERR_INVALID);
    cr_assert_eq(dc_struct_check(NULL, V1, sizeof(v2_t), "opts"), DC_ERR_INVALID);
}

Test(struct_rule, output_written_only_as_far_as_the_caller_has_room)
{
    v2_t local = {.size = sizeof(local), .a = 1, .b = 2, .c = 3};
    struct {
        v1_t v;
        uint64_t guard;
    } old = {.v = {.size = sizeof(v1_t)}, .guard = 0x5555};
    cr_assert_eq(dc_struct_check(&old.v, V1, sizeof(v2_t), "out"), DC_OK);
    dc_struct_out(&old.v, &local, sizeof(local));
    cr_assert_eq(old.v.a, 1);
    cr_assert_eq(old.v.b, 2);
    cr_assert_eq(old.guard, 0x5555); /* nothing past the caller's struct */
    cr_assert_eq(old.v.size, sizeof(v1_t));

    v3_t newer = {.size = sizeof(newer)};
    cr_assert_eq(dc_struct_check(&newer, V1, sizeof(v2_t), "out"), DC_OK);
    dc_struct_out(&newer, &local, sizeof(local));
    cr_assert_eq(newer.c, 3);
    cr_assert_eq(newer.d, 0);
    cr_assert_eq(newer.size, sizeof(v2_t)); /* what this library filled */
}
