/* topo.c - the topology model: building, validation, accessors, synthetic
 * topologies. */
#include "topology/topo.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *dc_topo_strdup(const char *s)
{
    return strdup(s ? s : "");
}

dc_topo_t *dc_topo_new(const char *source)
{
    dc_topo_t *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->source = dc_topo_strdup(source);
    if (!t->source) {
        free(t);
        return NULL;
    }
    t->wan_lat_s = DC_TOPO_DEFAULT_WAN_LAT;
    return t;
}

static void node_clear(dc_topo_node_t *n)
{
    free(n->name);
    free(n->addr);
    free(n->cluster);
    for (uint32_t i = 0; i < n->n_nics; i++)
        free(n->nics[i]);
    free(n->nics);
    for (uint32_t i = 0; i < n->n_gpus; i++)
        free(n->gpus[i]);
    free(n->gpus);
}

void dc_topo_free(dc_topo_t *t)
{
    if (!t)
        return;
    for (uint32_t i = 0; i < t->n_regions; i++)
        free(t->regions[i].name);
    free(t->regions);
    for (uint32_t i = 0; i < t->n_nodes; i++)
        node_clear(&t->nodes[i]);
    free(t->nodes);
    free(t->rlinks);
    free(t->source);
    free(t);
}

static bool grow(void **arr, uint32_t *cap, uint32_t need, size_t elem)
{
    if (need <= *cap)
        return true;
    uint32_t nc = *cap ? *cap * 2 : 16;
    while (nc < need)
        nc *= 2;
    void *p = realloc(*arr, (size_t)nc * elem);
    if (!p)
        return false;
    memset((char *)p + (size_t)*cap * elem, 0, (size_t)(nc - *cap) * elem);
    *arr = p;
    *cap = nc;
    return true;
}

int dc_topo_region_find(const dc_topo_t *t, const char *name)
{
    for (uint32_t i = 0; i < t->n_regions; i++)
        if (strcmp(t->regions[i].name, name) == 0)
            return (int)i;
    return -1;
}

dc_status_t dc_topo_add_region(dc_topo_t *t, const char *name, double lan_bps,
                               double wan_bps, uint32_t *idx)
{
    if (!grow((void **)&t->regions, &t->cap_regions, t->n_regions + 1, sizeof(*t->regions)))
        return dc_error(DC_ERR_NOMEM, "%s: out of memory adding region", t->source);
    dc_topo_region_t *r = &t->regions[t->n_regions];
    memset(r, 0, sizeof(*r));
    r->name = dc_topo_strdup(name);
    if (!r->name)
        return dc_error(DC_ERR_NOMEM, "%s: out of memory adding region", t->source);
    r->lan_bps = lan_bps;
    r->wan_bps = wan_bps;
    r->lan_lat_s = DC_TOPO_DEFAULT_LAN_LAT;
    *idx = t->n_regions++;
    return DC_OK;
}

dc_status_t dc_topo_add_node(dc_topo_t *t, const char *name, const char *addr,
                             uint32_t region, uint32_t role, uint32_t *idx)
{
    if (region >= t->n_regions)
        return dc_error(DC_ERR_INVALID, "%s: node '%s' in unknown region %u", t->source,
                        name, region);
    if (!grow((void **)&t->nodes, &t->cap_nodes, t->n_nodes + 1, sizeof(*t->nodes)))
        return dc_error(DC_ERR_NOMEM, "%s: out of memory adding node", t->source);
    dc_topo_node_t *n = &t->nodes[t->n_nodes];
    memset(n, 0, sizeof(*n));
    n->name = dc_topo_strdup(name);
    n->addr = dc_topo_strdup(addr);
    n->cluster = dc_topo_strdup("");
    if (!n->name || !n->addr || !n->cluster) {
        node_clear(n);
        memset(n, 0, sizeof(*n));
        return dc_error(DC_ERR_NOMEM, "%s: out of memory adding node", t->source);
    }
    n->region = region;
    n->role = role;
    *idx = t->n_nodes++;
    return DC_OK;
}

const dc_topo_rlink_t *dc_topo_rlink(const dc_topo_t *t, uint32_t a, uint32_t b)
{
    if (a > b) {
        uint32_t x = a;
        a = b;
        b = x;
    }
    for (uint32_t i = 0; i < t->n_rlinks; i++)
        if (t->rlinks[i].a == a && t->rlinks[i].b == b)
            return &t->rlinks[i];
    return NULL;
}

