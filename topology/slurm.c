/*
 * slurm.c - Slurm's compressed host lists and the host -> region map.
 *
 *   "gpu-[001-004,010],cpu7"  ->  gpu-001 gpu-002 gpu-003 gpu-004 gpu-010 cpu7
 *   "a[1-2]-b[3-4]"           ->  a1-b3 a1-b4 a2-b3 a2-b4
 *
 * Grammar: list := item (',' item)*; item := (literal | '[' ranges ']')+;
 * ranges := range (',' range)*; range := digits ('-' digits)?.  The width of
 * the first number of a range is kept (zero padding).  Host characters:
 * letters, digits, '-', '_', '.'.
 */
#include "topology/topo.h"

#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DC_SLURM_MAX_HOSTS 1000000
#define DC_SLURM_MAX_GROUPS 8

typedef struct {
    uint64_t lo, hi;
    int width;
} srange_t;

typedef struct {
    /* segment k: literal text lit[k] then (if k < n_groups) a bracket group */
    const char *lit[DC_SLURM_MAX_GROUPS + 1];
    size_t lit_len[DC_SLURM_MAX_GROUPS + 1];
    srange_t *ranges[DC_SLURM_MAX_GROUPS];
    size_t n_ranges[DC_SLURM_MAX_GROUPS];
    uint64_t count[DC_SLURM_MAX_GROUPS]; /* numbers in the group */
    int n_groups;
} sitem_t;

static bool host_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '_' || c == '.';
}

static void item_clear(sitem_t *it)
{
    for (int g = 0; g < it->n_groups; g++)
        free(it->ranges[g]);
    memset(it, 0, sizeof(*it));
}

/* Parse digits at s[*i]; returns false if none or overflow. */
static bool parse_num(const char *s, size_t *i, uint64_t *v, int *width)
{
    size_t start = *i;
    uint64_t x = 0;
    while (s[*i] >= '0' && s[*i] <= '9') {
        if (*i - start >= 18)
            return false;
        x = x * 10 + (uint64_t)(s[*i] - '0');
        (*i)++;
    }
    if (*i == start)
        return false;
    *v = x;
    *width = (int)(*i - start);
    return true;
}

/* Parse one item starting at s[*i]; stops at a top-level ',' or NUL. */
static dc_status_t parse_item(const char *s, size_t *i, sitem_t *it)
{
    memset(it, 0, sizeof(*it));
    size_t start = *i;
    for (;;) {
        size_t ls = *i;
        while (host_char(s[*i]))
            (*i)++;
        it->lit[it->n_groups] = s + ls;
        it->lit_len[it->n_groups] = *i - ls;
        if (s[*i] != '[')
            break;
        if (it->n_groups == DC_SLURM_MAX_GROUPS)
            return dc_error(DC_ERR_INVALID, "host list '%s': more than %d bracket groups in one name (column %zu)",
                            s, DC_SLURM_MAX_GROUPS, *i + 1);
        int g = it->n_groups++;
        size_t open_col = *i + 1;
        (*i)++; /* '[' */
        size_t cap = 0;
        for (;;) {
            srange_t r;
            size_t col = *i + 1;
            if (!parse_num(s, i, &r.lo, &r.width))
                return dc_error(DC_ERR_INVALID, "host list '%s': expected a number at column %zu",
                                s, col);
            r.hi = r.lo;
            if (s[*i] == '-') {
                (*i)++;
                int w2;
                col = *i + 1;
                if (!parse_num(s, i, &r.hi, &w2))
                    return dc_error(DC_ERR_INVALID,
                                    "host list '%s': expected the end of a range at column %zu", s, col);
                if (r.hi < r.lo)
                    return dc_error(DC_ERR_INVALID,
                                    "host list '%s': range %llu-%llu runs backwards (column %zu)", s,
                                    (unsigned long long)r.lo, (unsigned long long)r.hi, col);
            }
            if (r.hi - r.lo >= DC_SLURM_MAX_HOSTS)
                return dc_error(DC_ERR_INVALID, "host list '%s': range at column %zu is too large",
                                s, col);
            if (it->n_ranges[g] == cap) {
                cap = cap ? cap * 2 : 4;
                srange_t *p = realloc(it->ranges[g], cap * sizeof(*p));
                if (!p)
                    return dc_error(DC_ERR_NOMEM, "host list: out of memory");
                it->ranges[g] = p;
            }
            it->ranges[g][it->n_ranges[g]++] = r;
            it->count[g] += r.hi - r.lo + 1;
            if (it->count[g] > DC_SLURM_MAX_HOSTS)
                return dc_error(DC_ERR_INVALID, "host list '%s': more than %d hosts", s,
                                DC_SLURM_MAX_HOSTS);
            if (s[*i] == ',') {
                (*i)++;
                continue;
            }
            if (s[*i] == ']') {
                (*i)++;
                break;
            }
            if (s[*i] == 0)
                return dc_error(DC_ERR_INVALID, "host list '%s': '[' at column %zu is never closed",
                                s, open_col);
            return dc_error(DC_ERR_INVALID, "host list '%s': unexpected '%c' at column %zu", s,
                            s[*i], *i + 1);
        }
    }
    if (s[*i] != ',' && s[*i] != 0) {
        if (s[*i] == ']')
            return dc_error(DC_ERR_INVALID, "host list '%s': ']' at column %zu without '['", s, *i + 1);
        return dc_error(DC_ERR_INVALID, "host list '%s': character 0x%02x at column %zu is not allowed in a host name",
                        s, (unsigned)(unsigned char)s[*i], *i + 1);
    }
    if (*i == start)
        return dc_error(DC_ERR_INVALID, "host list '%s': empty host name at column %zu", s, *i + 1);
    return DC_OK;
}

