/*
 * net.h - socket addresses for every transport (verbs/): resolving
 * "HOST:PORT" into a sockaddr, printing one back, and comparing local
 * addresses with the machine's interfaces.
 *
 * Addresses are written "HOST:PORT" or "[V6]:PORT" (dc_verbs_parse_addr,
 * transport.h).  A host of `*` is the wildcard for every transport that
 * resolves through dc_net_resolve(): the unspecified address (0.0.0.0 or ::)
 * to bind to, the loopback address to connect to (getaddrinfo with a NULL
 * host).  Any other host goes to getaddrinfo as it is.
 *
 * Pure functions of their arguments (and of the machine's resolver and
 * interface list); no state, thread-safe.
 */
#ifndef DC_VERBS_NET_H
#define DC_VERBS_NET_H

#include "util/dc_util.h"

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

/** Host of the wildcard address in "HOST:PORT". */
#define DC_NET_WILDCARD "*"

/**
 * Resolve "HOST:PORT" (see above) into `*out` / `*alen` (alen may be NULL):
 * the first address getaddrinfo returns, any family, for a stream socket;
 * `passive` for a bind address.  `who` ("tcp", "rdma", ...) begins the
 * error message.  DC_ERR_INVALID: unparsable or unresolvable; `*out` is
 * written only on success.
 */
dc_status_t dc_net_resolve(const char *who, const char *addr, bool passive,
                           struct sockaddr_storage *out, socklen_t *alen);

/** "A.B.C.D:PORT" or "[V6]:PORT" of `sa` into buf; "?" for NULL or another
 *  family.  Always NUL-terminates (when len > 0). */
void dc_net_sockaddr_str(const struct sockaddr *sa, char *buf, size_t len);

/** Same family and host address (ports ignored); false for other families. */
bool dc_net_same_host(const struct sockaddr *a, const struct sockaddr *b);

/** The same for two dc_net_sockaddr_str() strings: equal up to the last
 *  ':' (the port); listeners count a source's pending handshakes by it. */
bool dc_net_same_host_str(const char *a, const char *b);

/** The unspecified address (0.0.0.0, ::); true for families other than
 *  IPv4/IPv6 (nothing to narrow down). */
bool dc_net_is_wildcard(const struct sockaddr *a);

/**
 * The interface holding local address `a` (dc_net_same_host), its name into
 * name[len]: 0 if found and up and running, 1 if found but not up and
 * running, -1 if not found (or its name does not fit).
 */
int dc_net_ifname_of(const struct sockaddr *a, char *name, size_t len);

/** O_NONBLOCK on `fd`: 0, or -1 with errno. */
int dc_net_nonblock(int fd);

#endif /* DC_VERBS_NET_H */