dc_status_t dc_topo_set_rlink(dc_topo_t *t, uint32_t a, uint32_t b, double bps, double lat_s)
{
    if (a == b || a >= t->n_regions || b >= t->n_regions)
        return dc_error(DC_ERR_INVALID, "%s: a link joins two different regions", t->source);
    if (a > b) {
        uint32_t x = a;
        a = b;
        b = x;
    }
    dc_topo_rlink_t *l = (dc_topo_rlink_t *)dc_topo_rlink(t, a, b);
    if (!l) {
        if (!grow((void **)&t->rlinks, &t->cap_rlinks, t->n_rlinks + 1, sizeof(*t->rlinks)))
            return dc_error(DC_ERR_NOMEM, "%s: out of memory adding link", t->source);
        l = &t->rlinks[t->n_rlinks++];
        l->lat_s = t->wan_lat_s;
    }
    l->a = a;
    l->b = b;
    if (bps >= 0)
        l->bps = bps;
    if (lat_s >= 0)
        l->lat_s = lat_s;
    return DC_OK;
}

double dc_topo_wan_latency(const dc_topo_t *t, uint32_t a, uint32_t b)
{
    const dc_topo_rlink_t *l = dc_topo_rlink(t, a, b);
    return l ? l->lat_s : t->wan_lat_s;
}

dc_status_t dc_parse_duration(const char *s, double *out)
{
    if (!s || !*s)
        return dc_error(DC_ERR_INVALID, "empty duration");
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !isfinite(v) || v < 0)
        return dc_error(DC_ERR_INVALID, "duration '%s' is not a non-negative number with a unit like 30ms", s);
    double mult;
    if (*end == 0 || strcmp(end, "s") == 0)
        mult = 1;
    else if (strcmp(end, "ms") == 0)
        mult = 1e-3;
    else if (strcmp(end, "us") == 0)
        mult = 1e-6;
    else if (strcmp(end, "ns") == 0)
        mult = 1e-9;
    else
        return dc_error(DC_ERR_INVALID, "duration '%s': unknown unit (use s, ms, us, ns)", s);
    *out = v * mult;
    return DC_OK;
}

static uint64_t all_shards(uint32_t n)
{
    return n >= 64 ? ~0ULL : ((1ULL << n) - 1);
}

/* The port of "HOST:PORT" / "[V6]:PORT" (digits only, at most 65535);
 * -1 when the address names no port (a host alone, "10.0.0.1"). */
static long addr_port(const char *addr)
{
    const char *colon = strrchr(addr, ':');
    if (!colon)
        return -1;
    if (addr[0] == '[' ? colon[-1] != ']' : strchr(addr, ':') != colon)
        return -1; /* a bare IPv6 address */
    if (!colon[1] || strlen(colon + 1) > 5)
        return -1;
    long p = 0;
    for (const char *c = colon + 1; *c; c++) {
        if (*c < '0' || *c > '9')
            return -1;
        p = p * 10 + (*c - '0');
    }
    return p <= 65535 ? p : -1;
}

typedef struct addr_ix {
    const char *addr;
    uint32_t node;
} addr_ix_t;

static int cmp_addr_ix(const void *a, const void *b)
{
    const addr_ix_t *x = a, *y = b;
    int c = strcmp(x->addr, y->addr);
    return c ? c : (x->node > y->node) - (x->node < y->node);
}

/* Every node listens on its address and its peers dial it: a port must be
 * fixed (not 0, which the kernel replaces with any free port) and no two
 * nodes may name the same HOST:PORT.  Addresses without a port (planning
 * only) are not checked. */