/* The k-th number of group g. */
static void group_nth(const sitem_t *it, int g, uint64_t k, uint64_t *v, int *w)
{
    for (size_t r = 0; r < it->n_ranges[g]; r++) {
        uint64_t n = it->ranges[g][r].hi - it->ranges[g][r].lo + 1;
        if (k < n) {
            *v = it->ranges[g][r].lo + k;
            *w = it->ranges[g][r].width;
            return;
        }
        k -= n;
    }
    *v = 0;
    *w = 1;
}

void dc_slurm_hosts_free(char **hosts, size_t n)
{
    if (!hosts)
        return;
    for (size_t i = 0; i < n; i++)
        free(hosts[i]);
    free(hosts);
}

dc_status_t dc_slurm_expand(const char *list, char ***hosts, size_t *n)
{
    if (!list || !hosts || !n)
        return dc_error(DC_ERR_INVALID, "dc_slurm_expand: NULL argument");
    if (!*list)
        return dc_error(DC_ERR_INVALID, "host list is empty");
    char **out = NULL;
    size_t cnt = 0, cap = 0;
    dc_status_t st = DC_OK;
    size_t i = 0;
    sitem_t it;
    memset(&it, 0, sizeof(it));
    for (;;) {
        if ((st = parse_item(list, &i, &it)) != DC_OK)
            goto fail;
        uint64_t total = 1;
        for (int g = 0; g < it.n_groups; g++) {
            total *= it.count[g];
            if (total > DC_SLURM_MAX_HOSTS) {
                st = dc_error(DC_ERR_INVALID, "host list '%s': more than %d hosts", list,
                              DC_SLURM_MAX_HOSTS);
                goto fail;
            }
        }
        if (cnt + total > DC_SLURM_MAX_HOSTS) {
            st = dc_error(DC_ERR_INVALID, "host list '%s': more than %d hosts", list, DC_SLURM_MAX_HOSTS);
            goto fail;
        }
        size_t len = 0;
        for (int g = 0; g <= it.n_groups; g++)
            len += it.lit_len[g] + 20;
        for (uint64_t k = 0; k < total; k++) {
            if (cnt == cap) {
                size_t nc = cap ? cap * 2 : 16;
                char **p = realloc(out, nc * sizeof(*p));
                if (!p) {
                    st = dc_error(DC_ERR_NOMEM, "host list: out of memory");
                    goto fail;
                }
                out = p;
                cap = nc;
            }
            char *h = malloc(len + 1);
            if (!h) {
                st = dc_error(DC_ERR_NOMEM, "host list: out of memory");
                goto fail;
            }
            /* mixed-radix digits, last group fastest (Slurm's order) */
            uint64_t idx[DC_SLURM_MAX_GROUPS];
            uint64_t rem = k;
            for (int g = it.n_groups - 1; g >= 0; g--) {
                idx[g] = rem % it.count[g];
                rem /= it.count[g];
            }
            size_t p = 0;
            for (int g = 0; g <= it.n_groups; g++) {
                memcpy(h + p, it.lit[g], it.lit_len[g]);
                p += it.lit_len[g];
                if (g < it.n_groups) {
                    uint64_t v;
                    int w;
                    group_nth(&it, g, idx[g], &v, &w);
                    p += (size_t)snprintf(h + p, 21, "%0*llu", w, (unsigned long long)v);
                }
            }
            h[p] = 0;
            out[cnt++] = h;
        }
        item_clear(&it);
        if (list[i] == 0)
            break;
        i++; /* ',' */
        if (list[i] == 0) {
            st = dc_error(DC_ERR_INVALID, "host list '%s': trailing ','", list);
            goto fail;
        }
    }
    *hosts = out;
    *n = cnt;
    return DC_OK;
fail:
    item_clear(&it);
    dc_slurm_hosts_free(out, cnt);
    return st;
}

