/*
 * tcp_hs.h - the four handshake messages of the tcp transport (see tcp.c),
 * as pure functions: pack a struct into its fixed-size bytes, parse bytes
 * (the peer's, unauthenticated until the MAC is verified) into a struct
 * with their length, magic, version and value checks.  No I/O, no state:
 * tcp.c (client) and tcp_listen.c (server) do the sockets, and
 * tests/fuzz/fuzz_handshake.c feeds the parsers hostile bytes.
 *
 *   HELLO  c->s  "DCTH" ver Nc                      40 bytes
 *   CHAL   s->c  "DCTH" ver Ns HMAC_S               72 bytes
 *   PROOF  c->s  HMAC_C S epoch i K max_msg rsv rbase  64 bytes
 *   OK     s->c  "DCTH" status S rbase              24 bytes
 *
 * All integers little-endian.  A parse error is DC_ERR_FORMAT with a detail
 * naming `peer` and what was wrong; the struct is then untouched.
 */
#ifndef DC_VERBS_TCP_HS_H
#define DC_VERBS_TCP_HS_H

#include "verbs/auth.h"

#define DC_TCP_MAGIC       0x48544344u /* "DCTH" */
#define DC_TCP_VERSION     1u
#define DC_TCP_HELLO       40
#define DC_TCP_CHAL        72
#define DC_TCP_PROOF       64
#define DC_TCP_OK          24
#define DC_TCP_MAX_STREAMS 64

/* OK status codes */
enum {
    DC_TCP_OK_ACCEPT = 0,
    DC_TCP_OK_AUTH = 1,
    DC_TCP_OK_UNKNOWN = 2,
    DC_TCP_OK_STALE = 3,
    DC_TCP_OK_BAD = 4
};

typedef struct dc_tcp_hello {
    uint8_t nc[DC_AUTH_NONCE_SIZE]; /* client nonce */
} dc_tcp_hello_t;

typedef struct dc_tcp_chal {
    uint8_t ns[DC_AUTH_NONCE_SIZE]; /* server nonce */
    uint8_t mac[DC_AUTH_MAC_SIZE];  /* the server's proof (HMAC role 'S') */
} dc_tcp_chal_t;

typedef struct dc_tcp_proof {
    uint8_t mac[DC_AUTH_MAC_SIZE]; /* the client's proof (HMAC role 'C') */
    uint64_t session;
    uint32_t epoch;
    uint32_t idx, nstreams; /* stream idx of nstreams (u16 on the wire) */
    uint32_t max_msg;       /* the client's largest message */
    uint32_t reserved;      /* bytes 52..55: 0 from this version, not checked */
    uint64_t rbase;         /* the client's receive low-water mark */
} dc_tcp_proof_t;

typedef struct dc_tcp_okmsg {
    uint32_t code; /* DC_TCP_OK_* */
    uint64_t session;
    uint64_t rbase; /* the server's receive low-water mark */
} dc_tcp_okmsg_t;

void dc_tcp_hello_pack(const dc_tcp_hello_t *m, uint8_t out[DC_TCP_HELLO]);
void dc_tcp_chal_pack(const dc_tcp_chal_t *m, uint8_t out[DC_TCP_CHAL]);
void dc_tcp_proof_pack(const dc_tcp_proof_t *m, uint8_t out[DC_TCP_PROOF]);
void dc_tcp_ok_pack(const dc_tcp_okmsg_t *m, uint8_t out[DC_TCP_OK]);

/** HELLO: n == DC_TCP_HELLO, magic, version. */
dc_status_t dc_tcp_hello_parse(const uint8_t *b, size_t n, const char *peer, dc_tcp_hello_t *out);
/** CHAL: n == DC_TCP_CHAL, magic, version (the MAC is the caller's to verify). */
dc_status_t dc_tcp_chal_parse(const uint8_t *b, size_t n, const char *peer, dc_tcp_chal_t *out);
/** PROOF: n == DC_TCP_PROOF; 1 <= nstreams <= DC_TCP_MAX_STREAMS, idx <
 *  nstreams, max_msg > 0.  Verify out->mac before trusting any field. */
dc_status_t dc_tcp_proof_parse(const uint8_t *b, size_t n, const char *peer, dc_tcp_proof_t *out);
/** OK: n == DC_TCP_OK, magic, code <= DC_TCP_OK_BAD. */
dc_status_t dc_tcp_ok_parse(const uint8_t *b, size_t n, const char *peer, dc_tcp_okmsg_t *out);

#endif /* DC_VERBS_TCP_HS_H */