static dc_status_t check_addrs(const dc_topo_t *t)
{
    addr_ix_t *ix = malloc(sizeof(*ix) * t->n_nodes);
    if (!ix)
        return dc_error(DC_ERR_NOMEM, "%s: out of memory", t->source);
    uint32_t n = 0;
    for (uint32_t i = 0; i < t->n_nodes; i++) {
        const dc_topo_node_t *nd = &t->nodes[i];
        long port = addr_port(nd->addr);
        if (port < 0)
            continue;
        if (port == 0 && t->port0_ok)
            continue; /* filled from a rendezvous (dc_topo_fill_port0) */
        if (port == 0) {
            free(ix);
            return dc_error(DC_ERR_INVALID,
                            "%s:%u: node '%s' has port 0 in addr '%s': its peers dial that "
                            "address, so it needs a fixed port (or give `deltacast node` "
                            "--rendezvous DIR, where each such node publishes the port it "
                            "bound)",
                            t->source, nd->line, nd->name, nd->addr);
        }
        ix[n++] = (addr_ix_t){.addr = nd->addr, .node = i};
    }
    qsort(ix, n, sizeof(*ix), cmp_addr_ix);
    for (uint32_t k = 1; k < n; k++) {
        if (strcmp(ix[k - 1].addr, ix[k].addr) != 0)
            continue;
        const dc_topo_node_t *a = &t->nodes[ix[k - 1].node], *b = &t->nodes[ix[k].node];
        if (a->line > b->line) {
            const dc_topo_node_t *x = a;
            a = b;
            b = x;
        }
        dc_status_t st = dc_error(DC_ERR_INVALID,
                                  "%s:%u: nodes '%s' (line %u) and '%s' (line %u) have the same "
                                  "address %s",
                                  t->source, b->line, a->name, a->line, b->name, b->line, a->addr);
        free(ix);
        return st;
    }
    free(ix);
    return DC_OK;
}

int dc_topo_node_port0(const dc_topo_t *t, uint32_t i)
{
    return t && i < t->n_nodes && t->nodes[i].addr && addr_port(t->nodes[i].addr) == 0;
}

dc_status_t dc_topo_fill_port0(dc_topo_t *t, char *const *addrs)
{
    for (uint32_t i = 0; i < t->n_nodes; i++) {
        if (!dc_topo_node_port0(t, i))
            continue;
        if (!addrs || !addrs[i] || addr_port(addrs[i]) <= 0)
            return dc_error(DC_ERR_INVALID, "%s:%u: node '%s' (port 0): no port published for "
                            "it", t->source, t->nodes[i].line, t->nodes[i].name);
        char *a = dc_topo_strdup(addrs[i]);
        if (!a)
            return dc_error(DC_ERR_NOMEM, "%s: out of memory", t->source);
        free(t->nodes[i].addr);
        t->nodes[i].addr = a;
    }
    t->port0_ok = 0;
    return check_addrs(t);
}

