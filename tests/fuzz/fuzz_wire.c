/*
 * fuzz_wire.c - fuzz target for the small fixed formats that arrive from a
 * peer or from disk: engine messages (proto.h), transport headers
 * (transport.h), commit records (commit.h) and receiver journals
 * (journal.h).
 *
 * Input byte 0 selects the format; byte 1 holds flags; the rest is the
 * bytes:
 *   0: an engine message: dc_msg_parse, then its body parser:
 *      dc_begin_parse (BEGIN), dc_hello_parse (HELLO / STATE),
 *      dc_commit_msg_parse (COMMIT), dc_bye_parse (BYE), dc_sub_parse
 *      (SUB), dc_sent_parse (SENT), dc_done_parse (DONE), dc_fail_parse
 *      (FAIL: the reason text printed as text, its tensor entries);
 *   1: a 32-byte transport header, dc_verbs_hdr_unpack (the next 4 bytes,
 *      if any, are max_len);
 *   2: a 64-byte commit record, dc_commit_decode;
 *   3: a journal file (written to a private directory), dc_journal_load,
 *      and when it loads, dc_journal_open of the same journal (a resume).
 * Flag bit 0 of byte 1 (formats 1-3) first makes the input's checksum
 * right (the header's CRC32C, the record's or journal header's XXH3-64), so
 * that mutations reach the field checks behind it.
 * Oracle: no crash / sanitizer report; a failing call leaves a status and
 * a detail message; what parses packs back to the same bytes (reserved
 * fields aside) and decodes to values the format allows.
 *
 * Builds as the other targets (tests/fuzz/meson.build): fuzz_wire_replay
 * (any compiler, -DDC_FUZZ_REPLAY) runs a corpus directory plus
 * deterministic mutations; fuzz_wire is the libFuzzer binary.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#define DC_FUZZ_NAME "fuzz_wire"
#include "fuzz.h"

#include "engine/commit.h"
#include "engine/journal.h"
#include "engine/proto.h"
#include "kernels/kern.h"
#include "verbs/transport.h"

static void fuzz_msg(const uint8_t *b, size_t n)
{
    dc_msg_t m;
    dc_status_t st = dc_msg_parse(b, n, &m);
    if (st != DC_OK) {
        failed_cleanly(st);
        return;
    }
    fuzz_accepted++;
    CHECK(m.body == b + DC_MSG_HDR_SIZE && (size_t)m.body_len + DC_MSG_HDR_SIZE == n);
    CHECK(dc_msg_type_name(m.type)[0] != '?');
    /* the header packs back to the same bytes (6..7 are reserved) */
    uint8_t h[DC_MSG_HDR_SIZE];
    dc_msg_pack(&m, h);
    CHECK(memcmp(h, b, 6) == 0 && memcmp(h + 8, b + 8, DC_MSG_HDR_SIZE - 8) == 0);
    if (m.type == DC_MSG_BEGIN) {
        dc_begin_t bg;
        if ((st = dc_begin_parse(&m, &bg)) != DC_OK) {
            failed_cleanly(st);
            return;
        }
        CHECK(bg.baseline < bg.version && bg.nchunks <= DC_MAX_CHUNKS);
        CHECK(bg.mode == DC_MODE_DELTA || bg.mode == DC_MODE_DENSE);
        uint8_t out[DC_BEGIN_SIZE];
        dc_begin_pack(&bg, out);
        CHECK(n == DC_BEGIN_SIZE && memcmp(out + DC_MSG_HDR_SIZE, m.body, DC_BEGIN_FIXED) == 0);
    } else if (m.type == DC_MSG_HELLO || m.type == DC_MSG_STATE) {
        dc_hello_t hl;
        if ((st = dc_hello_parse(&m, &hl)) != DC_OK) {
            failed_cleanly(st);
            return;
        }
        CHECK(hl.node != DC_NODE_ALL && hl.nstates <= DC_MAX_CHUNKS);
        CHECK(dc_hello_size(hl.nstates) == n);
        for (uint32_t i = 0; i < hl.nstates; i++)
            CHECK(hl.states[i] <= DC_JSTATE_APPLIED);
        uint8_t *out = malloc(n);
        CHECK(out);
        dc_hello_pack(m.type, &hl, out);
        CHECK(memcmp(out + DC_MSG_HDR_SIZE, m.body, m.body_len) == 0);
        free(out);
    } else if (m.type == DC_MSG_COMMIT) {
        dc_commit_msg_t cm;
        if ((st = dc_commit_msg_parse(&m, &cm)) != DC_OK) {
            failed_cleanly(st);
            return;
        }
        uint8_t out[DC_MSG_HDR_SIZE + DC_COMMIT_BODY];
        dc_commit_msg_pack(m.version, m.baseline, m.node, &cm, out);
        CHECK(n == sizeof(out) && memcmp(out + DC_MSG_HDR_SIZE, m.body, DC_COMMIT_BODY) == 0);
    } else if (m.type == DC_MSG_BYE) {
        dc_digest_t ck;
        if ((st = dc_bye_parse(&m, &ck)) != DC_OK) {
            failed_cleanly(st);
            return;
        }
        uint8_t out[DC_MSG_HDR_SIZE + DC_BYE_BODY];
        dc_bye_pack(m.version, ck, out);
        CHECK(n == sizeof(out) && memcmp(out + DC_MSG_HDR_SIZE, m.body, DC_BYE_BODY) == 0);
    } else if (m.type == DC_MSG_SUB) {
        dc_sub_t sb;
        if ((st = dc_sub_parse(&m, &sb)) != DC_OK) {
            failed_cleanly(st);
            return;
        }
        CHECK(sb.nstreams <= DC_SUB_MAX && dc_sub_size(sb.nstreams) == n);
        uint32_t *ids = malloc(4 * (size_t)sb.nstreams + 4);
        CHECK(ids);
        for (uint32_t k = 0; k < sb.nstreams; k++)
            ids[k] = dc_sub_stream(&sb, k);
        CHECK(dc_sub_stream(&sb, sb.nstreams) == UINT32_MAX);
        uint8_t *out = malloc(n);
        CHECK(out);
        dc_sub_pack(sb.node, sb.gen, ids, sb.nstreams, out);
        /* flags, version, baseline: not SUB's fields (packed as 0) */
        CHECK(memcmp(out, b, 5) == 0 && memcmp(out + 24, b + 24, n - 24) == 0);
        free(out);
        free(ids);
    } else if (m.type == DC_MSG_SENT) {
        dc_sent_t se;
        if ((st = dc_sent_parse(&m, &se)) != DC_OK) {
            failed_cleanly(st);
            return;
        }
        CHECK(se.n <= DC_MAX_CHUNKS && dc_sent_size(se.n) == n);
        uint8_t *out = malloc(n);
        CHECK(out);
        dc_sent_pack(&se, out);
        for (uint32_t e = 0; e < se.n; e++) {
            uint32_t c;
            dc_digest_t d;
            dc_sent_entry(&se, e, &c, &d);
            dc_sent_put(out, e, c, d);
        }
        /* flags other than DC_SENT_F_LAST and the chunk field are not SENT's */
        CHECK(memcmp(out, b, 5) == 0 && (out[5] == (b[5] & DC_SENT_F_LAST)) &&
              memcmp(out + 8, b + 8, 20) == 0 && memcmp(out + 32, b + 32, n - 32) == 0);
        free(out);
    } else if (m.type == DC_MSG_FAIL) {
        dc_fail_t fl;
        if ((st = dc_fail_parse(&m, &fl)) != DC_OK) {
            failed_cleanly(st);
            return;
        }
        CHECK(fl.text_len <= DC_FAIL_TEXT_MAX && fl.n <= DC_FAIL_MAX_TENSORS &&
              fl.n <= fl.ntensors && fl.code >= 1 && fl.code <= DC_FAIL_MAX &&
              dc_fail_size(fl.text_len, fl.n) == n);
        CHECK(dc_fail_code_name(fl.code)[0] != 0);
        /* the reason as the root logs it: printable, bounded */
        char text[DC_FAIL_TEXT_MAX + 1];
        dc_fail_text(&fl, text, sizeof(text));
        CHECK(strlen(text) == fl.text_len);
        for (size_t i = 0; text[i]; i++)
            CHECK(text[i] >= 0x20 && text[i] < 0x7f);
        char small[8];
        dc_fail_text(&fl, small, sizeof(small));
        CHECK(strlen(small) == DC_MIN(fl.text_len, sizeof(small) - 1));
        uint8_t *out = malloc(n);
        CHECK(out);
        dc_fail_pack(&fl, out);
        for (uint32_t e = 0; e < fl.n; e++) {
            uint64_t nh, ne;
            uint32_t dt;
            dc_fail_entry(&fl, e, &nh, &ne, &dt);
            dc_fail_put(out, fl.text_len, e, nh, ne, dt);
        }
        /* the flags are not FAIL's (packed as 0) */
        CHECK(memcmp(out, b, 5) == 0 && out[5] == 0 &&
              memcmp(out + 8, b + 8, n - 8) == 0);
        free(out);
    } else if (m.type == DC_MSG_DONE) {
        dc_done_t dn;
        if ((st = dc_done_parse(&m, &dn)) != DC_OK) {
            failed_cleanly(st);
            return;
        }
        CHECK(dn.nlinks <= DC_DONE_MAX_LINKS && dc_done_size(dn.nlinks) == n);
        uint8_t out[DC_MSG_HDR_SIZE + DC_DONE_BODY + DC_DONE_MAX_LINKS * DC_DONE_LINK];
        dc_done_pack(&dn, out);
        /* the chunk and count fields and bytes 20..31 of the body are
         * not DONE's (packed as 0) */
        CHECK(memcmp(out, b, 6) == 0 && memcmp(out + 8, b + 8, 20) == 0 &&
              memcmp(out + 36, b + 36, 4) == 0 && memcmp(out + DC_MSG_HDR_SIZE, m.body, 20) == 0 &&
              memcmp(out + DC_MSG_HDR_SIZE + DC_DONE_BODY, m.body + DC_DONE_BODY,
                     n - DC_MSG_HDR_SIZE - DC_DONE_BODY) == 0);
    }
}