dc_status_t dc_topo_region_for_host(const char *map, const char *host, char *region, size_t cap)
{
    if (!host || !region || cap == 0)
        return dc_error(DC_ERR_INVALID, "dc_topo_region_for_host: NULL argument");
    const char *found = "default";
    size_t found_len = strlen(found);
    const char *p = map ? map : "";
    char pat[256];
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        if (!eq || eq == p || eq == p + len - 1)
            return dc_error(DC_ERR_INVALID, "region map '%s': entry '%.*s' is not PATTERN=REGION",
                            map, (int)len, p);
        size_t pl = (size_t)(eq - p);
        if (pl >= sizeof(pat))
            return dc_error(DC_ERR_INVALID, "region map: pattern too long");
        memcpy(pat, p, pl);
        pat[pl] = 0;
        if (fnmatch(pat, host, 0) == 0) {
            found = eq + 1;
            found_len = len - pl - 1;
            break;
        }
        if (!end)
            break;
        p = end + 1;
    }
    if (found_len + 1 > cap)
        return dc_error(DC_ERR_INVALID, "region name too long");
    memcpy(region, found, found_len);
    region[found_len] = 0;
    return DC_OK;
}

dc_status_t dc_topo_from_slurm(const char *nodelist, const char *region_map, uint32_t n_senders,
                               double wan_bps, double lan_bps, dc_topo_t **out)
{
    if (!nodelist || !out)
        return dc_error(DC_ERR_INVALID, "dc_topo_from_slurm: NULL argument");
    char **hosts = NULL;
    size_t n = 0;
    dc_status_t st = dc_slurm_expand(nodelist, &hosts, &n);
    if (st != DC_OK)
        return st;
    dc_topo_t *t = NULL;
    if (n_senders == 0 || n_senders >= n) {
        st = dc_error(DC_ERR_INVALID, "slurm: %u senders among %zu hosts leaves no receiver",
                      n_senders, n);
        goto done;
    }
    t = dc_topo_new("slurm");
    if (!t) {
        st = dc_error(DC_ERR_NOMEM, "slurm: out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        char reg[128];
        if ((st = dc_topo_region_for_host(region_map, hosts[i], reg, sizeof(reg))) != DC_OK)
            goto done;
        int r = dc_topo_region_find(t, reg);
        uint32_t ri, idx;
        if (r < 0) {
            if ((st = dc_topo_add_region(t, reg, lan_bps, wan_bps, &ri)) != DC_OK)
                goto done;
        } else {
            ri = (uint32_t)r;
        }
        if ((st = dc_topo_add_node(t, hosts[i], hosts[i], ri,
                                   i < n_senders ? DC_TOPO_ROLE_SENDER : DC_TOPO_ROLE_RECEIVER, &idx)) != DC_OK)
            goto done;
    }
    if ((st = dc_topo_finish(t)) != DC_OK)
        goto done;
    *out = t;
    t = NULL;
done:
    dc_topo_free(t);
    dc_slurm_hosts_free(hosts, n);
    return st;
}

/* "2(x3),1" -> counts 2 2 2 1 (Slurm's SLURM_TASKS_PER_NODE). */
static dc_status_t tasks_per_node_parse(const char *s, uint32_t *counts, size_t nhosts)
{
    size_t k = 0;
    const char *p = s;
    while (*p) {
        char *end;
        unsigned long c = strtoul(p, &end, 10);
        unsigned long rep = 1;
        if (end == p || c == 0 || c > 65535)
            return dc_error(DC_ERR_INVALID, "tasks per node '%s': expected a count at column %zu",
                            s, (size_t)(p - s) + 1);
        p = end;
        if (p[0] == '(') {
            if (p[1] != 'x')
                return dc_error(DC_ERR_INVALID, "tasks per node '%s': expected '(xN)' at column %zu",
                                s, (size_t)(p - s) + 1);
            rep = strtoul(p + 2, &end, 10);
            if (end == p + 2 || *end != ')' || rep == 0 || rep > DC_SLURM_MAX_HOSTS)
                return dc_error(DC_ERR_INVALID, "tasks per node '%s': bad repeat at column %zu",
                                s, (size_t)(p - s) + 1);
            p = end + 1;
        }
        for (unsigned long r = 0; r < rep; r++) {
            if (k == nhosts)
                return dc_error(DC_ERR_INVALID, "tasks per node '%s' names more hosts than the "
                                "host list's %zu", s, nhosts);
            counts[k++] = (uint32_t)c;
        }
        if (*p == ',')
            p++;
        else if (*p)
            return dc_error(DC_ERR_INVALID, "tasks per node '%s': unexpected '%c' at column %zu",
                            s, *p, (size_t)(p - s) + 1);
    }
    if (k != nhosts)
        return dc_error(DC_ERR_INVALID, "tasks per node '%s' names %zu hosts, the host list %zu",
                        s, k, nhosts);
    return DC_OK;
}

void dc_launch_place_free(dc_launch_place_t *p)
{
    if (!p)
        return;
    dc_slurm_hosts_free(p->hosts, p->n_hosts);
    free(p->host_of);
    free(p->local_of);
    free(p->on_host);
    memset(p, 0, sizeof(*p));
}

typedef struct host_ix {
    const char *name;
    size_t k;
} host_ix_t;

static int cmp_host_ix(const void *a, const void *b)
{
    const host_ix_t *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->k > y->k) - (x->k < y->k);
}

