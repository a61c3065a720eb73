/*
 * proto.h - the refit protocol's messages (engine-internal).
 *
 * Every engine message travels as ONE transport message (verbs/transport.h:
 * reliable, ordered, CRC32C-checked per hop) and starts with a fixed 40-byte
 * little-endian header:
 *
 *     off  size  field
 *       0     4  magic "DCEG"
 *       4     1  type (DC_MSG_*)
 *       5     1  flags (per type)
 *       6     2  reserved (0)
 *       8     8  version: the target version v the message is about
 *      16     8  baseline b (the delta's baseline; HELLO: committed version)
 *      24     4  node: the origin of an upward message, the destination of a
 *                downward one (DC_NODE_ALL = every receiver)
 *      28     4  chunk: first chunk index
 *      32     4  count: number of chunks (ACK), entries (per type)
 *      36     4  body length (bytes following the header)
 *
 *   down (root -> leaves, forwarded by relays):
 *     BEGIN   version v from baseline b: body = layout id (8), nchunks (4),
 *             mode (4: DELTA / DENSE), the baseline's checkpoint digest
 *             (16: b by content, from the coordinator's commit record; 0
 *             when it has none, e.g. the job's initial version).  v's own
 *             digest is not known up front: each frame carries its chunk's
 *             target digest, so the root can send chunk 0 before chunk 1 is
 *             read, and COMMIT carries v's checkpoint digest.
 *     FRAME   one chunk: body = the codec frame; flags = DC_FRAME_F_*.
 *     COMMIT  v is committed (joint commit done): the new baseline.  body =
 *             the checkpoint digest of v (16: what v is, by content; the
 *             receivers' commit records keep it) and, in a COMMIT addressed
 *             to one node that does not have v in flight (a node confirming
 *             the committed version, e.g. after a coordinator restart), the
 *             content hash of v over the chunks that node needs (16;
 *             dc_journal_content over the coordinator's target digests; 0
 *             otherwise).  The node commits v from its journal only when
 *             its journal's own content hash is that one.
 *     ABORT   v is abandoned: return to b (or mark for dense refit).
 *     BYE     the job is over; close.  version = the version the job ended
 *             at (the coordinator's committed one), body = its checkpoint
 *             digest (16): a receiver that holds anything else exits with
 *             an error.
 *     SUBOK   a parent took a child's SUB (chunk = the SUB's chunk field, the
 *             child's plan generation); from then on it forwards the
 *             subscribed streams.  Link-local, not forwarded.
 *   up (receivers -> root, forwarded by relays):
 *     HELLO   first message on a new edge: body = committed version (8),
 *             journal target (8), journal baseline (8), layout id (8),
 *             flags (4), nstates (4), nstates journal state bytes.
 *     ACK     node applied and verified chunks [chunk, chunk + count).
 *             With DC_ACK_F_HOLDING and count 0: the node is alive and
 *             holds version v staged (its caller's dc_refit_receiver_hold):
 *             not silent, but bounded by the root's hold_timeout_ms.
 *     NEED    node needs chunks [chunk, chunk + count) again as OVERWRITES
 *             (verify failed, or they cannot take an XOR).
 *     STATE   a HELLO forwarded up by a relay (same body) so the root learns
 *             a (re)joining node's journal.
 *     DONE    node has taken COMMIT/ABORT of v (flags DC_DONE_F_*: dense
 *             needed, its local commit failed, it does not hold v);
 *             baseline = its committed version, body = apply time, bytes
 *             received and up parent of v (DC_DONE_BODY), then up to
 *             DC_DONE_MAX_LINKS (parent, bytes from it) entries.
 *     SUB     first message of a child on every parent link, again when the
 *             child re-plans: node = the child, chunk = its plan generation
 *             (echoed in SUBOK), count = n, body = n stream
 *             ids (u32): the broadcast streams it takes on this link (a
 *             relay forwards a broadcast frame only to the children that
 *             subscribed to its chunk's stream).  Not forwarded.
 *     SENT    a sender other than the coordinator has encoded and queued
 *             every chunk it owns of version v: body = count entries of
 *             (chunk u32, target digest 16), split over several messages
 *             (flags DC_SENT_F_LAST on the last), for the checkpoint digest
 *             and the coordinator's stall detection; the header's baseline
 *             field carries the sender's payload bytes of v instead.
 *     FAIL    a receiver cannot take version v and stops (DC_FAIL_* in the
 *             chunk field: its layout differs, its disk or memory failed,
 *             ...): the root fails v at once, naming the node and the
 *             reason, instead of waiting abort_ms for a silent node.
 *             baseline = the node's chunk size, count = n tensor entries;
 *             body = reason length (4, <= DC_FAIL_TEXT_MAX), the node's
 *             tensor count (4), the reason (text, not NUL-terminated), then
 *             n entries (DC_FAIL_ENTRY: XXH3-64 of the name 8, element
 *             count 8, dtype 4) of its first tensors (n <= DC_FAIL_MAX_TENSORS;
 *             0 unless the layout differs) for the root to name the first
 *             tensor that differs.  A receiver that could not start
 *             (DC_FAIL_START: weights file, state directory) sends it on
 *             the link it dialled to attach, in place of its HELLO
 *             (version 0, no entries): the root stops waiting for it.
 *
 * Every field of a received message is hostile: dc_msg_parse() checks the
 * magic, type, body length against the message length, and each body
 * parser (dc_begin_parse, dc_hello_parse, dc_commit_msg_parse,
 * dc_bye_parse, dc_sub_parse, dc_sent_parse, dc_done_parse, dc_fail_parse:
 * pure functions,
 * fuzzed by tests/fuzz/fuzz_wire.c) checks its own sizes; what they accept
 * the engine still checks against its state (node ids, chunk indices,
 * stream ids).
 */