dc_status_t dc_topo_finish(dc_topo_t *t)
{
    if (t->n_nodes == 0)
        return dc_error(DC_ERR_INVALID, "%s: no nodes", t->source);
    uint32_t n_senders = 0, n_receivers = 0;
    bool explicit_owner = false;
    for (uint32_t i = 0; i < t->n_nodes; i++) {
        if (t->nodes[i].role == DC_TOPO_ROLE_SENDER) {
            n_senders++;
            explicit_owner |= t->nodes[i].shards != 0;
        } else {
            n_receivers++;
        }
    }
    if (n_senders == 0)
        return dc_error(DC_ERR_INVALID, "%s: no sender (role: sender) among %u nodes", t->source,
                        t->n_nodes);
    if (n_receivers == 0)
        return dc_error(DC_ERR_INVALID, "%s: no receiver (role: receiver) among %u nodes",
                        t->source, t->n_nodes);
    if (t->n_shards == 0)
        t->n_shards = DC_MIN(n_senders, DC_TOPO_MAX_SHARDS);
    if (t->n_shards > DC_TOPO_MAX_SHARDS)
        return dc_error(DC_ERR_INVALID, "%s: %u shards, at most %d supported", t->source,
                        t->n_shards, DC_TOPO_MAX_SHARDS);
    uint64_t all = all_shards(t->n_shards);

    /* Unique host names (sorted copy of indices; n log n for 10k nodes). */
    for (uint32_t i = 0; i < t->n_nodes; i++)
        if (!t->nodes[i].name[0])
            return dc_error(DC_ERR_INVALID, "%s:%u: node without a host name", t->source,
                            t->nodes[i].line);
    {
        uint32_t *ix = malloc(sizeof(uint32_t) * t->n_nodes);
        if (!ix)
            return dc_error(DC_ERR_NOMEM, "%s: out of memory", t->source);
        for (uint32_t i = 0; i < t->n_nodes; i++)
            ix[i] = i;
        /* simple merge-free approach: qsort with a context-less comparator */
        const dc_topo_t *ctx = t;
        for (uint32_t w = 1; w < t->n_nodes; w *= 2) {
            /* bottom-up merge sort, stable, no global state */
            uint32_t *tmp = malloc(sizeof(uint32_t) * t->n_nodes);
            if (!tmp) {
                free(ix);
                return dc_error(DC_ERR_NOMEM, "%s: out of memory", t->source);
            }
            for (uint32_t lo = 0; lo < t->n_nodes; lo += 2 * w) {
                uint32_t mid = DC_MIN(lo + w, t->n_nodes), hi = DC_MIN(lo + 2 * w, t->n_nodes);
                uint32_t a = lo, b = mid, k = lo;
                while (a < mid && b < hi)
                    tmp[k++] = strcmp(ctx->nodes[ix[a]].name, ctx->nodes[ix[b]].name) <= 0 ? ix[a++]
                                                                                             : ix[b++];
                while (a < mid)
                    tmp[k++] = ix[a++];
                while (b < hi)
                    tmp[k++] = ix[b++];
            }
            memcpy(ix, tmp, sizeof(uint32_t) * t->n_nodes);
            free(tmp);
        }
        for (uint32_t i = 1; i < t->n_nodes; i++) {
            const dc_topo_node_t *a = &t->nodes[ix[i - 1]], *b = &t->nodes[ix[i]];
            if (strcmp(a->name, b->name) == 0) {
                dc_status_t st = dc_error(DC_ERR_INVALID,
                                          "%s:%u: host '%s' appears twice (first at line %u)",
                                          t->source, DC_MAX(a->line, b->line), a->name,
                                          DC_MIN(a->line, b->line));
                free(ix);
                return st;
            }
        }
        free(ix);
    }

    dc_status_t ast = check_addrs(t);
    if (ast != DC_OK)
        return ast;

    uint64_t owned = 0;
    uint32_t s_ord = 0;
    for (uint32_t i = 0; i < t->n_nodes; i++) {
        dc_topo_node_t *n = &t->nodes[i];
        const dc_topo_region_t *r = &t->regions[n->region];
        if (n->lan_bps <= 0)
            n->lan_bps = r->lan_bps > 0 ? r->lan_bps : DC_TOPO_DEFAULT_LAN_BPS;
        if (n->wan_bps <= 0)
            n->wan_bps = r->wan_bps > 0 ? r->wan_bps : DC_TOPO_DEFAULT_WAN_BPS;
        if (n->shards & ~all)
            return dc_error(DC_ERR_INVALID, "%s:%u: node '%s' names a shard >= shards (%u)",
                            t->source, n->line, n->name, t->n_shards);
        if (n->role == DC_TOPO_ROLE_SENDER) {
            if (!explicit_owner) {
                /* spread shards evenly over senders in file order */
                uint64_t m = 0;
                for (uint32_t s = 0; s < t->n_shards; s++) {
                    uint32_t owner = (uint32_t)((uint64_t)s * n_senders / t->n_shards);
                    if (owner == s_ord)
                        m |= 1ULL << s;
                }
                if (n_senders > t->n_shards)
                    m = 1ULL << ((uint64_t)s_ord * t->n_shards / n_senders);
                n->shards = m;
            }
            if (!n->shards)
                return dc_error(DC_ERR_INVALID,
                                "%s:%u: sender '%s' owns no shard (list 'shards' for every sender or for none)",
                                t->source, n->line, n->name);
            s_ord++;
            owned |= n->shards;
        } else if (n->shards == 0) {
            n->shards = all;
        }
    }
    if (owned != all) {
        for (uint32_t s = 0; s < t->n_shards; s++)
            if (!(owned >> s & 1))
                return dc_error(DC_ERR_INVALID, "%s: shard %u is owned by no sender", t->source, s);
    }
    return DC_OK;
}

/* --- accessors ----------------------------------------------------------- */

