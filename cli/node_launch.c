/* node_launch.c - `deltacast node --slurm / --nodelist`: the topology from
 * the launcher's host list, one node per task (see node_launch.h). */
#include "cli/node_launch.h"
#include "topology/topo.h"
#include "util/dc_util.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* The environment variable the launcher's world size came from. */
static const char *size_var(const dc_launch_info_t *li)
{
    if (!strcmp(li->source, "ompi"))
        return "OMPI_COMM_WORLD_SIZE";
    if (!strcmp(li->source, "pmi"))
        return "PMI_SIZE";
    if (!strcmp(li->source, "pmix"))
        return "PMIX_SIZE";
    return "SLURM_NTASKS";
}

dc_status_t dc_node_launch_check(const dc_launch_info_t *li, const dc_topo_t *topo,
                                 const char *what, uint32_t rank)
{
    uint32_t n = dc_topo_node_count(topo);
    if (li->world_size >= 0 && (uint32_t)li->world_size != n)
        return dc_error(DC_ERR_INVALID, "the launcher started %d tasks (%s=%d), but %s has %u "
                        "nodes: start one task per node", li->world_size, size_var(li),
                        li->world_size, what, n);
    if (rank >= n)
        return dc_error(DC_ERR_INVALID, "%s has nodes 0..%u: no node %u", what, n - 1, rank);
    return DC_OK;
}

/* Bind `port` (0: an ephemeral one) on `host` with SO_REUSEADDR, not
 * listening (the engine's listener binds it again); the port in *port. */
static dc_status_t bind_port(const char *host, int *fd, unsigned *port)
{
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    char serv[8];
    snprintf(serv, sizeof(serv), "%u", *port);
    int e = getaddrinfo(host, serv, &hints, &ai);
    if (e != 0)
        return dc_error(DC_ERR_IO, "rendezvous: cannot resolve this node's host '%s': %s", host,
                        gai_strerror(e));
    int s = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    struct sockaddr_storage sa;
    socklen_t sl = sizeof(sa);
    if (s < 0 || setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(s, ai->ai_addr, ai->ai_addrlen) != 0 ||
        getsockname(s, (struct sockaddr *)&sa, &sl) != 0) {
        e = errno;
        if (s >= 0)
            close(s);
        freeaddrinfo(ai);
        return dc_error_errno(DC_ERR_IO, e, "rendezvous: cannot bind port %s on '%s'", serv, host);
    }
    freeaddrinfo(ai);
    *port = sa.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&sa)->sin6_port)
                                     : ntohs(((struct sockaddr_in *)&sa)->sin_port);
    *fd = s;
    return DC_OK;
}

/* A free port P for the node's topology address; when its region's
 * transport may be ucx (`transport` ucx or auto), which listens on P +
 * config lan_port_offset, that port too (held in hold[1]). */
static dc_status_t reserve_port(const char *host, const char *transport, int hold[2],
                                unsigned *port)
{
    if (!transport || !*transport)
        transport = dc_config_get("transport");
    uint64_t off = 0;
    bool two = transport && (!strcmp(transport, "ucx") || !strcmp(transport, "auto"));
    dc_status_t st = two ? dc_config_get_size("lan_port_offset", &off) : DC_OK;
    if (st != DC_OK)
        return st;
    for (int tries = 0; tries < 64; tries++) {
        *port = 0;
        if ((st = bind_port(host, &hold[0], port)) != DC_OK)
            return st;
        if (!two)
            return DC_OK;
        unsigned p2 = *port + (unsigned)off;
        if (off > 0 && p2 <= 65535 && bind_port(host, &hold[1], &p2) == DC_OK)
            return DC_OK;
        close(hold[0]);
        hold[0] = -1;
    }
    return dc_error(DC_ERR_IO, "rendezvous: no free port P on '%s' with P + lan_port_offset %llu "
                    "free too (transport %s; --transport tcp needs one port)", host,
                    (unsigned long long)off, transport);
}

