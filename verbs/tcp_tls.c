/*
 * tcp_tls.c - TLS 1.3 on the streams of the tcp transport (OpenSSL 3).
 *
 * When: config key `tls` (dc_verbs_opts_t.tls): auto encrypts the
 * connections that cross regions (the dialing side knows: opts.wan), on
 * encrypts every tcp connection and makes a listener refuse clear streams,
 * off encrypts none and makes a listener refuse TLS.  A listener with auto
 * takes both (the dialing side chooses per edge).  A listener tells a TLS
 * ClientHello (first byte 0x16) from the clear HELLO ("DCTH") by peeking.
 *
 * Layering: TLS first on each stream socket, then the HMAC handshake of
 * tcp.c (HELLO / CHAL / PROOF / OK) inside it, then the messages.  The TLS
 * handshake runs under the socket's handshake deadline like the rest.
 *
 * Keys, and what each mode proves:
 *   PSK (default: no tls_cert_file).  An external TLS 1.3 PSK, HKDF-SHA256
 *     (or -SHA384 for TLS_AES_256_GCM_SHA384) of the job secret, identity
 *     "deltacast-psk-1", with (EC)DHE (psk_dhe_ke: forward secrecy).  Proves
 *     that both ends hold the job secret, and keeps the bytes secret and
 *     unaltered; it does NOT prove which node a peer is: any holder of the
 *     secret may claim any node id (as with the HMAC alone).
 *   Certificates (tls_cert_file, tls_key_file, tls_ca_file).  Mutual
 *     authentication: each side presents a certificate that must chain to
 *     the CA; a client checks that the server's certificate names the node
 *     it dialled (opts.tls_peer_name: the node's host name in the topology,
 *     as a DNS subjectAltName or the common name); the server exposes the
 *     client's verified name (stats.peer_cert) and the engine refuses a
 *     peer whose HELLO / SUB claims another node's id.  Proves the peer's
 *     identity (within the CA's trust) in addition to secrecy and
 *     integrity; the HMAC inside still proves the job secret.
 *
 * Non-blocking I/O: SSL_read may hold decrypted bytes epoll does not
 * report (callers keep reading while SSL_has_pending); SSL_write runs with
 * SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER and is
 * retried with the same bytes after it would block.  SSL_OP_ENABLE_KTLS
 * asks for kernel TLS, which OpenSSL turns on after the handshake when the
 * kernel has it (CONFIG_TLS) and the cipher is supported; then SSL_read /
 * SSL_write are plain recv / send of plaintext and the kernel encrypts.
 * No session tickets: every stream does a full (PSK + ECDHE) handshake.
 */
#include "verbs/tcp_tls.h"

#include <errno.h>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DC_TLS_PSK_ID   "deltacast-psk-1"
#define DC_TLS_PSK_SALT "deltacast tls 1.3 external psk"

typedef struct {
    uint8_t psk[EVP_MAX_MD_SIZE];
    size_t psk_len;
    uint8_t suite[2]; /* the PSK's cipher suite (its hash is the PSK's hash) */
    bool certs;
} dc_tls_keys_t;

/* OpenSSL's socket BIO writes with write(): on a socket the peer closed
 * that raises SIGPIPE, which would kill the process (the tcp transport
 * sends with MSG_NOSIGNAL everywhere else).  So every SSL call that may
 * write runs with SIGPIPE blocked in the calling thread, and a SIGPIPE it
 * raised is taken off the pending set before the mask is restored.  The
 * stream paths block it once per batch of calls (dc_tcp_tls_guard_*: one
 * SSL_read returns one 16 KiB record, and two rt_sigprocmask calls per
 * record were most of the syscalls of a TLS receiver). */
static __thread int dc_tls_guarded;

static void dc_tls_pipe_block(sigset_t *old)
{
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &s, old);
}

static void dc_tls_pipe_restore(const sigset_t *old, bool failed)
{
    if (dc_tls_guarded || sigismember(old, SIGPIPE))
        return; /* blocked before: the caller's business */
    if (failed) {
        int e = errno;
        sigset_t pend, s;
        sigemptyset(&s);
        sigaddset(&s, SIGPIPE);
        if (sigpending(&pend) == 0 && sigismember(&pend, SIGPIPE)) {
            struct timespec zero = {0, 0};
            (void)sigtimedwait(&s, NULL, &zero);
        }
        errno = e;
    }
    pthread_sigmask(SIG_SETMASK, old, NULL);
}

