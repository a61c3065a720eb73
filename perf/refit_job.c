/* refit_job.c - a refit job on this machine (see refit_job.h): its shaped
 * network of namespaces, its topology file and paths.  Used by perf refit
 * (and the demo) and perf soak. */
#include "perf/refit_job.h"
#include "util/dc_util.h"

#include <errno.h>
#include <linux/magic.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

int rb_sh(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    int rc = system(cmd);
    return rc == -1 ? -1 : WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

void rb_say(const rb_ctx_t *c, const char *fmt, ...)
{
    if (c->o.json && !c->o.demo)
        return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fflush(stderr);
}

/* --- network -------------------------------------------------------------------- */

void rb_net_teardown(rb_ctx_t *c)
{
    if (!c->netns)
        return;
    rb_sh("ip netns del %st 2>/dev/null", c->ns_prefix);
    for (uint32_t i = 0; i < c->o.regions; i++)
        rb_sh("ip netns del %sr%u 2>/dev/null", c->ns_prefix, i);
    c->netns = 0;
}

/* Where the job's files go by default.  A rollout node holds its weights in
 * memory, so the receivers' copies (mapped and patched in place) live on
 * tmpfs (/dev/shm) when it has room for every checkpoint file of the job;
 * on a disk file system each refit would also pay the kernel's writeback of
 * every dirtied page.  Otherwise $TMPDIR or /tmp. */
const char *rb_default_base(const rb_opts_t *o)
{
    const char *t = getenv("TMPDIR");
    const char *fallback = t && *t ? t : "/tmp";
    struct statfs fs;
    struct statvfs vs;
    if (statfs("/dev/shm", &fs) != 0 || fs.f_type != TMPFS_MAGIC ||
        statvfs("/dev/shm", &vs) != 0 || access("/dev/shm", W_OK) != 0)
        return fallback;
    /* versions 0..K, N receivers, each a BF16 checkpoint; 25% margin */
    double need = ((double)o->versions + 1 + o->receivers) * (double)o->params * 2 * 1.25;
    double avail = (double)vs.f_bavail * (double)vs.f_frsize, mem = 0;
    FILE *mi = fopen("/proc/meminfo", "r");
    char line[256];
    while (mi && fgets(line, sizeof(line), mi)) {
        unsigned long long kb;
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
            mem = (double)kb * 1024;
    }
    if (mi)
        fclose(mi);
    return need < avail && need + (2.0 * (1u << 30)) < mem ? "/dev/shm" : fallback;
}

int rb_net_setup(rb_ctx_t *c)
{
    snprintf(c->ns_prefix, sizeof(c->ns_prefix), "dc%d", (int)getpid() % 100000);
    if (c->o.netns_off || geteuid() != 0 || rb_sh("ip netns list >/dev/null 2>&1") != 0 ||
        rb_sh("command -v tc >/dev/null 2>&1") != 0)
        return 0;
    c->netns = 1;
    const char *p = c->ns_prefix;
    /* burst: at least 32 KiB, about 10 ms of the rate */
    uint64_t burst = (uint64_t)DC_MAX(32768.0, c->o.wan_bps / 8 / 100);
    int ok = rb_sh("ip netns add %st && ip -n %st link set lo up && "
                   "ip netns exec %st sysctl -qw net.ipv4.ip_forward=1", p, p, p) == 0;
    for (uint32_t i = 0; ok && i < c->o.regions; i++) {
        ok = rb_sh("ip netns add %sr%u && ip -n %sr%u link set lo up && "
                   "ip link add %st%u netns %st type veth peer name %sr%u netns %sr%u && "
                   "ip -n %st addr add 10.77.%u.1/24 dev %st%u && ip -n %st link set %st%u up && "
                   "ip -n %sr%u addr add 10.77.%u.2/24 dev %sr%u && ip -n %sr%u link set %sr%u up && "
                   "ip -n %sr%u route add default via 10.77.%u.1 && "
                   "tc -n %st qdisc add dev %st%u root handle 1: tbf rate %.0fbit burst %llu latency 100ms && "
                   "tc -n %sr%u qdisc add dev %sr%u root handle 1: tbf rate %.0fbit burst %llu latency 100ms",
                   p, i, p, i, p, i, p, p, i, p, i, p, i + 1, p, i, p, p, i, p, i, i + 1, p, i, p,
                   i, p, i, p, i, i + 1, p, p, i, c->o.wan_bps, (unsigned long long)burst, p, i,
                   p, i, c->o.wan_bps, (unsigned long long)burst) == 0;
        /* Inside each shaper, pure ACKs (IP packets under 128 bytes) leave
         * before queued data, as they would through fq_codel (Linux's
         * default qdisc, missing from this kernel): a region's uplink
         * carries its relay's data to the next region and the ACKs of the
         * data coming in, and those ACKs must not wait behind a 100 ms
         * FIFO.  The tbf still meters every byte at the WAN rate. */
        int wan_fifo = 0;
        if (dc_config_get_bool("wan_fifo", &wan_fifo) != DC_OK)
            DC_LOG_WARN("%s (plain FIFO queues off)", dc_last_error());
        for (int side = 0; ok && side < 2 && !wan_fifo; side++) {
            char ns[48], dev[48];
            snprintf(ns, sizeof(ns), side ? "%sr%u" : "%st", p, i);
            snprintf(dev, sizeof(dev), "%s%s%u", p, side ? "r" : "t", i);
            ok = rb_sh("tc -n %s qdisc add dev %s parent 1:1 handle 10: htb default 20 && "
                       "tc -n %s class add dev %s parent 10: classid 10:10 htb rate 10gbit "
                       "quantum 60000 prio 0 && "
                       "tc -n %s class add dev %s parent 10: classid 10:20 htb rate 10gbit "
                       "quantum 60000 prio 1 && "
                       "tc -n %s filter add dev %s parent 10: protocol ip prio 1 u32 "
                       "match u16 0x0000 0xff80 at 2 flowid 10:10",
                       ns, dev, ns, dev, ns, dev, ns, dev) == 0;
        }
    }
    /* Wait until every veth has its carrier: a node started before that
     * would not see the interface (UCX lists only running interfaces when
     * it starts, and then keeps to that list). */
    for (uint32_t i = 0; ok && i < c->o.regions; i++) {
        int up = 0;
        for (int w = 0; w < 200 && !up; w++) {
            up = rb_sh("ip -n %st link show %st%u | grep -q 'state UP' && "
                       "ip -n %sr%u link show %sr%u | grep -q 'state UP'",
                       p, p, i, p, i, p, i) == 0;
            if (!up)
                usleep(10000);
        }
        ok = up;
    }
    if (!ok) {
        rb_net_teardown(c);
        rb_say(c, "perf refit: could not build network namespaces; using loopback\n");
        return 0;
    }
    return 1;
}

/* Ctrl-C / kill: remove the namespaces (their processes die with the
 * process group's signal). */
rb_ctx_t *rb_active;
void rb_on_signal(int sig)
{
    if (rb_active)
        rb_net_teardown(rb_active);
    _exit(128 + sig);
}

/* --- job files ---------------------------------------------------------------------- */

int rb_path(char *buf, size_t len, const rb_ctx_t *c, const char *fmt, ...)
{
    char rel[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rel, sizeof(rel), fmt, ap);
    va_end(ap);
    int n = snprintf(buf, len, "%s/%s", c->dir, rel);
    return n > 0 && (size_t)n < len ? 0 : -1;
}

dc_status_t rb_write_topo(rb_ctx_t *c)
{
    char path[PATH_MAX];
    rb_path(path, sizeof(path), c, "topo.yaml");
    FILE *f = fopen(path, "w");
    if (!f)
        return dc_error_errno(DC_ERR_IO, errno, "%s", path);
    double wan = c->o.wan_bps > 0 ? c->o.wan_bps : 10e9;
    uint32_t ns = c->o.senders;
    if (ns > 1)
        fprintf(f, "shards: %u\n", ns);
    fprintf(f, "defaults: {lan: 10gbit, wan: %.0fbit, wan_latency: 1ms}\nregions:\n", wan);
    fprintf(f, "  - name: train\n    wan: %.0fbit\n    nodes:\n", wan * c->o.regions);
    if (ns == 1)
        fprintf(f, "      - {host: trainer, addr: \"%s:7300\", role: sender}\n",
                c->netns ? "10.77.1.1" : "127.0.0.1");
    for (uint32_t s = 0; ns > 1 && s < ns; s++)
        fprintf(f, "      - {host: trainer-%u, addr: \"%s:%u\", role: sender, shards: [%u]}\n", s,
                c->netns ? "10.77.1.1" : "127.0.0.1", (c->o.demo && !c->netns ? 7400 : 7300) + s,
                s);
    int node = (int)ns;
    uint32_t per = c->o.receivers / c->o.regions, extra = c->o.receivers % c->o.regions;
    for (uint32_t r = 0; r < c->o.regions; r++) {
        fprintf(f, "  - name: r%u\n    nodes:\n", r);
        uint32_t cnt = per + (r < extra ? 1 : 0);
        for (uint32_t k = 0; k < cnt; k++, node++) {
            char addr[64];
            if (c->netns)
                snprintf(addr, sizeof(addr), "10.77.%u.2:%d", r + 1, 7300 + node);
            else
                snprintf(addr, sizeof(addr), "127.0.0.1:%d", c->o.demo ? 7400 + node : 7300 + node);
            fprintf(f, "      - {host: r%u-%u, addr: \"%s\", role: receiver}\n", r, k, addr);
            c->region_of[node] = r;
        }
    }
    c->nnodes = node;
    if (!c->netns && c->o.demo) {
        /* the trainer's port too */
        fclose(f);
        rb_sh("sed -i 's/127.0.0.1:7300/127.0.0.1:7400/' '%s'", path);
        return DC_OK;
    }
    fclose(f);
    return DC_OK;
}

