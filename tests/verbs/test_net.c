/*
 * test_net.c - verbs/net.c and verbs/session.c: the address resolution
 * and printing every transport shares (including the `*` wildcard), and
 * the verdict on a (re-)dial of a session.  No sockets are connected.
 */
#include <criterion/criterion.h>

#include "verbs/net.h"
#include "verbs/session.h"
#include "verbs/transport.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

static uint16_t port_of(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET)
        return ntohs(((const struct sockaddr_in *)ss)->sin_port);
    return ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
}

Test(net, resolve_ipv4_and_print)
{
    struct sockaddr_storage ss;
    socklen_t sl = 0;
    cr_assert_eq(dc_net_resolve("t", "127.0.0.1:7400", false, &ss, &sl), DC_OK);
    cr_assert_eq(ss.ss_family, AF_INET);
    cr_assert_eq(sl, sizeof(struct sockaddr_in));
    cr_assert_eq(port_of(&ss), 7400);
    char buf[64];
    dc_net_sockaddr_str((struct sockaddr *)&ss, buf, sizeof(buf));
    cr_assert_str_eq(buf, "127.0.0.1:7400");
    cr_assert_not(dc_net_is_wildcard((struct sockaddr *)&ss));
}

Test(net, resolve_ipv6_brackets_and_print)
{
    struct sockaddr_storage ss;
    cr_assert_eq(dc_net_resolve("t", "[::1]:9", true, &ss, NULL), DC_OK);
    cr_assert_eq(ss.ss_family, AF_INET6);
    cr_assert_eq(port_of(&ss), 9);
    char buf[64];
    dc_net_sockaddr_str((struct sockaddr *)&ss, buf, sizeof(buf));
    cr_assert_str_eq(buf, "[::1]:9");
}

Test(net, wildcard_binds_to_any)
{
    struct sockaddr_storage ss;
    cr_assert_eq(dc_net_resolve("t", "*:0", true, &ss, NULL), DC_OK);
    cr_assert(ss.ss_family == AF_INET || ss.ss_family == AF_INET6);
    cr_assert(dc_net_is_wildcard((struct sockaddr *)&ss), "'*' is the unspecified address");
    cr_assert_eq(port_of(&ss), 0);
    cr_assert_eq(dc_net_resolve("t", "*:5", true, &ss, NULL), DC_OK);
    cr_assert_eq(port_of(&ss), 5);
}

Test(net, wildcard_connects_to_loopback)
{
    struct sockaddr_storage ss;
    cr_assert_eq(dc_net_resolve("t", "*:80", false, &ss, NULL), DC_OK);
    cr_assert_not(dc_net_is_wildcard((struct sockaddr *)&ss));
    char buf[64];
    dc_net_sockaddr_str((struct sockaddr *)&ss, buf, sizeof(buf));
    cr_assert(strcmp(buf, "127.0.0.1:80") == 0 || strcmp(buf, "[::1]:80") == 0, "%s", buf);
}

Test(net, bad_addresses_are_refused_without_writing)
{
    struct sockaddr_storage ss;
    memset(&ss, 0xab, sizeof(ss));
    const char *bad[] = {"", "nohost", "a:70000", "[::1]9", ":80", "127.0.0.1:x",
                         "no.such.host.invalid:80"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cr_assert_neq(dc_net_resolve("tcp", bad[i], false, &ss, NULL), DC_OK, "%s", bad[i]);
        cr_assert_eq(((uint8_t *)&ss)[0], 0xab, "%s: output written on failure", bad[i]);
    }
    cr_assert_neq(dc_net_resolve("tcp", "no.such.host.invalid:80", false, &ss, NULL), DC_OK);
    cr_assert(strstr(dc_last_error(), "tcp: cannot resolve"), "%s", dc_last_error());
}

Test(net, print_unknown_family)
{
    struct sockaddr sa = {.sa_family = AF_UNIX};
    char buf[8];
    dc_net_sockaddr_str(&sa, buf, sizeof(buf));
    cr_assert_str_eq(buf, "?");
    dc_net_sockaddr_str(NULL, buf, sizeof(buf));
    cr_assert_str_eq(buf, "?");
}

Test(net, same_host_ignores_port)
{
    struct sockaddr_storage a, b, c;
    cr_assert_eq(dc_net_resolve("t", "127.0.0.1:1", false, &a, NULL), DC_OK);
    cr_assert_eq(dc_net_resolve("t", "127.0.0.1:2", false, &b, NULL), DC_OK);
    cr_assert_eq(dc_net_resolve("t", "[::1]:1", false, &c, NULL), DC_OK);
    cr_assert(dc_net_same_host((struct sockaddr *)&a, (struct sockaddr *)&b));
    cr_assert_not(dc_net_same_host((struct sockaddr *)&a, (struct sockaddr *)&c));
}