static void fuzz_hdr(const uint8_t *b, size_t n, int fix)
{
    if (n < DC_VERBS_HDR_SIZE)
        return;
    uint8_t in[DC_VERBS_HDR_SIZE];
    memcpy(in, b, sizeof(in));
    if (fix)
        dc_store_le32(in + 24, dc_crc32c(0, in, 24));
    uint64_t max_len = n >= DC_VERBS_HDR_SIZE + 4 ? dc_load_le32(b + DC_VERBS_HDR_SIZE)
                                                  : UINT32_MAX;
    dc_verbs_hdr_t h;
    dc_status_t st = dc_verbs_hdr_unpack(in, max_len, &h);
    if (st != DC_OK) {
        failed_cleanly(st);
        return;
    }
    fuzz_accepted++;
    CHECK(h.type >= DC_VERBS_MSG_DATA && h.type <= DC_VERBS_MSG_BYE && h.len <= max_len);
    CHECK(h.type == DC_VERBS_MSG_DATA || (h.flags == 0 && h.len == 0));
    uint8_t out[DC_VERBS_HDR_SIZE];
    dc_verbs_hdr_pack(&h, out);
    CHECK(memcmp(out, in, 28) == 0);
}

static void fuzz_commit(const uint8_t *b, size_t n, int fix)
{
    uint8_t *in = malloc(n ? n : 1);
    CHECK(in);
    memcpy(in, b, n);
    if (fix && n == DC_COMMIT_RECORD_SIZE)
        dc_store_le64(in + 56, XXH3_64bits(in, 56));
    dc_commit_rec_t r;
    dc_status_t st = dc_commit_decode(in, n, "fuzz", &r);
    if (st != DC_OK) {
        failed_cleanly(st);
    } else {
        fuzz_accepted++;
        CHECK(r.version == 0 || r.baseline < r.version);
        uint8_t out[DC_COMMIT_RECORD_SIZE];
        dc_commit_encode(&r, out);
        dc_commit_rec_t r2;
        CHECK(dc_commit_decode(out, sizeof(out), "fuzz", &r2) == DC_OK);
        CHECK(memcmp(&r, &r2, sizeof(r)) == 0);
    }
    free(in);
}