#ifndef DC_ENGINE_PROTO_H
#define DC_ENGINE_PROTO_H

#include "kernels/kern.h"
#include "util/dc_util.h"

#define DC_MSG_HDR_SIZE 40
#define DC_MSG_MAGIC 0x47454344u /* "DCEG" little-endian */
#define DC_NODE_ALL 0xffffffffu
#define DC_NODE_ROOT 0u
#define DC_MAX_CHUNKS (1u << 26)

enum {
    DC_MSG_BEGIN = 1,
    DC_MSG_FRAME = 2,
    DC_MSG_COMMIT = 3,
    DC_MSG_ABORT = 4,
    DC_MSG_BYE = 5,
    DC_MSG_SUBOK = 6,
    DC_MSG_HELLO = 16,
    DC_MSG_ACK = 17,
    DC_MSG_NEED = 18,
    DC_MSG_STATE = 19,
    DC_MSG_DONE = 20,
    DC_MSG_SUB = 21,
    DC_MSG_SENT = 22,
    DC_MSG_FAIL = 23,
};

/* SUB: node = the child, count = n stream ids, body = count x u32 */
#define DC_SUB_MAX 65536u
/* SENT: node = the sender, version, count entries of DC_SENT_ENTRY bytes
 * (chunk u32, target digest 16); flags DC_SENT_F_LAST on the last one */
#define DC_SENT_ENTRY 20u
enum { DC_SENT_F_LAST = 1 };

/* FRAME flags */
enum {
    DC_FRAME_F_OVERWRITE = 1, /* payload is an overwrite (else XOR) */
    DC_FRAME_F_RETRY = 2,     /* addressed re-send (repair / rejoin) */
};

/* DONE flags */
enum {
    DC_DONE_F_DENSE = 1,    /* its bytes are unknown: marked for a dense refit */
    DC_DONE_F_FAILED = 2,   /* COMMIT: its local commit (record write) failed */
    DC_DONE_F_NOT_HELD = 4, /* COMMIT: it cannot show it holds that version */
};

/* ACK flags */
enum { DC_ACK_F_HOLDING = 1 /* count 0: holding v staged, not applied (alive) */ };

/* NEED flags (coordinator -> the sender owning the chunk: re-send it) */
enum { DC_NEED_F_OVERWRITE = 1 };

/* BEGIN modes */
enum {
    DC_MODE_DELTA = 0, /* XOR/overwrite chunks against the baseline */
    DC_MODE_DENSE = 1, /* every chunk an overwrite (dense refit) */
};

/* HELLO flags */
enum {
    DC_HELLO_F_RELAY = 1,       /* the node forwards to children */
    DC_HELLO_F_DENSE_NEEDED = 2, /* its bytes are unknown: needs a dense refit */
    DC_HELLO_F_JOURNAL = 4,     /* a journal for an in-flight version follows */
    DC_HELLO_F_SENDER = 8,      /* a sender's control link to the coordinator */
};

typedef struct dc_msg {
    uint8_t type;
    uint8_t flags;
    uint64_t version;
    uint64_t baseline;
    uint32_t node;
    uint32_t chunk;
    uint32_t count;
    uint32_t body_len;
    const uint8_t *body; /* points into the parsed buffer */
} dc_msg_t;

/** Write a header for `m` (body_len must be set) into out[40]. */
void dc_msg_pack(const dc_msg_t *m, uint8_t out[DC_MSG_HDR_SIZE]);
/** Parse a received message of `len` bytes (hostile). */
dc_status_t dc_msg_parse(const uint8_t *buf, size_t len, dc_msg_t *out);
const char *dc_msg_type_name(uint8_t type);