uint32_t dc_topo_node_count(const dc_topo_t *t) { return t ? t->n_nodes : 0; }
uint32_t dc_topo_region_count(const dc_topo_t *t) { return t ? t->n_regions : 0; }
uint32_t dc_topo_shard_count(const dc_topo_t *t) { return t ? t->n_shards : 0; }

const char *dc_topo_region_name(const dc_topo_t *t, uint32_t i)
{
    return (t && i < t->n_regions) ? t->regions[i].name : "";
}

dc_status_t dc_topo_node(const dc_topo_t *t, uint32_t i, dc_topo_node_info_t *out)
{
    if (!t || !out)
        return dc_error(DC_ERR_INVALID, "dc_topo_node: NULL argument");
    dc_status_t st = dc_struct_check(out, sizeof(dc_topo_node_info_t),
                                     sizeof(dc_topo_node_info_t), "dc_topo_node: out");
    if (st != DC_OK)
        return st;
    if (i >= t->n_nodes)
        return dc_error(DC_ERR_INVALID, "dc_topo_node: node %u out of range (%u nodes)", i,
                        t->n_nodes);
    const dc_topo_node_t *n = &t->nodes[i];
    dc_topo_node_info_t v = {.size = sizeof(v)};
    v.name = n->name;
    v.addr = n->addr;
    v.region = t->regions[n->region].name;
    v.cluster = n->cluster;
    v.region_index = n->region;
    v.role = n->role;
    v.lan_bps = n->lan_bps;
    v.wan_bps = n->wan_bps;
    v.shards = n->shards;
    v.n_nics = n->n_nics;
    v.nics = (const char *const *)n->nics;
    v.n_gpus = n->n_gpus;
    v.gpus = (const char *const *)n->gpus;
    *out = v;
    return DC_OK;
}

dc_status_t dc_topo_find(const dc_topo_t *t, const char *name, uint32_t *out)
{
    if (!t || !name || !out)
        return dc_error(DC_ERR_INVALID, "dc_topo_find: NULL argument");
    for (uint32_t i = 0; i < t->n_nodes; i++)
        if (strcmp(t->nodes[i].name, name) == 0) {
            *out = i;
            return DC_OK;
        }
    return dc_error(DC_ERR_NOT_FOUND, "%s: no node named '%s'", t->source, name);
}

/* --- synthetic ----------------------------------------------------------- */

static dc_status_t synth(uint32_t r, uint32_t n, uint32_t n_senders, double wan, double lan,
                         uint16_t base_port, bool local, dc_topo_t **out)
{
    if (r == 0 || n == 0 || r > 100000 || n > 1000000 || (uint64_t)r * n > 10000000)
        return dc_error(DC_ERR_INVALID,
                        "synthetic topology: R and N must be >= 1 (and R*N <= 1e7), got %u:%u", r, n);
    if (local && (uint64_t)base_port + (uint64_t)r * n + 1 > 65536)
        return dc_error(DC_ERR_INVALID, "synthetic local topology: ports past 65535");
    dc_topo_t *t = dc_topo_new(local ? "synthetic-local" : "synthetic");
    if (!t)
        return dc_error(DC_ERR_NOMEM, "synthetic topology: out of memory");
    dc_status_t st;
    uint32_t reg, idx;
    char name[64], addr[64];
    uint32_t port = base_port;
    if ((st = dc_topo_add_region(t, "train", lan, wan, &reg)) != DC_OK)
        goto fail;
    for (uint32_t i = 0; i < n_senders; i++) {
        if (local)
            snprintf(name, sizeof(name), n_senders == 1 ? "trainer" : "trainer%u", i);
        else
            snprintf(name, sizeof(name), "train-s%u", i);
        snprintf(addr, sizeof(addr), "127.0.0.1:%u", port++);
        if ((st = dc_topo_add_node(t, name, local ? addr : "", reg, DC_TOPO_ROLE_SENDER, &idx)) != DC_OK)
            goto fail;
    }
    for (uint32_t g = 0; g < r; g++) {
        char rn[32];
        snprintf(rn, sizeof(rn), "r%u", g);
        if ((st = dc_topo_add_region(t, rn, lan, wan, &reg)) != DC_OK)
            goto fail;
        for (uint32_t i = 0; i < n; i++) {
            snprintf(name, sizeof(name), "r%u-n%u", g, i);
            snprintf(addr, sizeof(addr), "127.0.0.1:%u", port++);
            if ((st = dc_topo_add_node(t, name, local ? addr : "", reg, DC_TOPO_ROLE_RECEIVER, &idx)) != DC_OK)
                goto fail;
        }
    }
    if ((st = dc_topo_finish(t)) != DC_OK)
        goto fail;
    *out = t;
    return DC_OK;
fail:
    dc_topo_free(t);
    return st;
}