/* local_of / on_host of every task, hosts with the same name merged. */
static dc_status_t canon_hosts(dc_launch_place_t *p, const uint32_t *counts)
{
    size_t h = p->n_hosts;
    host_ix_t *ix = malloc(h * sizeof(*ix));
    size_t *canon = malloc(h * sizeof(*canon));
    uint32_t *next = calloc(h, sizeof(*next)), *total = calloc(h, sizeof(*total));
    if (!ix || !canon || !next || !total) {
        free(ix), free(canon), free(next), free(total);
        return dc_error(DC_ERR_NOMEM, "launch: out of memory");
    }
    for (size_t k = 0; k < h; k++)
        ix[k] = (host_ix_t){p->hosts[k], k};
    qsort(ix, h, sizeof(*ix), cmp_host_ix);
    for (size_t k = 0; k < h; k++)
        canon[ix[k].k] = k > 0 && strcmp(ix[k].name, ix[k - 1].name) == 0 ? canon[ix[k - 1].k]
                                                                          : ix[k].k;
    for (size_t k = 0; k < h; k++)
        total[canon[k]] += counts[k];
    for (uint32_t r = 0; r < p->n_tasks; r++) {
        size_t c = canon[p->host_of[r]];
        p->local_of[r] = next[c]++;
        p->on_host[r] = total[c];
    }
    free(ix), free(canon), free(next), free(total);
    return DC_OK;
}