void dc_tcp_tls_guard_begin(dc_tcp_tls_guard_t *g)
{
    g->on = !dc_tls_guarded;
    if (g->on) {
        dc_tls_pipe_block(&g->old);
        dc_tls_guarded = 1;
    }
}

void dc_tcp_tls_guard_end(dc_tcp_tls_guard_t *g)
{
    if (!g->on)
        return;
    dc_tls_guarded = 0;
    dc_tls_pipe_restore(&g->old, true);
    g->on = false;
}

static int dc_tls_idx = -1;
static pthread_once_t dc_tls_once = PTHREAD_ONCE_INIT;

static void dc_tls_keys_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl,
                             void *argp)
{
    (void)parent;
    (void)ad;
    (void)idx;
    (void)argl;
    (void)argp;
    if (ptr) {
        OPENSSL_cleanse(ptr, sizeof(dc_tls_keys_t));
        free(ptr);
    }
}

static void dc_tls_init_once(void)
{
    dc_tls_idx = SSL_CTX_get_ex_new_index(0, NULL, NULL, NULL, dc_tls_keys_free);
}

/* OpenSSL's reason for the last failure, its queue cleared. */
static const char *dc_tls_reason(char *buf, size_t len)
{
    unsigned long e = ERR_peek_last_error();
    if (e)
        ERR_error_string_n(e, buf, len);
    else
        snprintf(buf, len, "no detail");
    ERR_clear_error();
    return buf;
}

static const struct {
    const char *name;
    uint8_t id[2];
    const char *md;
} dc_tls_suites[] = {
    {"TLS_AES_128_GCM_SHA256", {0x13, 0x01}, "SHA256"},
    {"TLS_AES_256_GCM_SHA384", {0x13, 0x02}, "SHA384"},
    {"TLS_CHACHA20_POLY1305_SHA256", {0x13, 0x03}, "SHA256"},
};

static dc_status_t dc_tls_derive_psk(const dc_verbs_opts_t *o, const char *md, dc_tls_keys_t *k)
{
    EVP_KDF *kdf = EVP_KDF_fetch(NULL, "HKDF", NULL);
    EVP_KDF_CTX *kc = kdf ? EVP_KDF_CTX_new(kdf) : NULL;
    EVP_KDF_free(kdf);
    if (!kc)
        return dc_error(DC_ERR_UNSUPPORTED, "tls: OpenSSL has no HKDF");
    const EVP_MD *evmd = EVP_get_digestbyname(md);
    k->psk_len = evmd ? (size_t)EVP_MD_get_size(evmd) : 0;
    char info[64];
    snprintf(info, sizeof(info), "%s %s", DC_TLS_PSK_ID, md);
    OSSL_PARAM p[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, (char *)(uintptr_t)md, 0),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (void *)(uintptr_t)o->secret,
                                          o->secret_len),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, (void *)(uintptr_t)DC_TLS_PSK_SALT,
                                          sizeof(DC_TLS_PSK_SALT) - 1),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, info, strlen(info)),
        OSSL_PARAM_construct_end(),
    };
    int ok = k->psk_len > 0 && k->psk_len <= sizeof(k->psk) && o->secret_len > 0 &&
             EVP_KDF_derive(kc, k->psk, k->psk_len, p) == 1;
    EVP_KDF_CTX_free(kc);
    if (!ok) {
        char r[256];
        return dc_error(DC_ERR_INVALID, "tls: deriving the PSK from the job secret: %s",
                        dc_tls_reason(r, sizeof(r)));
    }
    return DC_OK;
}

static SSL_SESSION *dc_tls_psk_session(SSL *ssl, const dc_tls_keys_t *k)
{
    const SSL_CIPHER *cipher = SSL_CIPHER_find(ssl, k->suite);
    SSL_SESSION *s = cipher ? SSL_SESSION_new() : NULL;
    if (!s)
        return NULL;
    if (!SSL_SESSION_set1_master_key(s, k->psk, k->psk_len) || !SSL_SESSION_set_cipher(s, cipher) ||
        !SSL_SESSION_set_protocol_version(s, TLS1_3_VERSION)) {
        SSL_SESSION_free(s);
        return NULL;
    }
    return s;
}

