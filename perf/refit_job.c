/* refit_job.c - a refit job on this machine (see refit_job.h): its work
 * directory, shaped network of namespaces, topology file and paths, its
 * first versions, the launch of its nodes and the byte comparison of a
 * receiver.  Used by perf refit (and the demo) and perf soak. */
#include "perf/refit_job.h"
#include "util/dc_util.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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


/* --- the job: open, start, close ---------------------------------------------------------- */

dc_status_t rb_job_open(rb_ctx_t *c, const char *name, int clear)
{
    ssize_t sl = readlink("/proc/self/exe", c->self, sizeof(c->self) - 1);
    if (sl <= 0)
        return dc_error(DC_ERR_IO, "cannot find the deltacast binary");
    c->self[sl] = 0;
    if (c->o.workdir) {
        snprintf(c->dir, sizeof(c->dir), "%s", c->o.workdir);
        if ((clear && rb_sh("rm -rf '%s'", c->dir)) || rb_sh("mkdir -p '%s'", c->dir))
            return dc_error(DC_ERR_IO, "cannot create %s", c->dir);
    } else {
        const char *base = rb_default_base(&c->o);
        snprintf(c->dir, sizeof(c->dir), "%s/deltacast-%s-XXXXXX", base, name);
        if (!mkdtemp(c->dir))
            return dc_error_errno(DC_ERR_IO, errno, "mkdtemp in %s", base);
    }
    FILE *r = fopen("/dev/urandom", "rb");
    uint8_t b[32] = {0};
    if (!r || fread(b, 1, sizeof(b), r) != sizeof(b)) {
        if (r)
            fclose(r);
        return dc_error(DC_ERR_IO, "cannot read /dev/urandom for the job secret");
    }
    fclose(r);
    for (int i = 0; i < 32; i++)
        sprintf(c->secret + 2 * i, "%02x", b[i]);
    return DC_OK;
}

dc_status_t rb_job_start(rb_ctx_t *c)
{
    c->netns = rb_net_setup(c);
    rb_active = c;
    signal(SIGINT, rb_on_signal);
    signal(SIGTERM, rb_on_signal);
    return rb_write_topo(c);
}

void rb_say_network(const rb_ctx_t *c, const char *unshaped)
{
    if (c->netns)
        rb_say(c, "  WAN: one veth per region, shaped to %s each way\n", c->o.wan_text);
    else
        rb_say(c, "  NOTE: %s: loopback, links NOT shaped%s\n",
               geteuid() != 0 ? "not root" : "network namespaces unavailable or disabled",
               unshaped);
}

void rb_job_close(rb_ctx_t *c, int keep)
{
    rb_net_teardown(c);
    rb_active = NULL;
    if (!keep)
        rb_sh("rm -rf '%s'", c->dir);
}

/* --- versions and receivers ---------------------------------------------------------------- */

static void rb_gen_progress(void *ctx, uint64_t done, uint64_t total)
{
    (void)ctx;
    fprintf(stderr, "\r  generating the model: %5.1f%%",
            total ? 100.0 * (double)done / (double)total : 100.0);
}

dc_status_t rb_gen_first(rb_ctx_t *c, int progress, dc_gen_result_t *gr)
{
    char v0[PATH_MAX], v1[PATH_MAX];
    rb_sh("mkdir -p '%s/ver'", c->dir);
    rb_path(v0, sizeof(v0), c, "ver/v0.safetensors");
    rb_path(v1, sizeof(v1), c, "ver/v1.safetensors");
    dc_gen_opts_t g;
    memset(&g, 0, sizeof(g));
    g.params = c->o.params;
    g.change_rate = c->o.rate;
    g.model = c->o.inject ? DC_GEN_INJECT : DC_GEN_OPTIMIZER;
    g.seed = c->o.seed;
    g.dtype = DC_DTYPE_BF16;
    progress = progress && dc_cli_is_tty();
    if (progress)
        g.progress = rb_gen_progress;
    dc_status_t st = dc_gen_write(&g, v0, v1, gr);
    if (progress)
        fprintf(stderr, "\r%40s\r", "");
    return st;
}