/* --- BEGIN ----------------------------------------------------------------- */

typedef struct dc_begin {
    uint64_t version, baseline, layout_id;
    uint32_t nchunks, mode;
    dc_digest_t base_ckpt; /* the baseline's checkpoint digest (0: unknown) */
} dc_begin_t;

#define DC_BEGIN_FIXED 32
#define DC_BEGIN_SIZE (DC_MSG_HDR_SIZE + DC_BEGIN_FIXED)
/** Build a whole BEGIN message into out (DC_BEGIN_SIZE bytes). */
void dc_begin_pack(const dc_begin_t *b, uint8_t out[DC_BEGIN_SIZE]);
dc_status_t dc_begin_parse(const dc_msg_t *m, dc_begin_t *out);

/* --- HELLO / STATE ------------------------------------------------------- */

typedef struct dc_hello {
    uint32_t node;
    uint64_t committed;     /* the node's committed (baseline) version */
    uint64_t j_target;      /* journal's version (0: none) */
    uint64_t j_baseline;
    uint64_t layout_id;
    uint32_t flags;         /* DC_HELLO_F_* */
    uint32_t nstates;
    const uint8_t *states;  /* nstates journal state bytes */
} dc_hello_t;

#define DC_HELLO_FIXED 40
size_t dc_hello_size(uint32_t nstates);
/** type is DC_MSG_HELLO or DC_MSG_STATE. */
void dc_hello_pack(uint8_t type, const dc_hello_t *h, uint8_t *out);
dc_status_t dc_hello_parse(const dc_msg_t *m, dc_hello_t *out);

/* --- COMMIT / BYE ------------------------------------------------------------- */

#define DC_COMMIT_BODY 32
#define DC_BYE_BODY 16

typedef struct dc_commit_msg {
    dc_digest_t ckpt;     /* checkpoint digest of the version */
    dc_digest_t content;  /* addressed: the node's content hash of it (0: none) */
} dc_commit_msg_t;

/** COMMIT of version v from baseline b to `node` (DC_NODE_ALL or one node)
 *  into out (DC_MSG_HDR_SIZE + DC_COMMIT_BODY bytes). */
void dc_commit_msg_pack(uint64_t v, uint64_t b, uint32_t node, const dc_commit_msg_t *c,
                        uint8_t *out);
dc_status_t dc_commit_msg_parse(const dc_msg_t *m, dc_commit_msg_t *out);
/** BYE: the job ended at version v, of checkpoint digest ckpt. */
void dc_bye_pack(uint64_t v, dc_digest_t ckpt, uint8_t *out);
dc_status_t dc_bye_parse(const dc_msg_t *m, dc_digest_t *ckpt);

/* --- SUB ------------------------------------------------------------------ */

typedef struct dc_sub {
    uint32_t node;          /* the child */
    uint32_t gen;           /* its plan generation (echoed in SUBOK) */
    uint32_t nstreams;      /* <= DC_SUB_MAX */
    const uint8_t *streams; /* nstreams u32 (dc_sub_stream), into the message */
} dc_sub_t;

size_t dc_sub_size(uint32_t nstreams);
/** SUB of child `node`, plan generation `gen`, taking streams[0..n) into
 *  out (dc_sub_size(n) bytes). */
void dc_sub_pack(uint32_t node, uint32_t gen, const uint32_t *streams, uint32_t n, uint8_t *out);
dc_status_t dc_sub_parse(const dc_msg_t *m, dc_sub_t *out);
/** Stream id k < s->nstreams of a parsed SUB (any value: the caller checks
 *  it against its plan). */
uint32_t dc_sub_stream(const dc_sub_t *s, uint32_t k);

/* --- SENT ----------------------------------------------------------------- */

typedef struct dc_sent {
    uint32_t node; /* the sender */
    uint64_t version;
    uint64_t payload_bytes; /* the sender's payload bytes of v (header's baseline) */
    int last;               /* DC_SENT_F_LAST: the sender's last SENT of v */
    uint32_t n;             /* entries, <= DC_MAX_CHUNKS */
    const uint8_t *entries; /* n x DC_SENT_ENTRY bytes (dc_sent_entry), into the message */
} dc_sent_t;

size_t dc_sent_size(uint32_t n);
/** The header of a SENT with n entries into out (dc_sent_size(n) bytes);
 *  then dc_sent_put() fills each entry. */