static int dc_tls_use_session(SSL *ssl, const EVP_MD *md, const unsigned char **id, size_t *idlen,
                              SSL_SESSION **sess)
{
    const dc_tls_keys_t *k = SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), dc_tls_idx);
    *sess = NULL;
    if (!k || k->certs)
        return 1;
    SSL_SESSION *s = dc_tls_psk_session(ssl, k);
    if (!s)
        return 0;
    if (md && SSL_CIPHER_get_handshake_digest(SSL_SESSION_get0_cipher(s)) != md) {
        SSL_SESSION_free(s); /* a HelloRetryRequest chose another hash */
        return 1;
    }
    *id = (const unsigned char *)DC_TLS_PSK_ID;
    *idlen = sizeof(DC_TLS_PSK_ID) - 1;
    *sess = s;
    return 1;
}

static int dc_tls_find_session(SSL *ssl, const unsigned char *id, size_t idlen, SSL_SESSION **sess)
{
    const dc_tls_keys_t *k = SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), dc_tls_idx);
    *sess = NULL;
    if (!k || k->certs || idlen != sizeof(DC_TLS_PSK_ID) - 1 ||
        memcmp(id, DC_TLS_PSK_ID, idlen) != 0)
        return 1; /* unknown identity: no PSK, and without a certificate no handshake */
    *sess = dc_tls_psk_session(ssl, k);
    return *sess ? 1 : 0;
}

dc_status_t dc_tcp_tls_ctx_new(const dc_verbs_opts_t *o, bool server, SSL_CTX **out)
{
    pthread_once(&dc_tls_once, dc_tls_init_once);
    if (dc_tls_idx < 0)
        return dc_error(DC_ERR_NOMEM, "tls: OpenSSL ex_data index");
    const char *suite = dc_config_get("tls_cipher");
    const char *ca = dc_config_get("tls_ca_file");
    const char *cert = dc_config_get("tls_cert_file");
    const char *key = dc_config_get("tls_key_file");
    size_t si = 0;
    while (si < DC_ARRAY_SIZE(dc_tls_suites) && strcmp(dc_tls_suites[si].name, suite) != 0)
        si++;
    if (si == DC_ARRAY_SIZE(dc_tls_suites))
        return dc_error(DC_ERR_INVALID,
                        "config tls_cipher=%s: want TLS_AES_128_GCM_SHA256, "
                        "TLS_AES_256_GCM_SHA384 or TLS_CHACHA20_POLY1305_SHA256",
                        suite);
    bool certs = cert && *cert;
    if (certs && (!key || !*key || !ca || !*ca))
        return dc_error(DC_ERR_INVALID,
                        "config tls_cert_file=%s needs tls_key_file and "
                        "tls_ca_file too",
                        cert);
    if (!certs && ((key && *key) || (ca && *ca)))
        return dc_error(DC_ERR_INVALID, "config tls_key_file / tls_ca_file are set but "
                                        "tls_cert_file is not (certificate mode needs all three)");
    dc_tls_keys_t *k = calloc(1, sizeof(*k));
    if (!k)
        return dc_error(DC_ERR_NOMEM, "tls: out of memory");
    memcpy(k->suite, dc_tls_suites[si].id, 2);
    k->certs = certs;
    dc_status_t st;
    char r[256];
    SSL_CTX *ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
    if (!ctx) {
        free(k);
        return dc_error(DC_ERR_NOMEM, "tls: SSL_CTX_new: %s", dc_tls_reason(r, sizeof(r)));
    }
    if (!SSL_CTX_set_ex_data(ctx, dc_tls_idx, k)) {
        free(k);
        st = dc_error(DC_ERR_NOMEM, "tls: SSL_CTX_set_ex_data");
        goto out_ctx;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
    SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION);
    if (!SSL_CTX_set_ciphersuites(ctx, suite)) {
        st = dc_error(DC_ERR_UNSUPPORTED, "tls: cipher suite %s: %s", suite,
                      dc_tls_reason(r, sizeof(r)));
        goto out_ctx;
    }
    SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET | SSL_OP_ENABLE_KTLS | SSL_OP_IGNORE_UNEXPECTED_EOF |
                                 SSL_OP_NO_RENEGOTIATION);
    SSL_CTX_set_num_tickets(ctx, 0);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    /* no read ahead: OpenSSL then reads each record's header and body with
     * a recv() each; with it, a buffer of several records is memmove()d to
     * its start before each record (ssl3_read_n aligns the payload): with a
     * 256 KiB buffer that memmove was a third of the receiver's CPU */
    if (certs) {
        if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1) {
            st = dc_error(DC_ERR_INVALID, "tls: certificate file %s: %s", cert,
                          dc_tls_reason(r, sizeof(r)));
            goto out_ctx;
        }
        if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
            st = dc_error(DC_ERR_INVALID, "tls: key file %s: %s", key, dc_tls_reason(r, sizeof(r)));
            goto out_ctx;
        }
        if (SSL_CTX_check_private_key(ctx) != 1) {
            st = dc_error(DC_ERR_INVALID, "tls: key file %s does not match certificate %s: %s", key,
                          cert, dc_tls_reason(r, sizeof(r)));
            goto out_ctx;
        }
        if (SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1) {
            st = dc_error(DC_ERR_INVALID, "tls: CA file %s: %s", ca, dc_tls_reason(r, sizeof(r)));
            goto out_ctx;
        }
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    } else {
        if ((st = dc_tls_derive_psk(o, dc_tls_suites[si].md, k)) != DC_OK)
            goto out_ctx;
        if (server)
            SSL_CTX_set_psk_find_session_callback(ctx, dc_tls_find_session);
        else
            SSL_CTX_set_psk_use_session_callback(ctx, dc_tls_use_session);
    }
    *out = ctx;
    return DC_OK;
