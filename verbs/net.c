/* net.c - socket addresses shared by the transports: resolve "HOST:PORT"
 * (with the `*` wildcard), print a sockaddr, match an address to its
 * interface.  See net.h. */
#include "verbs/net.h"

#include "verbs/transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

dc_status_t dc_net_resolve(const char *who, const char *addr, bool passive,
                           struct sockaddr_storage *out, socklen_t *alen)
{
    char host[256];
    uint16_t port;
    dc_status_t st = dc_verbs_parse_addr(addr, host, sizeof(host), &port);
    if (st != DC_OK)
        return st;
    char ports[8];
    snprintf(ports, sizeof(ports), "%u", port);
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = passive ? AI_PASSIVE : 0;
    bool wild = strcmp(host, DC_NET_WILDCARD) == 0;
    int rc = getaddrinfo(wild ? NULL : host, ports, &hints, &res);
    if (rc != 0 || !res)
        return dc_error(DC_ERR_INVALID, "%s: cannot resolve '%s': %s", who, addr,
                        rc ? gai_strerror(rc) : "no address");
    if (res->ai_addrlen > sizeof(*out)) {
        freeaddrinfo(res);
        return dc_error(DC_ERR_INTERNAL, "%s: address too long", who);
    }
    memset(out, 0, sizeof(*out));
    memcpy(out, res->ai_addr, res->ai_addrlen);
    if (alen)
        *alen = res->ai_addrlen;
    freeaddrinfo(res);
    return DC_OK;
}

void dc_net_sockaddr_str(const struct sockaddr *sa, char *buf, size_t len)
{
    char host[INET6_ADDRSTRLEN] = "?";
    if (sa && sa->sa_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &s4->sin_addr, host, sizeof(host));
        snprintf(buf, len, "%s:%u", host, ntohs(s4->sin_port));
    } else if (sa && sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof(host));
        snprintf(buf, len, "[%s]:%u", host, ntohs(s6->sin6_port));
    } else {
        snprintf(buf, len, "?");
    }
}

bool dc_net_same_host(const struct sockaddr *a, const struct sockaddr *b)
{
    if (a->sa_family != b->sa_family)
        return false;
    if (a->sa_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    if (a->sa_family == AF_INET6)
        return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                      &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr)) == 0;
    return false;
}

bool dc_net_is_wildcard(const struct sockaddr *a)
{
    if (a->sa_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr == htonl(INADDR_ANY);
    if (a->sa_family == AF_INET6)
        return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)a)->sin6_addr);
    return true;
}

int dc_net_ifname_of(const struct sockaddr *a, char *name, size_t len)
{
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) != 0)
        return -1;
    int rc = -1;
    for (struct ifaddrs *i = ifs; i; i = i->ifa_next)
        if (i->ifa_addr && dc_net_same_host(i->ifa_addr, a) && strlen(i->ifa_name) < len) {
            snprintf(name, len, "%s", i->ifa_name);
            rc = (i->ifa_flags & (IFF_UP | IFF_RUNNING)) == (IFF_UP | IFF_RUNNING) ? 0 : 1;
            break;
        }
    freeifaddrs(ifs);
    return rc;
}

int dc_net_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

bool dc_net_same_host_str(const char *a, const char *b)
{
    const char *ca = strrchr(a, ':'), *cb = strrchr(b, ':');
    size_t la = ca ? (size_t)(ca - a) : strlen(a), lb = cb ? (size_t)(cb - b) : strlen(b);
    return la == lb && memcmp(a, b, la) == 0;
}