void dc_sent_pack(const dc_sent_t *s, uint8_t *out);
void dc_sent_put(uint8_t *out, uint32_t e, uint32_t chunk, dc_digest_t target);
dc_status_t dc_sent_parse(const dc_msg_t *m, dc_sent_t *out);
/** Entry e < s->n of a parsed SENT (the chunk is any value: the caller
 *  checks it against its layout). */
void dc_sent_entry(const dc_sent_t *s, uint32_t e, uint32_t *chunk, dc_digest_t *target);

/* --- DONE ----------------------------------------------------------------- */

/* body = apply time ns (8), bytes received (8), up parent (4), reserved (12),
 * then per parent link of this version: parent (4), bytes from it (8) */
#define DC_DONE_BODY      32
#define DC_DONE_LINK      12
#define DC_DONE_MAX_LINKS 8

typedef struct dc_done {
    uint32_t node;
    uint8_t flags;      /* DC_DONE_F_* */
    uint64_t version;   /* the version whose COMMIT/ABORT it took */
    uint64_t committed; /* the node's committed version (header's baseline) */
    uint64_t apply_ns, bytes;
    uint32_t up_parent;
    uint32_t nlinks; /* <= DC_DONE_MAX_LINKS */
    uint32_t link_parent[DC_DONE_MAX_LINKS];
    uint64_t link_bytes[DC_DONE_MAX_LINKS];
} dc_done_t;

size_t dc_done_size(uint32_t nlinks);
/** The whole DONE into out (dc_done_size(d->nlinks) bytes). */
void dc_done_pack(const dc_done_t *d, uint8_t *out);
dc_status_t dc_done_parse(const dc_msg_t *m, dc_done_t *out);

/* --- FAIL ---------------------------------------------------------------- */

/* FAIL reasons (the header's chunk field) */
enum {
    DC_FAIL_LAYOUT = 1,  /* its layout (tensors, dtypes, shapes, chunk size) differs */
    DC_FAIL_IO = 2,      /* its journal, record or weights file failed (a full disk) */
    DC_FAIL_MEMORY = 3,  /* its weights' memory failed (a CUDA error) */
    DC_FAIL_VERSION = 4, /* it cannot take this version or baseline */
    DC_FAIL_START = 5,   /* it could not start (weights file, state directory): sent
                            before it joins, version 0, no entries (engine/early.c) */
    DC_FAIL_MAX = 5,
};
#define DC_FAIL_TEXT_MAX 1024u
#define DC_FAIL_MAX_TENSORS 65536u
#define DC_FAIL_FIXED 8u
#define DC_FAIL_ENTRY 20u

typedef struct dc_fail {
    uint32_t node;
    uint32_t code;          /* DC_FAIL_* */
    uint64_t version;
    uint64_t chunk_size;    /* the node's */
    uint32_t ntensors;      /* the node's tensor count */
    uint32_t text_len;      /* <= DC_FAIL_TEXT_MAX */
    const uint8_t *text;    /* into the message: hostile bytes, see dc_fail_text */
    uint32_t n;             /* entries, <= DC_FAIL_MAX_TENSORS and <= ntensors */
    const uint8_t *entries; /* n x DC_FAIL_ENTRY, into the message */
} dc_fail_t;

size_t dc_fail_size(uint32_t text_len, uint32_t n);
/** The header, sizes and text of a FAIL into out (dc_fail_size(f->text_len,
 *  f->n) bytes; f->text_len <= DC_FAIL_TEXT_MAX, f->n <= DC_FAIL_MAX_TENSORS);
 *  then dc_fail_put() fills each entry. */
void dc_fail_pack(const dc_fail_t *f, uint8_t *out);
void dc_fail_put(uint8_t *out, uint32_t text_len, uint32_t e, uint64_t name_hash,
                 uint64_t nelems, uint32_t dtype);
dc_status_t dc_fail_parse(const dc_msg_t *m, dc_fail_t *out);
/** Entry e < f->n of a parsed FAIL (zeros past the end). */
void dc_fail_entry(const dc_fail_t *f, uint32_t e, uint64_t *name_hash, uint64_t *nelems,
                   uint32_t *dtype);
/** The reason as printable text into out (len >= 1): bytes outside
 *  0x20..0x7e become '?'. */
void dc_fail_text(const dc_fail_t *f, char *out, size_t len);
const char *dc_fail_code_name(uint32_t code);

/** A header-only message (ACK, NEED, ABORT, DONE) into out[40]. */
void dc_msg_simple(uint8_t type, uint8_t flags, uint64_t version, uint64_t baseline,
                   uint32_t node, uint32_t chunk, uint32_t count, uint8_t out[DC_MSG_HDR_SIZE]);

#endif /* DC_ENGINE_PROTO_H */