dc_status_t dc_node_launch_topo(const dc_node_launch_t *o, const dc_launch_info_t *li,
                                int64_t *rank, dc_topo_t **out, int hold[2])
{
    hold[0] = hold[1] = -1;
    const char *list = o->nodelist, *per_node = NULL, *list_var = "--nodelist";
    if (o->slurm) {
        static const char *const lv[] = {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST",
                                         "SLURM_NODELIST"};
        for (size_t i = 0; i < DC_ARRAY_SIZE(lv) && !list; i++)
            if ((list = getenv(lv[i])) != NULL)
                list_var = lv[i];
        if (!list)
            return dc_error(DC_ERR_INVALID, "--slurm: no SLURM_STEP_NODELIST or "
                            "SLURM_JOB_NODELIST in the environment (run under srun, or give "
                            "--nodelist)");
        per_node = getenv(strcmp(list_var, "SLURM_STEP_NODELIST") == 0
                              ? "SLURM_STEP_TASKS_PER_NODE" : "SLURM_TASKS_PER_NODE");
    }
    uint32_t tasks = o->world;
    if (li->world_size >= 0) {
        if (tasks && tasks != (uint32_t)li->world_size)
            return dc_error(DC_ERR_INVALID, "--world-size %u, but the launcher started %d tasks "
                            "(%s)", tasks, li->world_size, size_var(li));
        tasks = (uint32_t)li->world_size;
    }
    if (*rank < 0)
        *rank = li->rank;
    if (*rank < 0)
        return dc_error(DC_ERR_INVALID, "no --rank and no MPI/Slurm rank in the environment");
    dc_launch_place_t p;
    dc_status_t st = dc_launch_place(list, per_node, tasks, &p);
    if (st != DC_OK) {
        dc_error_prefix("%s", list_var);
        return st;
    }
    uint32_t r = (uint32_t)*rank;
    char **addrs = NULL;
    if ((uint64_t)*rank >= p.n_tasks) {
        st = dc_error(DC_ERR_INVALID, "the job has %u tasks (%s '%s'): no task %lld",
                      p.n_tasks, list_var, list, (long long)*rank);
        goto out;
    }
    const char *host = p.hosts[p.host_of[r]];
    if (li->local_rank >= 0 && (uint32_t)li->local_rank != p.local_of[r]) {
        st = dc_error(DC_ERR_INVALID, "rank %u: the host list places it as task %u of %s, the "
                      "launcher as local task %d (tasks are expected in blocks per host, as "
                      "srun --distribution=block and mpirun --map-by slot place them)", r,
                      p.local_of[r], host, li->local_rank);
        goto out;
    }
    if (o->port == 0) {
        unsigned port = 0;
        char key[128], addr[300];
        if ((st = reserve_port(host, o->transport, hold, &port)) != DC_OK)
            goto out;
        snprintf(addr, sizeof(addr), strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, port);
        dc_rendezvous_key(key, sizeof(key));
        if ((st = dc_rendezvous_publish(o->rendezvous, key, r, addr)) != DC_OK)
            goto out;
        DC_LOG_INFO("rank %u: listening on %s, published in %s/rank-%u", r, addr, o->rendezvous, r);
        if ((st = dc_rendezvous_wait(o->rendezvous, key, p.n_tasks,
                                     o->wait_ms ? o->wait_ms : 60000, &addrs)) != DC_OK)
            goto out;
    }
    st = dc_topo_from_place(&p, o->region_map, o->senders ? o->senders : 1,
                            (uint16_t)(o->port < 0 ? 7300 : o->port), addrs, out);
out:
    dc_rendezvous_free(addrs, p.n_tasks);
    dc_launch_place_free(&p);
    for (int i = 0; st != DC_OK && i < 2; i++)
        if (hold[i] >= 0) {
            close(hold[i]);
            hold[i] = -1;
        }
    return st;
}

dc_status_t dc_node_launch_rendezvous(const dc_node_launch_t *o, uint32_t rank, dc_topo_t *topo,
                                      int hold[2])
{
    hold[0] = hold[1] = -1;
    uint32_t n = dc_topo_node_count(topo);
    dc_topo_node_info_t ni;
    memset(&ni, 0, sizeof(ni));
    ni.size = sizeof(ni);
    dc_status_t st = dc_topo_node(topo, rank, &ni);
    if (st != DC_OK)
        return st;
    if (!ni.addr || !*ni.addr)
        return dc_error(DC_ERR_INVALID, "rendezvous: node %u ('%s') has no address in the "
                        "topology", rank, ni.name ? ni.name : "?");
    char addr[300], key[128];
    if (dc_topo_node_port0(topo, rank)) {
        /* "HOST:0" or "[V6]:0": the host, then a free port on it */
        char host[256];
        size_t hl = strlen(ni.addr) - 2;
        if (hl >= sizeof(host))
            return dc_error(DC_ERR_INVALID, "rendezvous: node %u: address '%s' too long", rank,
                            ni.addr);
        memcpy(host, ni.addr, hl);
        host[hl] = 0;
        if (host[0] == '[' && hl >= 2 && host[hl - 1] == ']') {
            memmove(host, host + 1, hl - 2);
            host[hl - 2] = 0;
        }
        unsigned port = 0;
        if ((st = reserve_port(host, o->transport, hold, &port)) != DC_OK)
            return st;
        snprintf(addr, sizeof(addr), strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, port);
    } else {
        snprintf(addr, sizeof(addr), "%s", ni.addr);
    }
    char **addrs = NULL;
    dc_rendezvous_key(key, sizeof(key));
    if ((st = dc_rendezvous_publish(o->rendezvous, key, rank, addr)) == DC_OK) {
        DC_LOG_INFO("rank %u: listening on %s, published in %s/rank-%u", rank, addr,
                    o->rendezvous, rank);
        st = dc_rendezvous_wait(o->rendezvous, key, n, o->wait_ms ? o->wait_ms : 60000, &addrs);
    }
    if (st == DC_OK)
        st = dc_topo_fill_port0(topo, addrs);
    dc_rendezvous_free(addrs, n);
    if (st != DC_OK)
        dc_node_launch_release(hold);
    return st;
}

void dc_node_launch_release(int hold[2])
{
    for (int i = 0; i < 2; i++)
        if (hold[i] >= 0) {
            close(hold[i]);
            hold[i] = -1;
        }
}