out_ctx:
    SSL_CTX_free(ctx); /* frees k through the ex_data callback */
    return st;
}

dc_status_t dc_tcp_tls_new(SSL_CTX *ctx, int fd, bool server, const char *peer_name, SSL **out)
{
    char r[256];
    SSL *ssl = SSL_new(ctx);
    if (!ssl)
        return dc_error(DC_ERR_NOMEM, "tls: SSL_new: %s", dc_tls_reason(r, sizeof(r)));
    if (!SSL_set_fd(ssl, fd)) {
        SSL_free(ssl);
        return dc_error(DC_ERR_NOMEM, "tls: SSL_set_fd: %s", dc_tls_reason(r, sizeof(r)));
    }
    const dc_tls_keys_t *k = SSL_CTX_get_ex_data(ctx, dc_tls_idx);
    if (!server && k && k->certs && peer_name && *peer_name) {
        if (!SSL_set1_host(ssl, peer_name)) {
            SSL_free(ssl);
            return dc_error(DC_ERR_INVALID, "tls: bad certificate name to expect '%s'", peer_name);
        }
        SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    }
    if (server)
        SSL_set_accept_state(ssl);
    else
        SSL_set_connect_state(ssl);
    *out = ssl;
    return DC_OK;
}

dc_status_t dc_tcp_tls_handshake(SSL *ssl, const char *peer, bool *want_write)
{
    ERR_clear_error();
    errno = 0;
    sigset_t old;
    dc_tls_pipe_block(&old);
    int rc = SSL_do_handshake(ssl);
    dc_tls_pipe_restore(&old, rc != 1);
    if (rc == 1)
        return DC_OK;
    int e = SSL_get_error(ssl, rc);
    *want_write = e == SSL_ERROR_WANT_WRITE;
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
        return DC_ERR_AGAIN;
    char r[256];
    if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && errno == 0)) {
        ERR_clear_error();
        return dc_error(DC_ERR_RESET, "tcp: %s closed the connection during the TLS handshake",
                        peer);
    }
    if (e == SSL_ERROR_SYSCALL) {
        int en = errno;
        ERR_clear_error();
        return dc_error_errno(dc_status_from_errno(en), en, "tcp: TLS handshake with %s", peer);
    }
    long v = SSL_get_verify_result(ssl);
    if (v != X509_V_OK)
        return dc_error(DC_ERR_AUTH,
                        "tcp: TLS handshake with %s: the peer's certificate is "
                        "refused: %s (%s)",
                        peer, X509_verify_cert_error_string(v), dc_tls_reason(r, sizeof(r)));
    const dc_tls_keys_t *k = SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), dc_tls_idx);
    return dc_error(DC_ERR_AUTH, "tcp: TLS handshake with %s failed: %s%s", peer,
                    dc_tls_reason(r, sizeof(r)),
                    k && !k->certs ? " (PSK mode: do both ends hold the same job secret and "
                                     "tls_cipher?)"
                                   : " (certificate mode: tls_ca_file, tls_cert_file, "
                                     "tls_key_file)");
}