/* One private directory per process, for the journal file (removed at
 * exit). */
static char fuzz_dir_name[64];

static void fuzz_dir_remove(void)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/%s", fuzz_dir_name, DC_JOURNAL_FILE);
    unlink(path);
    rmdir(fuzz_dir_name);
}

static const char *fuzz_dir(void)
{
    if (!fuzz_dir_name[0]) {
        snprintf(fuzz_dir_name, sizeof(fuzz_dir_name), "/tmp/dc-fuzz-wire-XXXXXX");
        CHECK(mkdtemp(fuzz_dir_name) != NULL);
        atexit(fuzz_dir_remove);
    }
    return fuzz_dir_name;
}

static void fuzz_journal(const uint8_t *b, size_t n, int fix)
{
    /* Far larger files would only cost time: the states are one byte each. */
    if (n > (1u << 20))
        return;
    const char *dir = fuzz_dir();
    char path[128];
    snprintf(path, sizeof(path), "%s/%s", dir, DC_JOURNAL_FILE);
    uint8_t *in = malloc(n ? n : 1);
    CHECK(in);
    memcpy(in, b, n);
    if (fix && n >= DC_JOURNAL_HEADER_SIZE) {
        dc_store_le32(in + 8, DC_JOURNAL_FORMAT);
        dc_store_le64(in + 56, XXH3_64bits(in, 56));
    }
    FILE *fp = fopen(path, "wb");
    CHECK(fp && fwrite(in, 1, n, fp) == n && fclose(fp) == 0);
    dc_journal_info_t info;
    uint8_t *states = NULL;
    dc_digest_t *digests = NULL;
    dc_status_t st = dc_journal_load(dir, &info, &states, &digests);
    if (st != DC_OK) {
        failed_cleanly(st);
    } else {
        fuzz_accepted++;
        CHECK(info.nchunks * DC_JOURNAL_PER_CHUNK == n - DC_JOURNAL_HEADER_SIZE);
        for (uint64_t i = 0; i < info.nchunks; i++)
            CHECK(states[i] <= DC_JSTATE_APPLIED &&
                  (states[i] != DC_JSTATE_APPLIED || !dc_digest_zero(digests[i])));
        /* the same journal resumes, with the same states */
        dc_journal_t *j = NULL;
        int resumed = 0;
        st = dc_journal_open(dir, &info, 0, 1, &j, &resumed);
        CHECK(st == DC_OK && resumed == 1);
        for (uint64_t i = 0; i < info.nchunks; i++)
            CHECK(dc_journal_state(j, i) == states[i] &&
                  (states[i] != DC_JSTATE_APPLIED ||
                   dc_digest_eq(dc_journal_digest(j, i), digests[i])));
        dc_journal_close(j);
        free(states);
        free(digests);
    }
    free(in);
    unlink(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dc_fuzz_quiet();
    if (size < 2)
        return 0;
    int fix = data[1] & 1;
    const uint8_t *b = data + 2;
    size_t n = size - 2;
    switch (data[0] % 4) {
    case 0: fuzz_msg(b, n); break;
    case 1: fuzz_hdr(b, n, fix); break;
    case 2: fuzz_commit(b, n, fix); break;
    default: fuzz_journal(b, n, fix); break;
    }
    return 0;
}

#ifdef DC_FUZZ_REPLAY
#define DC_FUZZ_SEED 0x9b1c6f3e2d5a4871ULL
#include "replay.h"

/* One deterministic mutation (bytes 0-1, the format and flags, are kept):
 * flip a bit, set a byte to 0 / 0xff / a small value, insert, delete,
 * truncate, or overwrite a 4-byte field with a boundary value. */
static size_t mutate(uint8_t *b, size_t len, size_t cap)
{
    if (len < 3)
        return len;
    size_t at = 2 + (size_t)(rng() % (len - 2));
    static const uint32_t edge[] = {0, 1, 2, 3, 0x7fffffffu, 0x80000000u, 0xffffffffu,
                                    DC_MAX_CHUNKS, DC_MAX_CHUNKS + 1, DC_SUB_MAX + 1};
    unsigned op = (unsigned)(rng() % 7);
    /* no 2-byte values: op 6 is the 4-byte one */
    return dc_fuzz_mutate_at(b, len, cap, at, op == 6 ? 7 : op, 24, edge, DC_ARRAY_SIZE(edge));
}

int main(int argc, char **argv)
{
    return dc_fuzz_main(argc, argv, 64, 4, mutate, "accepted");
}
#endif
