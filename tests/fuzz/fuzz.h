/*
 * fuzz.h - what every fuzz target shares, in its libFuzzer build and in its
 * replay driver: the oracle's CHECK (abort with the target's name and the
 * failed condition), the check that a failing call failed cleanly, and the
 * count of accepted inputs that the replay summary prints.
 *
 * A target defines DC_FUZZ_NAME ("fuzz_x") before including this.
 */
#ifndef DC_TESTS_FUZZ_H
#define DC_TESTS_FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "util/dc_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c)                                                                              \
    do {                                                                                      \
        if (!(c)) {                                                                           \
            fprintf(stderr, DC_FUZZ_NAME ": %s:%d: check failed: %s\n", __FILE__, __LINE__,  \
                    #c);                                                                      \
            abort();                                                                          \
        }                                                                                     \
    } while (0)

/* inputs the target accepted (parsed, decoded, ...): the replay summary */
static unsigned long fuzz_accepted __attribute__((unused));

/* The library's log down to errors, once: the first thing a target's
 * LLVMFuzzerTestOneInput does (libFuzzer runs it without our main()). */
static inline void dc_fuzz_quiet(void)
{
    static int quiet;
    if (!quiet) {
        dc_log_set_level(DC_LOG_LEVEL_ERROR);
        quiet = 1;
    }
}

/* A call that failed left a status and a detail message. */
static inline void failed_cleanly(dc_status_t st)
{
    CHECK(st != DC_OK && dc_last_status() != DC_OK && *dc_last_error());
}

#endif