dc_status_t rb_receivers_at_v0(const rb_ctx_t *c)
{
    for (int i = (int)c->o.senders; i < c->nnodes; i++)
        if (rb_sh("cp --reflink=auto '%s/ver/v0.safetensors' '%s/w%d.st'", c->dir, c->dir, i))
            return dc_error(DC_ERR_IO, "cannot copy v0 for receiver %d", i);
    return DC_OK;
}

/* 1 when files a and b have the same bytes. */
static int rb_same(const char *a, const char *b)
{
    int fa = open(a, O_RDONLY), fb = open(b, O_RDONLY);
    struct stat sa, sb;
    int same = 0;
    if (fa >= 0 && fb >= 0 && fstat(fa, &sa) == 0 && fstat(fb, &sb) == 0 &&
        sa.st_size == sb.st_size) {
        if (sa.st_size == 0) {
            same = 1;
        } else {
            void *ma = mmap(NULL, (size_t)sa.st_size, PROT_READ, MAP_SHARED, fa, 0);
            void *mb = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fb, 0);
            if (ma != MAP_FAILED && mb != MAP_FAILED)
                same = memcmp(ma, mb, (size_t)sa.st_size) == 0;
            if (ma != MAP_FAILED)
                munmap(ma, (size_t)sa.st_size);
            if (mb != MAP_FAILED)
                munmap(mb, (size_t)sb.st_size);
        }
    }
    if (fa >= 0)
        close(fa);
    if (fb >= 0)
        close(fb);
    return same;
}

int rb_receiver_is(const rb_ctx_t *c, int rank, uint64_t v)
{
    char w[PATH_MAX], ref[PATH_MAX];
    if (rb_path(w, sizeof(w), c, "w%d.st", rank) != 0 ||
        rb_path(ref, sizeof(ref), c, "ver/v%llu.safetensors", (unsigned long long)v) != 0)
        return 0;
    return rb_same(w, ref);
}

/* --- the nodes ------------------------------------------------------------------------------ */

pid_t rb_spawn(const rb_ctx_t *c, int rank, rb_child_fn child, void *arg, const char *fmt, ...)
{
    char args[6144], cmd[8192], ns[64] = "";
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(args, sizeof(args), fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= sizeof(args))
        return -1;
    if (c->netns && rank < (int)c->o.senders)
        snprintf(ns, sizeof(ns), "ip netns exec %st ", c->ns_prefix);
    else if (c->netns)
        snprintf(ns, sizeof(ns), "ip netns exec %sr%u ", c->ns_prefix, c->region_of[rank]);
    k = snprintf(cmd, sizeof(cmd), "exec %s'%s' node --topology '%s/topo.yaml' --rank %d %s", ns,
                 c->self, c->dir, rank, args);
    if (k < 0 || (size_t)k >= sizeof(cmd))
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        if (child && child(arg, rank) != 0)
            _exit(127);
        setenv("DELTACAST_SECRET", c->secret, 1);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    return pid;
}

pid_t rb_spawn_receiver(const rb_ctx_t *c, int rank, rb_child_fn child, void *arg)
{
    return rb_spawn(c, rank, child, arg,
                    "--weights '%s/w%d.st' --state '%s/state/%d' >>'%s/log%d' 2>&1", c->dir, rank,
                    c->dir, rank, c->dir, rank);
}

dc_status_t rb_launch(const rb_ctx_t *c, pid_t (*spawn)(void *arg, int rank), void *arg,
                      pid_t *pids)
{
    for (int i = 0; pids && i < c->nnodes; i++)
        pids[i] = 0;
    for (int i = 0; i < c->nnodes; i++) {
        pid_t pid = spawn(arg, i);
        if (pid <= 0)
            return dc_error(DC_ERR_IO, "cannot start node %d (%s)", i,
                            i == 0 ? "the coordinator" : i < (int)c->o.senders ? "a sender"
                                                                               : "a receiver");
        if (pids)
            pids[i] = pid;
        if (i == 0)
            usleep(100000);
    }
    return DC_OK;
}