dc_status_t dc_topo_synthetic(uint32_t r, uint32_t n, double wan_bps, double lan_bps,
                              dc_topo_t **out)
{
    if (!out)
        return dc_error(DC_ERR_INVALID, "dc_topo_synthetic: NULL out");
    if (wan_bps < 0 || lan_bps < 0 || !isfinite(wan_bps) || !isfinite(lan_bps))
        return dc_error(DC_ERR_INVALID, "synthetic topology: rates must be positive");
    return synth(r, n, n, wan_bps > 0 ? wan_bps : DC_TOPO_DEFAULT_WAN_BPS,
                 lan_bps > 0 ? lan_bps : DC_TOPO_DEFAULT_LAN_BPS, 0, false, out);
}

dc_status_t dc_topo_synthetic_local(uint32_t r, uint32_t n, uint16_t base_port, dc_topo_t **out)
{
    if (!out)
        return dc_error(DC_ERR_INVALID, "dc_topo_synthetic_local: NULL out");
    return synth(r, n, 1, DC_TOPO_DEFAULT_WAN_BPS, DC_TOPO_DEFAULT_LAN_BPS, base_port, true, out);
}

static dc_status_t parse_u32_field(const char *spec, const char *f, size_t len, const char *what,
                                   uint32_t *out)
{
    char buf[32];
    if (len == 0 || len >= sizeof(buf))
        return dc_error(DC_ERR_INVALID, "synthetic '%s': %s is missing or too long", spec, what);
    memcpy(buf, f, len);
    buf[len] = 0;
    for (size_t i = 0; i < len; i++)
        if (!isdigit((unsigned char)buf[i]))
            return dc_error(DC_ERR_INVALID, "synthetic '%s': %s '%s' is not a positive integer",
                            spec, what, buf);
    unsigned long v = strtoul(buf, NULL, 10);
    if (v == 0 || v > 10000000)
        return dc_error(DC_ERR_INVALID, "synthetic '%s': %s '%s' out of range", spec, what, buf);
    *out = (uint32_t)v;
    return DC_OK;
}

dc_status_t dc_topo_synthetic_parse(const char *spec, dc_topo_t **out)
{
    if (!spec || !out)
        return dc_error(DC_ERR_INVALID, "dc_topo_synthetic_parse: NULL argument");
    const char *f[4] = {0};
    size_t l[4] = {0};
    int nf = 0;
    const char *p = spec;
    while (nf < 4) {
        const char *c = strchr(p, ':');
        f[nf] = p;
        l[nf] = c ? (size_t)(c - p) : strlen(p);
        nf++;
        if (!c)
            break;
        p = c + 1;
        if (nf == 4)
            return dc_error(DC_ERR_INVALID, "synthetic '%s': expected R:N[:WAN[:LAN]]", spec);
    }
    if (nf < 2)
        return dc_error(DC_ERR_INVALID, "synthetic '%s': expected R:N[:WAN[:LAN]]", spec);
    uint32_t r, n;
    dc_status_t st;
    if ((st = parse_u32_field(spec, f[0], l[0], "R", &r)) != DC_OK)
        return st;
    if ((st = parse_u32_field(spec, f[1], l[1], "N", &n)) != DC_OK)
        return st;
    double rate[2] = {0, 0};
    for (int k = 2; k < nf; k++) {
        char buf[64];
        if (l[k] == 0 || l[k] >= sizeof(buf))
            return dc_error(DC_ERR_INVALID, "synthetic '%s': empty or too long rate", spec);
        memcpy(buf, f[k], l[k]);
        buf[l[k]] = 0;
        if ((st = dc_parse_rate(buf, &rate[k - 2])) != DC_OK) {
            dc_error_prefix("synthetic '%s'", spec);
            return st;
        }
    }
    return dc_topo_synthetic(r, n, rate[0], rate[1], out);
}
