/* auth.c - HMAC-SHA256 challenge-response by the job secret (see auth.h). */
#include "verbs/auth.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdatomic.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

static const char dc_auth_label[] = "deltacast-auth-v1";

/* A secret file that group or others may read (or write) is warned about,
 * once per process (the secret is loaded for every connection). */
static void dc_auth_check_mode(int fd, const char *path)
{
    static atomic_int warned;
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !(sb.st_mode & (S_IRWXG | S_IRWXO)))
        return;
    if (atomic_exchange(&warned, 1))
        return;
    DC_LOG_WARN("auth: secret file %s has mode %04o: group or others may read the job "
                "secret (chmod 600 %s)",
                path, (unsigned)(sb.st_mode & 07777), path);
}

dc_status_t dc_auth_load_secret(const void *explicit_secret, size_t explicit_len, uint8_t *buf,
                                size_t cap, size_t *len)
{
    if (explicit_secret) {
        if (explicit_len == 0)
            return dc_error(DC_ERR_AUTH, "auth: the job secret given is empty");
        if (explicit_len > cap)
            return dc_error(DC_ERR_INVALID, "auth: job secret longer than %zu bytes", cap);
        memcpy(buf, explicit_secret, explicit_len);
        *len = explicit_len;
        return DC_OK;
    }
    const char *path = dc_config_get("secret_file");
    if (path && *path) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return dc_error_errno(DC_ERR_IO, errno, "auth: cannot open secret file %s", path);
        dc_auth_check_mode(fd, path);
        size_t n = 0;
        for (;;) {
            if (n == cap) {
                char extra;
                ssize_t r = read(fd, &extra, 1);
                close(fd);
                if (r > 0)
                    return dc_error(DC_ERR_INVALID, "auth: secret file %s is longer than %zu bytes",
                                    path, cap);
                break;
            }
            ssize_t r = read(fd, buf + n, cap - n);
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0) {
                int e = errno;
                close(fd);
                return dc_error_errno(DC_ERR_IO, e, "auth: cannot read secret file %s", path);
            }
            if (r == 0) {
                close(fd);
                break;
            }
            n += (size_t)r;
        }
        while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
            n--;
        if (n == 0)
            return dc_error(DC_ERR_AUTH, "auth: secret file %s is empty", path);
        *len = n;
        return DC_OK;
    }
    const char *s = dc_config_get("secret");
    if (s && *s) {
        size_t n = strlen(s);
        if (n > cap)
            return dc_error(DC_ERR_INVALID, "auth: DELTACAST_SECRET longer than %zu bytes", cap);
        memcpy(buf, s, n);
        *len = n;
        return DC_OK;
    }
    return dc_error(DC_ERR_AUTH, "auth: no job secret: give one of DELTACAST_SECRET_FILE=FILE "
                                 "(a file only you can read, on every rank), "
                                 "DELTACAST_SECRET=TEXT, or config secret_file (`deltacast node "
                                 "--secret-file FILE`, Python secret_file=/secret=)");
}

dc_status_t dc_auth_nonce(uint8_t out[DC_AUTH_NONCE_SIZE])
{
    size_t got = 0;
    while (got < DC_AUTH_NONCE_SIZE) {
        ssize_t r = getrandom(out + got, DC_AUTH_NONCE_SIZE - got, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return dc_error_errno(DC_ERR_IO, errno, "auth: getrandom");
        got += (size_t)r;
    }
    return DC_OK;
}

dc_status_t dc_auth_mac(const uint8_t *secret, size_t secret_len, char role,
                        const uint8_t nc[DC_AUTH_NONCE_SIZE], const uint8_t ns[DC_AUTH_NONCE_SIZE],
                        uint8_t out[DC_AUTH_MAC_SIZE])
{
    uint8_t msg[sizeof(dc_auth_label) + 1 + 2 * DC_AUTH_NONCE_SIZE];
    size_t o = 0;
    memcpy(msg, dc_auth_label, sizeof(dc_auth_label)); /* includes the NUL */
    o += sizeof(dc_auth_label);
    msg[o++] = (uint8_t)role;
    memcpy(msg + o, nc, DC_AUTH_NONCE_SIZE);
    o += DC_AUTH_NONCE_SIZE;
    memcpy(msg + o, ns, DC_AUTH_NONCE_SIZE);
    o += DC_AUTH_NONCE_SIZE;
    unsigned int mlen = 0;
    if (secret_len > (size_t)INT32_MAX ||
        !HMAC(EVP_sha256(), secret, (int)secret_len, msg, o, out, &mlen) ||
        mlen != DC_AUTH_MAC_SIZE)
        return dc_error(DC_ERR_INTERNAL, "auth: HMAC-SHA256 failed");
    return DC_OK;
}

dc_status_t dc_auth_verify(const uint8_t *secret, size_t secret_len, char role,
                           const uint8_t nc[DC_AUTH_NONCE_SIZE],
                           const uint8_t ns[DC_AUTH_NONCE_SIZE],
                           const uint8_t mac[DC_AUTH_MAC_SIZE], const char *peer)
{
    uint8_t want[DC_AUTH_MAC_SIZE];
    dc_status_t st = dc_auth_mac(secret, secret_len, role, nc, ns, want);
    if (st != DC_OK)
        return st;
    int diff = CRYPTO_memcmp(want, mac, DC_AUTH_MAC_SIZE);
    OPENSSL_cleanse(want, sizeof(want));
    if (diff != 0)
        return dc_error(DC_ERR_AUTH, "auth: peer %s failed authentication (%s proof does not "
                                     "match the job secret)",
                        peer ? peer : "?", role == 'S' ? "server" : "client");
    return DC_OK;
}
