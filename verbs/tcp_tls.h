/*
 * tcp_tls.h - TLS 1.3 (OpenSSL 3) on the streams of the tcp transport
 * (private to verbs/tcp*.c; see tcp_tls.c for what each mode proves).
 *
 * One SSL_CTX per client connection or listener; one SSL per socket.  The
 * TLS handshake runs first on a socket, non-blocking, under the handshake
 * deadline of the socket; the HMAC handshake of tcp.c then runs inside it.
 *
 * Read and write mirror recv() and send(): > 0 bytes, 0 end of stream
 * (read), -1 with errno EAGAIN (would block), EPROTO (a TLS error: a record
 * that fails authentication, an alert; dc_error() holds OpenSSL's reason)
 * or the socket's errno.
 */
#ifndef DC_VERBS_TCP_TLS_H
#define DC_VERBS_TCP_TLS_H
#include "verbs/transport.h"

#include <openssl/ssl.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/types.h>

/** Build the context of a client (server = false) or listener from the
 *  config keys tls_cipher, tls_ca_file, tls_cert_file, tls_key_file and
 *  the job secret in `o` (PSK mode: no tls_cert_file). */
dc_status_t dc_tcp_tls_ctx_new(const dc_verbs_opts_t *o, bool server, SSL_CTX **out);

/** A TLS endpoint on the connected socket `fd`.  `peer_name` (client, may
 *  be NULL): the name the server's certificate must carry. */
dc_status_t dc_tcp_tls_new(SSL_CTX *ctx, int fd, bool server, const char *peer_name, SSL **out);

/** Advance the TLS handshake: DC_OK done, DC_ERR_AGAIN (then *want_write
 *  says which readiness to wait for), DC_ERR_AUTH (the peer's key or
 *  certificate was refused, or it refused ours), DC_ERR_RESET (closed). */
dc_status_t dc_tcp_tls_handshake(SSL *ssl, const char *peer, bool *want_write);

ssize_t dc_tcp_tls_read(SSL *ssl, void *buf, size_t len);
ssize_t dc_tcp_tls_write(SSL *ssl, const void *buf, size_t len);
/** SIGPIPE blocked in this thread across a batch of the calls above (one
 *  pair of rt_sigprocmask calls instead of one per call); nests. */
typedef struct {
    sigset_t old;
    bool on;
} dc_tcp_tls_guard_t;
void dc_tcp_tls_guard_begin(dc_tcp_tls_guard_t *g);
void dc_tcp_tls_guard_end(dc_tcp_tls_guard_t *g);

/** Send close_notify (best effort, does not wait for the peer's). */
void dc_tcp_tls_shutdown(SSL *ssl);

/** "TLS_AES_128_GCM_SHA256" for stats; `how` gets the log's detail
 *  ("TLSv1.3 TLS_AES_128_GCM_SHA256, PSK from the job secret, kTLS off"). */
void dc_tcp_tls_describe(SSL *ssl, char *suite, size_t suite_len, char *how, size_t how_len);

/** Kernel TLS state of the socket: bit 0 send, bit 1 receive offloaded. */
uint32_t dc_tcp_tls_ktls(SSL *ssl);

/** The name the peer's verified certificate carries (its first DNS
 *  subjectAltName, else its common name); "" in PSK mode. */
void dc_tcp_tls_peer_name(SSL *ssl, char *buf, size_t len);

#endif /* DC_VERBS_TCP_TLS_H */