dc_status_t dc_launch_place(const char *nodelist, const char *tasks_per_node, uint32_t tasks,
                            dc_launch_place_t *out)
{
    memset(out, 0, sizeof(*out));
    if (!nodelist)
        return dc_error(DC_ERR_INVALID, "launch: no host list");
    dc_status_t st = dc_slurm_expand(nodelist, &out->hosts, &out->n_hosts);
    if (st != DC_OK)
        return st;
    size_t h = out->n_hosts;
    uint32_t *counts = calloc(h, sizeof(*counts));
    if (!counts) {
        dc_launch_place_free(out);
        return dc_error(DC_ERR_NOMEM, "launch: out of memory");
    }
    if (tasks == 0)
        tasks = (uint32_t)h;
    if (tasks > DC_SLURM_MAX_HOSTS) {
        free(counts);
        dc_launch_place_free(out);
        return dc_error(DC_ERR_INVALID, "launch: %u tasks, at most %d", tasks, DC_SLURM_MAX_HOSTS);
    }
    if (tasks_per_node && *tasks_per_node) {
        if ((st = tasks_per_node_parse(tasks_per_node, counts, h)) != DC_OK)
            goto out;
        uint64_t sum = 0;
        for (size_t k = 0; k < h; k++)
            sum += counts[k];
        if (sum != tasks) {
            st = dc_error(DC_ERR_INVALID, "tasks per node '%s' adds up to %llu tasks, the job "
                          "has %u", tasks_per_node, (unsigned long long)sum, tasks);
            goto out;
        }
    } else if (tasks < h) {
        st = dc_error(DC_ERR_INVALID, "host list '%s' has %zu hosts for %u tasks: give one "
                      "host per task or fewer hosts", nodelist, h, tasks);
        goto out;
    } else {
        /* Slurm's block distribution: the first tasks % h hosts one more */
        for (size_t k = 0; k < h; k++)
            counts[k] = tasks / (uint32_t)h + (k < tasks % h);
    }
    out->n_tasks = tasks;
    out->host_of = calloc(tasks, sizeof(*out->host_of));
    out->local_of = calloc(tasks, sizeof(*out->local_of));
    out->on_host = calloc(tasks, sizeof(*out->on_host));
    if (!out->host_of || !out->local_of || !out->on_host) {
        st = dc_error(DC_ERR_NOMEM, "launch: out of memory");
        goto out;
    }
    for (size_t k = 0, r = 0; k < h; k++)
        for (uint32_t c = 0; c < counts[k]; c++)
            out->host_of[r++] = (uint32_t)k;
    /* a host named twice ("a,a,b": one entry per task) shares its local
     * ranks: entries sorted by name, each points at its name's first */
    if ((st = canon_hosts(out, counts)) != DC_OK)
        goto out;
out:
    free(counts);
    if (st != DC_OK)
        dc_launch_place_free(out);
    return st;
}

dc_status_t dc_topo_from_place(const dc_launch_place_t *p, const char *region_map,
                               uint32_t n_senders, uint16_t base_port, char *const *addrs,
                               dc_topo_t **out)
{
    if (n_senders == 0 || n_senders >= p->n_tasks)
        return dc_error(DC_ERR_INVALID, "launch: %u senders among %u tasks leaves no receiver",
                        n_senders, p->n_tasks);
    dc_topo_t *t = dc_topo_new("launch");
    if (!t)
        return dc_error(DC_ERR_NOMEM, "launch: out of memory");
    dc_status_t st = DC_OK;
    for (uint32_t r = 0; r < p->n_tasks; r++) {
        const char *host = p->hosts[p->host_of[r]];
        char reg[128], name[300], addr[300];
        if ((st = dc_topo_region_for_host(region_map, host, reg, sizeof(reg))) != DC_OK)
            break;
        int ri = dc_topo_region_find(t, reg);
        uint32_t region, idx;
        if (ri < 0) {
            if ((st = dc_topo_add_region(t, reg, DC_TOPO_DEFAULT_LAN_BPS, DC_TOPO_DEFAULT_WAN_BPS,
                                          &region)) != DC_OK)
                break;
        } else {
            region = (uint32_t)ri;
        }
        if ((uint32_t)base_port + p->local_of[r] > 65535) {
            st = dc_error(DC_ERR_INVALID, "launch: task %u on %s wants port %u + %u, past 65535", r,
                          host, base_port, p->local_of[r]);
            break;
        }
        if (p->on_host[r] > 1)
            snprintf(name, sizeof(name), "%s#%u", host, p->local_of[r]);
        else
            snprintf(name, sizeof(name), "%s", host);
        if (addrs)
            snprintf(addr, sizeof(addr), "%s", addrs[r]);
        else if (strchr(host, ':'))
            snprintf(addr, sizeof(addr), "[%s]:%u", host, base_port + p->local_of[r]);
        else
            snprintf(addr, sizeof(addr), "%s:%u", host, base_port + p->local_of[r]);
        if ((st = dc_topo_add_node(t, name, addr, region,
                                   r < n_senders ? DC_TOPO_ROLE_SENDER : DC_TOPO_ROLE_RECEIVER,
                                   &idx)) != DC_OK)
            break;
    }
    if (st == DC_OK)
        st = dc_topo_finish(t);
    if (st != DC_OK) {
        dc_topo_free(t);
        return st;
    }
    *out = t;
    return DC_OK;
}
