/*
 * auth.h - mutual authentication of a connection by the job secret.
 *
 * HMAC-SHA256 challenge-response (OpenSSL libcrypto).  Both sides prove that
 * they know the secret without sending it:
 *
 *   client -> server   client nonce Nc (32 random bytes)
 *   server -> client   server nonce Ns, Ms = HMAC(secret, "deltacast-auth-v1" 'S' Nc Ns)
 *   client -> server   Mc = HMAC(secret, "deltacast-auth-v1" 'C' Nc Ns)
 *
 * The client verifies Ms before it sends anything else (the server proved
 * itself), the server verifies Mc before it accepts any data; comparisons are
 * constant-time (CRYPTO_memcmp).  Fresh nonces on both sides defeat replay;
 * the role byte defeats reflection.  Every transport (tcp, ucx, rdma) runs
 * this exchange over its own bootstrap channel.
 *
 * The secret comes from, in order: an explicit API argument, the file named
 * by config `secret_file` (DELTACAST_SECRET_FILE; trailing newline
 * stripped; a warning when group or others may read it), config `secret`
 * (DELTACAST_SECRET).  No secret is an error
 * (DC_ERR_AUTH): connections are never unauthenticated.
 */
#ifndef DC_VERBS_AUTH_H
#define DC_VERBS_AUTH_H

#include "util/dc_util.h"

#define DC_AUTH_NONCE_SIZE 32
#define DC_AUTH_MAC_SIZE 32
#define DC_AUTH_MAX_SECRET 4096

/** Load the job secret (see above) into buf[cap]; *len = its length.
 *  DC_ERR_AUTH when none is configured or it is empty, DC_ERR_IO when the
 *  file cannot be read, DC_ERR_INVALID when it is longer than cap. */
dc_status_t dc_auth_load_secret(const void *explicit_secret, size_t explicit_len, uint8_t *buf,
                                size_t cap, size_t *len);

/** 32 cryptographically random bytes (getrandom). */
dc_status_t dc_auth_nonce(uint8_t out[DC_AUTH_NONCE_SIZE]);

/** The proof of `role` ('C' client, 'S' server) for nonces (nc, ns). */
dc_status_t dc_auth_mac(const uint8_t *secret, size_t secret_len, char role,
                        const uint8_t nc[DC_AUTH_NONCE_SIZE], const uint8_t ns[DC_AUTH_NONCE_SIZE],
                        uint8_t out[DC_AUTH_MAC_SIZE]);

/** Verify a peer's proof in constant time: DC_OK or DC_ERR_AUTH (with a
 *  detail naming `peer`). */
dc_status_t dc_auth_verify(const uint8_t *secret, size_t secret_len, char role,
                           const uint8_t nc[DC_AUTH_NONCE_SIZE],
                           const uint8_t ns[DC_AUTH_NONCE_SIZE],
                           const uint8_t mac[DC_AUTH_MAC_SIZE], const char *peer);

#endif /* DC_VERBS_AUTH_H */