/* An error of SSL_read / SSL_write as errno (see tcp_tls.h). */
static ssize_t dc_tls_io_error(SSL *ssl, int rc, const char *what)
{
    int e = SSL_get_error(ssl, rc);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        errno = EAGAIN;
        return -1;
    }
    if (e == SSL_ERROR_ZERO_RETURN)
        return 0;
    if (e == SSL_ERROR_SYSCALL) {
        ERR_clear_error();
        if (errno == 0)
            return 0; /* EOF */
        return -1;    /* errno from the socket */
    }
    char r[256];
    dc_error(DC_ERR_CORRUPT, "TLS %s: %s", what, dc_tls_reason(r, sizeof(r)));
    errno = EPROTO;
    return -1;
}

ssize_t dc_tcp_tls_read(SSL *ssl, void *buf, size_t len)
{
    size_t n = 0;
    errno = 0;
    sigset_t old;
    if (!dc_tls_guarded)
        dc_tls_pipe_block(&old);
    int rc = SSL_read_ex(ssl, buf, len, &n);
    dc_tls_pipe_restore(&old, rc != 1);
    if (rc == 1)
        return (ssize_t)n;
    return dc_tls_io_error(ssl, rc, "read");
}

ssize_t dc_tcp_tls_write(SSL *ssl, const void *buf, size_t len)
{
    size_t n = 0;
    errno = 0;
    if (len == 0)
        return 0;
    sigset_t old;
    if (!dc_tls_guarded)
        dc_tls_pipe_block(&old);
    int rc = SSL_write_ex(ssl, buf, len, &n);
    dc_tls_pipe_restore(&old, rc != 1);
    if (rc == 1)
        return (ssize_t)n;
    ssize_t r = dc_tls_io_error(ssl, rc, "write");
    if (r == 0) { /* the peer closed: as send() would */
        errno = EPIPE;
        return -1;
    }
    return r;
}

void dc_tcp_tls_shutdown(SSL *ssl)
{
    sigset_t old;
    dc_tls_pipe_block(&old);
    int rc = SSL_shutdown(ssl);
    dc_tls_pipe_restore(&old, rc < 0);
    ERR_clear_error();
}

uint32_t dc_tcp_tls_ktls(SSL *ssl)
{
    uint32_t k = 0;
    if (BIO_get_ktls_send(SSL_get_wbio(ssl)))
        k |= 1;
    if (BIO_get_ktls_recv(SSL_get_rbio(ssl)))
        k |= 2;
    return k;
}

void dc_tcp_tls_describe(SSL *ssl, char *suite, size_t suite_len, char *how, size_t how_len)
{
    const SSL_CIPHER *c = SSL_get_current_cipher(ssl);
    snprintf(suite, suite_len, "%s", c ? SSL_CIPHER_get_name(c) : "unknown");
    const dc_tls_keys_t *k = SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), dc_tls_idx);
    uint32_t kt = dc_tcp_tls_ktls(ssl);
    snprintf(how, how_len, "%s %s, %s, kernel TLS %s", SSL_get_version(ssl), suite,
             k && k->certs ? "certificates" : "PSK from the job secret",
             kt == 3   ? "on (send and receive)"
             : kt == 1 ? "on for send only"
             : kt == 2 ? "on for receive only"
                       : "off (user-space crypto)");
}

void dc_tcp_tls_peer_name(SSL *ssl, char *buf, size_t len)
{
    buf[0] = 0;
    X509 *x = SSL_get0_peer_certificate(ssl);
    if (!x || SSL_get_verify_result(ssl) != X509_V_OK)
        return;
    GENERAL_NAMES *gens = X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
    for (int i = 0; gens && i < sk_GENERAL_NAME_num(gens) && !buf[0]; i++) {
        const GENERAL_NAME *g = sk_GENERAL_NAME_value(gens, i);
        if (g->type != GEN_DNS)
            continue;
        const unsigned char *d = ASN1_STRING_get0_data(g->d.dNSName);
        int dl = ASN1_STRING_length(g->d.dNSName);
        if (dl > 0 && (size_t)dl < len && memchr(d, 0, (size_t)dl) == NULL) {
            memcpy(buf, d, (size_t)dl);
            buf[dl] = 0;
        }
    }
    GENERAL_NAMES_free(gens);
    if (!buf[0]) {
        X509_NAME *sn = X509_get_subject_name(x);
        int n = X509_NAME_get_text_by_NID(sn, NID_commonName, buf, (int)len);
        if (n <= 0 || (size_t)n >= len || strlen(buf) != (size_t)n)
            buf[0] = 0;
    }
}