Test(net, loopback_interface_is_found)
{
    struct sockaddr_storage a;
    cr_assert_eq(dc_net_resolve("t", "127.0.0.1:1", false, &a, NULL), DC_OK);
    char name[64] = "";
    int rc = dc_net_ifname_of((struct sockaddr *)&a, name, sizeof(name));
    if (rc < 0)
        cr_skip_test("no interface holds 127.0.0.1 here");
    cr_assert_str_eq(name, "lo");
    cr_assert_eq(dc_net_ifname_of((struct sockaddr *)&a, name, 2), -1, "name does not fit");
}

/* --- session.c ------------------------------------------------------------ */

typedef struct {
    int tag;
    dc_session_t sess;
} owner_t;

static bool odd_tag(const dc_session_t *s)
{
    return DC_SESSION_OWNER(s, owner_t, sess)->tag % 2 == 1;
}

Test(session, registry_add_find_remove)
{
    owner_t a = {.tag = 1, .sess = {.id = 7}}, b = {.tag = 2, .sess = {.id = 7}},
            c = {.tag = 3, .sess = {.id = 9}};
    dc_session_t *head = NULL;
    dc_session_add(&head, &a.sess);
    dc_session_add(&head, &b.sess);
    dc_session_add(&head, &c.sess);
    cr_assert_eq(dc_session_find(head, 7, NULL), &b.sess, "the newest first");
    cr_assert_eq(dc_session_find(head, 7, odd_tag), &a.sess);
    cr_assert_eq(DC_SESSION_OWNER(dc_session_find(head, 9, NULL), owner_t, sess), &c);
    cr_assert_null(dc_session_find(head, 8, NULL));
    dc_session_remove(&head, &b.sess);
    cr_assert_eq(dc_session_find(head, 7, NULL), &a.sess);
    dc_session_remove(&head, &b.sess); /* absent: no-op */
    dc_session_remove(&head, &c.sess);
    dc_session_remove(&head, &a.sess);
    cr_assert_null(head);
}

Test(session, start_picks_random_ids)
{
    dc_session_t a, b;
    cr_assert_eq(dc_session_start(&a, 1), DC_OK);
    cr_assert_eq(dc_session_start(&b, 0), DC_OK);
    cr_assert_eq(a.epoch, 1);
    cr_assert_eq(b.epoch, 0);
    cr_assert_neq(a.id, b.id);
}

Test(session, judge_single_link_dials)
{
    /* rdma and ucx: the first dial is epoch 1, one link per epoch */
    dc_session_t s = {.id = 1, .epoch = 3};
    cr_assert_eq(dc_session_judge(NULL, 1, 1, false), DC_SESSION_NEW);
    cr_assert_eq(dc_session_judge(NULL, 2, 1, false), DC_SESSION_UNKNOWN);
    cr_assert_eq(dc_session_judge(&s, 1, 1, false), DC_SESSION_DUP);
    cr_assert_eq(dc_session_judge(&s, 2, 1, false), DC_SESSION_STALE);
    cr_assert_eq(dc_session_judge(&s, 3, 1, false), DC_SESSION_STALE);
    cr_assert_eq(dc_session_judge(&s, 4, 1, false), DC_SESSION_RESUME);
}

Test(session, judge_multi_stream_dials)
{
    /* tcp: the first dial is epoch 0, K streams per epoch */
    dc_session_t s = {.id = 1, .epoch = 0};
    cr_assert_eq(dc_session_judge(NULL, 0, 0, true), DC_SESSION_NEW);
    cr_assert_eq(dc_session_judge(NULL, 1, 0, true), DC_SESSION_UNKNOWN);
    cr_assert_eq(dc_session_judge(&s, 0, 0, true), DC_SESSION_JOIN);
    cr_assert_eq(dc_session_judge(&s, 1, 0, true), DC_SESSION_RESUME);
    s.epoch = 2;
    cr_assert_eq(dc_session_judge(&s, 1, 0, true), DC_SESSION_STALE);
    cr_assert_eq(dc_session_judge(&s, 2, 0, true), DC_SESSION_JOIN);
    cr_assert_str_eq(dc_session_verdict_str(DC_SESSION_STALE), "stale epoch");
}
