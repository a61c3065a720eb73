/*
 * topo_yaml.c - the topology file (YAML, parsed with libyaml).
 *
 *   shards: 8                      # optional (default: number of senders)
 *   defaults: {lan: 400gbit, wan: 5gbit, wan_latency: 30ms}
 *   regions:
 *     - name: us-east
 *       lan: 400gbit               # per-node NIC rate inside the region
 *       wan: 5gbit                 # per-node share between regions
 *       clusters:
 *         - name: trn
 *           nodes:
 *             - {host: trn-001, addr: 10.0.0.1, role: sender, nics: [mlx5_0], gpus: [0, 1]}
 *       nodes:                     # nodes outside any cluster
 *         - {host: roll-001, role: receiver, shards: [0, 1]}
 *   links:
 *     - {between: [us-east, eu-west], rate: 40gbit, latency: 40ms}
 *
 * Unknown keys, wrong types and bad values are errors naming file:line.
 */
#include "topology/topo.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

typedef struct {
    yaml_document_t *doc;
    dc_topo_t *t;
    const char *file;
    uint32_t sender_shard_seen;
} yctx_t;

static uint32_t line_of(const yaml_node_t *n)
{
    return (uint32_t)n->start_mark.line + 1;
}

static yaml_node_t *node_at(yctx_t *c, int id)
{
    return yaml_document_get_node(c->doc, id);
}

static const char *type_name(const yaml_node_t *n)
{
    switch (n->type) {
    case YAML_SCALAR_NODE: return "a scalar";
    case YAML_SEQUENCE_NODE: return "a list";
    case YAML_MAPPING_NODE: return "a mapping";
    default: return "nothing";
    }
}

static dc_status_t want(yctx_t *c, const yaml_node_t *n, yaml_node_type_t ty, const char *what)
{
    if (!n || n->type != ty) {
        const char *exp = ty == YAML_SCALAR_NODE ? "a scalar" : ty == YAML_SEQUENCE_NODE ? "a list" : "a mapping";
        return dc_error(DC_ERR_FORMAT, "%s:%u: %s must be %s, not %s", c->file, n ? line_of(n) : 0,
                        what, exp, n ? type_name(n) : "nothing");
    }
    return DC_OK;
}

static const char *scalar(const yaml_node_t *n)
{
    return (const char *)n->data.scalar.value;
}

static dc_status_t get_str(yctx_t *c, yaml_node_t *n, const char *what, const char **out)
{
    dc_status_t st = want(c, n, YAML_SCALAR_NODE, what);
    if (st != DC_OK)
        return st;
    if (strlen(scalar(n)) != n->data.scalar.length)
        return dc_error(DC_ERR_FORMAT, "%s:%u: %s contains a NUL byte", c->file, line_of(n), what);
    *out = scalar(n);
    return DC_OK;
}

static dc_status_t get_rate(yctx_t *c, yaml_node_t *n, const char *what, double *out)
{
    const char *s = NULL; /* set by get_str() when it returns DC_OK */
    dc_status_t st = get_str(c, n, what, &s);
    if (st != DC_OK)
        return st;
    if ((st = dc_parse_rate(s, out)) != DC_OK)
        dc_error_prefix("%s:%u: %s", c->file, line_of(n), what);
    return st;
}

static dc_status_t get_dur(yctx_t *c, yaml_node_t *n, const char *what, double *out)
{
    const char *s = NULL; /* set by get_str() when it returns DC_OK */
    dc_status_t st = get_str(c, n, what, &s);
    if (st != DC_OK)
        return st;
    if ((st = dc_parse_duration(s, out)) != DC_OK)
        dc_error_prefix("%s:%u: %s", c->file, line_of(n), what);
    return st;
}

static dc_status_t get_uint(yctx_t *c, yaml_node_t *n, const char *what, uint32_t max, uint32_t *out)
{
    const char *s = NULL; /* set by get_str() when it returns DC_OK */
    dc_status_t st = get_str(c, n, what, &s);
    if (st != DC_OK)
        return st;
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (!*s || *end || errno || s[0] == '-' || v > max)
        return dc_error(DC_ERR_FORMAT, "%s:%u: %s '%s' is not an integer in 0..%u", c->file,
                        line_of(n), what, s, max);
    *out = (uint32_t)v;
    return DC_OK;
}

static dc_status_t unknown_key(yctx_t *c, yaml_node_t *k, const char *where, const char *known)
{
    return dc_error(DC_ERR_FORMAT, "%s:%u: unknown key '%s' in %s (known: %s)", c->file,
                    line_of(k), k->type == YAML_SCALAR_NODE ? scalar(k) : "?", where, known);
}

#define DC_CAT2(a, b) a##b
#define DC_CAT(a, b) DC_CAT2(a, b)
#define FOR_PAIRS(c, map, kvar, vvar) FOR_PAIRS_(c, map, kvar, vvar, DC_CAT(p_, __LINE__), DC_CAT(o_, __LINE__))
#define FOR_PAIRS_(c, map, kvar, vvar, P, O)                                                    \
    for (yaml_node_pair_t *P = (map)->data.mapping.pairs.start; P < (map)->data.mapping.pairs.top; P++) \
        for (yaml_node_t *kvar = node_at(c, P->key), *vvar = node_at(c, P->value), *O = kvar; O; O = NULL)

#define FOR_ITEMS(c, seq, var) FOR_ITEMS_(c, seq, var, DC_CAT(i_, __LINE__), DC_CAT(q_, __LINE__))
#define FOR_ITEMS_(c, seq, var, I, O)                                                             \
    for (yaml_node_item_t *I = (seq)->data.sequence.items.start; I < (seq)->data.sequence.items.top; I++) \
        for (yaml_node_t *var = node_at(c, *I), *O = var; O; O = NULL)

static bool key_is(yaml_node_t *k, const char *name)
{
    return k->type == YAML_SCALAR_NODE && strcmp(scalar(k), name) == 0;
}

static dc_status_t str_list(yctx_t *c, yaml_node_t *v, const char *what, char ***out, uint32_t *n)
{
    dc_status_t st = want(c, v, YAML_SEQUENCE_NODE, what);
    if (st != DC_OK)
        return st;
    size_t cnt = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
    if (cnt > 4096)
        return dc_error(DC_ERR_FORMAT, "%s:%u: %s has more than 4096 entries", c->file, line_of(v), what);
    char **arr = calloc(cnt ? cnt : 1, sizeof(char *));
    if (!arr)
        return dc_error(DC_ERR_NOMEM, "%s: out of memory", c->file);
    uint32_t k = 0;
    FOR_ITEMS(c, v, it)
    {
        const char *s = NULL; /* set by get_str() when it returns DC_OK */
        if ((st = get_str(c, it, what, &s)) != DC_OK || !(arr[k] = strdup(s))) {
            for (uint32_t j = 0; j < k; j++)
                free(arr[j]);
            free(arr);
            return st != DC_OK ? st : dc_error(DC_ERR_NOMEM, "%s: out of memory", c->file);
        }
        k++;
    }
    *out = arr;
    *n = k;
    return DC_OK;
}

static dc_status_t parse_node(yctx_t *c, yaml_node_t *m, uint32_t region, const char *cluster)
{
    dc_status_t st = want(c, m, YAML_MAPPING_NODE, "a node");
    if (st != DC_OK)
        return st;
    const char *host = NULL, *addr = "", *role = "receiver";
    yaml_node_t *shards = NULL, *nics = NULL, *gpus = NULL, *lan = NULL, *wan = NULL;
    FOR_PAIRS(c, m, k, v)
    {
        if (key_is(k, "host") || key_is(k, "name")) {
            if ((st = get_str(c, v, "host", &host)) != DC_OK)
                return st;
        } else if (key_is(k, "addr") || key_is(k, "address")) {
            if ((st = get_str(c, v, "addr", &addr)) != DC_OK)
                return st;
        } else if (key_is(k, "role")) {
            if ((st = get_str(c, v, "role", &role)) != DC_OK)
                return st;
        } else if (key_is(k, "shards")) {
            shards = v;
        } else if (key_is(k, "nics")) {
            nics = v;
        } else if (key_is(k, "gpus")) {
            gpus = v;
        } else if (key_is(k, "lan")) {
            lan = v;
        } else if (key_is(k, "wan")) {
            wan = v;
        } else {
            return unknown_key(c, k, "a node", "host, addr, role, shards, nics, gpus, lan, wan");
        }
    }
    if (!host || !*host)
        return dc_error(DC_ERR_FORMAT, "%s:%u: node without 'host'", c->file, line_of(m));
    uint32_t r;
    if (strcmp(role, "sender") == 0 || strcmp(role, "trainer") == 0)
        r = DC_TOPO_ROLE_SENDER;
    else if (strcmp(role, "receiver") == 0 || strcmp(role, "rollout") == 0)
        r = DC_TOPO_ROLE_RECEIVER;
    else
        return dc_error(DC_ERR_FORMAT, "%s:%u: node '%s': role '%s' is neither sender nor receiver",
                        c->file, line_of(m), host, role);
    uint32_t idx;
    if ((st = dc_topo_add_node(c->t, host, addr, region, r, &idx)) != DC_OK)
        return st;
    dc_topo_node_t *n = &c->t->nodes[idx];
    n->line = line_of(m);
    free(n->cluster);
    if (!(n->cluster = strdup(cluster ? cluster : "")))
        return dc_error(DC_ERR_NOMEM, "%s: out of memory", c->file);
    if (lan && (st = get_rate(c, lan, "lan", &n->lan_bps)) != DC_OK)
        return st;
    if (wan && (st = get_rate(c, wan, "wan", &n->wan_bps)) != DC_OK)
        return st;
    if (nics && (st = str_list(c, nics, "nics", &n->nics, &n->n_nics)) != DC_OK)
        return st;
    if (gpus && (st = str_list(c, gpus, "gpus", &n->gpus, &n->n_gpus)) != DC_OK)
        return st;
    if (shards) {
        if (shards->type == YAML_SCALAR_NODE && strcmp(scalar(shards), "all") == 0) {
            n->shards = 0; /* receivers: filled with all by finish */
            if (r == DC_TOPO_ROLE_SENDER)
                return dc_error(DC_ERR_FORMAT, "%s:%u: sender '%s': list the shards it owns",
                                c->file, line_of(shards), host);
        } else {
            if ((st = want(c, shards, YAML_SEQUENCE_NODE, "shards")) != DC_OK)
                return st;
            uint64_t mask = 0;
            FOR_ITEMS(c, shards, it)
            {
                uint32_t s;
                if ((st = get_uint(c, it, "shard", DC_TOPO_MAX_SHARDS - 1, &s)) != DC_OK)
                    return st;
                mask |= 1ULL << s;
            }
            if (!mask)
                return dc_error(DC_ERR_FORMAT, "%s:%u: node '%s': empty shard list", c->file,
                                line_of(shards), host);
            n->shards = mask;
        }
    }
    return DC_OK;
}

static dc_status_t parse_nodes(yctx_t *c, yaml_node_t *v, uint32_t region, const char *cluster)
{
    dc_status_t st = want(c, v, YAML_SEQUENCE_NODE, "nodes");
    if (st != DC_OK)
        return st;
    FOR_ITEMS(c, v, it)
    {
        if ((st = parse_node(c, it, region, cluster)) != DC_OK)
            return st;
    }
    return DC_OK;
}

static dc_status_t parse_region(yctx_t *c, yaml_node_t *m, double lan_def, double wan_def)
{
    dc_status_t st = want(c, m, YAML_MAPPING_NODE, "a region");
    if (st != DC_OK)
        return st;
    const char *name = NULL;
    FOR_PAIRS(c, m, k, v)
    {
        if (key_is(k, "name") && (st = get_str(c, v, "region name", &name)) != DC_OK)
            return st;
    }
    if (!name || !*name)
        return dc_error(DC_ERR_FORMAT, "%s:%u: region without 'name'", c->file, line_of(m));
    if (dc_topo_region_find(c->t, name) >= 0)
        return dc_error(DC_ERR_FORMAT, "%s:%u: region '%s' declared twice", c->file, line_of(m), name);
    uint32_t ri;
    if ((st = dc_topo_add_region(c->t, name, lan_def, wan_def, &ri)) != DC_OK)
        return st;
    c->t->regions[ri].line = line_of(m);
    FOR_PAIRS(c, m, k, v)
    {
        dc_topo_region_t *r = &c->t->regions[ri];
        if (key_is(k, "name")) {
        } else if (key_is(k, "lan")) {
            if ((st = get_rate(c, v, "lan", &r->lan_bps)) != DC_OK)
                return st;
        } else if (key_is(k, "wan")) {
            if ((st = get_rate(c, v, "wan", &r->wan_bps)) != DC_OK)
                return st;
        } else if (key_is(k, "lan_latency")) {
            if ((st = get_dur(c, v, "lan_latency", &r->lan_lat_s)) != DC_OK)
                return st;
        } else if (key_is(k, "nodes")) {
            if ((st = parse_nodes(c, v, ri, NULL)) != DC_OK)
                return st;
        } else if (key_is(k, "clusters")) {
            if ((st = want(c, v, YAML_SEQUENCE_NODE, "clusters")) != DC_OK)
                return st;
            FOR_ITEMS(c, v, cl)
            {
                if ((st = want(c, cl, YAML_MAPPING_NODE, "a cluster")) != DC_OK)
                    return st;
                const char *cname = NULL;
                yaml_node_t *nodes = NULL;
                FOR_PAIRS(c, cl, ck, cv)
                {
                    if (key_is(ck, "name")) {
                        if ((st = get_str(c, cv, "cluster name", &cname)) != DC_OK)
                            return st;
                    } else if (key_is(ck, "nodes")) {
                        nodes = cv;
                    } else {
                        return unknown_key(c, ck, "a cluster", "name, nodes");
                    }
                }
                if (!cname || !*cname)
                    return dc_error(DC_ERR_FORMAT, "%s:%u: cluster without 'name'", c->file, line_of(cl));
                if (nodes && (st = parse_nodes(c, nodes, ri, cname)) != DC_OK)
                    return st;
            }
        } else {
            return unknown_key(c, k, "a region", "name, lan, wan, lan_latency, nodes, clusters");
        }
    }
    return DC_OK;
}

static dc_status_t parse_link(yctx_t *c, yaml_node_t *m)
{
    dc_status_t st = want(c, m, YAML_MAPPING_NODE, "a link");
    if (st != DC_OK)
        return st;
    yaml_node_t *between = NULL;
    double rate = -1, lat = -1;
    FOR_PAIRS(c, m, k, v)
    {
        if (key_is(k, "between")) {
            between = v;
        } else if (key_is(k, "rate")) {
            if ((st = get_rate(c, v, "rate", &rate)) != DC_OK)
                return st;
        } else if (key_is(k, "latency")) {
            if ((st = get_dur(c, v, "latency", &lat)) != DC_OK)
                return st;
        } else {
            return unknown_key(c, k, "a link", "between, rate, latency");
        }
    }
    if (!between)
        return dc_error(DC_ERR_FORMAT, "%s:%u: link without 'between: [REGION, REGION]'", c->file, line_of(m));
    if ((st = want(c, between, YAML_SEQUENCE_NODE, "between")) != DC_OK)
        return st;
    int r[2], k = 0;
    FOR_ITEMS(c, between, it)
    {
        const char *s;
        if (k == 2)
            return dc_error(DC_ERR_FORMAT, "%s:%u: 'between' names exactly two regions", c->file, line_of(between));
        if ((st = get_str(c, it, "region", &s)) != DC_OK)
            return st;
        if ((r[k] = dc_topo_region_find(c->t, s)) < 0)
            return dc_error(DC_ERR_FORMAT, "%s:%u: link names unknown region '%s'", c->file, line_of(it), s);
        k++;
    }
    if (k != 2 || r[0] == r[1])
        return dc_error(DC_ERR_FORMAT, "%s:%u: 'between' names exactly two different regions", c->file,
                        line_of(between));
    return dc_topo_set_rlink(c->t, (uint32_t)r[0], (uint32_t)r[1], rate, lat);
}

static dc_status_t parse_root(yctx_t *c, yaml_node_t *root)
{
    dc_status_t st;
    if (!root)
        return dc_error(DC_ERR_FORMAT, "%s: empty topology file", c->file);
    if ((st = want(c, root, YAML_MAPPING_NODE, "the topology")) != DC_OK)
        return st;
    double lan = 0, wan = 0;
    yaml_node_t *regions = NULL, *links = NULL;
    FOR_PAIRS(c, root, k, v)
    {
        if (key_is(k, "shards")) {
            if ((st = get_uint(c, v, "shards", DC_TOPO_MAX_SHARDS, &c->t->n_shards)) != DC_OK)
                return st;
            if (c->t->n_shards == 0)
                return dc_error(DC_ERR_FORMAT, "%s:%u: shards must be at least 1", c->file, line_of(v));
        } else if (key_is(k, "defaults")) {
            if ((st = want(c, v, YAML_MAPPING_NODE, "defaults")) != DC_OK)
                return st;
            FOR_PAIRS(c, v, dk, dv)
            {
                if (key_is(dk, "lan")) {
                    if ((st = get_rate(c, dv, "lan", &lan)) != DC_OK)
                        return st;
                } else if (key_is(dk, "wan")) {
                    if ((st = get_rate(c, dv, "wan", &wan)) != DC_OK)
                        return st;
                } else if (key_is(dk, "wan_latency")) {
                    if ((st = get_dur(c, dv, "wan_latency", &c->t->wan_lat_s)) != DC_OK)
                        return st;
                } else {
                    return unknown_key(c, dk, "defaults", "lan, wan, wan_latency");
                }
            }
        } else if (key_is(k, "regions")) {
            regions = v;
        } else if (key_is(k, "links")) {
            links = v;
        } else {
            return unknown_key(c, k, "the topology", "shards, defaults, regions, links");
        }
    }
    if (!regions)
        return dc_error(DC_ERR_FORMAT, "%s: no 'regions' list", c->file);
    if ((st = want(c, regions, YAML_SEQUENCE_NODE, "regions")) != DC_OK)
        return st;
    FOR_ITEMS(c, regions, it)
    {
        if ((st = parse_region(c, it, lan, wan)) != DC_OK)
            return st;
    }
    if (links) {
        if ((st = want(c, links, YAML_SEQUENCE_NODE, "links")) != DC_OK)
            return st;
        FOR_ITEMS(c, links, it)
        {
            if ((st = parse_link(c, it)) != DC_OK)
                return st;
        }
    }
    return DC_OK;
}

/* libyaml's document loader slows down badly on deep nesting; a topology
 * is at most ~6 levels deep, so reject anything deeper than 32 with the
 * streaming parser (linear) before loading. */
#define DC_TOPO_MAX_DEPTH 32
static dc_status_t prescan(const char *text, size_t len, const char *name)
{
    yaml_parser_t parser;
    yaml_event_t ev;
    dc_status_t st = DC_OK;
    if (!yaml_parser_initialize(&parser))
        return dc_error(DC_ERR_NOMEM, "%s: yaml parser init failed", name);
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    int depth = 0;
    for (;;) {
        if (!yaml_parser_parse(&parser, &ev)) {
            st = dc_error(DC_ERR_FORMAT, "%s:%zu:%zu: YAML error: %s%s%s", name, parser.problem_mark.line + 1,
                          parser.problem_mark.column + 1, parser.problem ? parser.problem : "unknown",
                          parser.context ? " " : "", parser.context ? parser.context : "");
            break;
        }
        yaml_event_type_t ty = ev.type;
        size_t line = ev.start_mark.line + 1;
        yaml_event_delete(&ev);
        if (ty == YAML_SEQUENCE_START_EVENT || ty == YAML_MAPPING_START_EVENT) {
            if (++depth > DC_TOPO_MAX_DEPTH) {
                st = dc_error(DC_ERR_FORMAT, "%s:%zu: nested deeper than %d levels", name, line, DC_TOPO_MAX_DEPTH);
                break;
            }
        } else if (ty == YAML_SEQUENCE_END_EVENT || ty == YAML_MAPPING_END_EVENT) {
            depth--;
        } else if (ty == YAML_STREAM_END_EVENT) {
            break;
        }
    }
    yaml_parser_delete(&parser);
    return st;
}

static dc_status_t topo_parse(const char *text, size_t len, const char *name, uint32_t flags,
                              dc_topo_t **out);

dc_status_t dc_topo_parse(const char *text, size_t len, const char *name, dc_topo_t **out)
{
    return topo_parse(text, len, name, 0, out);
}

static dc_status_t topo_parse(const char *text, size_t len, const char *name, uint32_t flags,
                              dc_topo_t **out)
{
    if (!text || !out)
        return dc_error(DC_ERR_INVALID, "dc_topo_parse: NULL argument");
    if (!name)
        name = "<topology>";
    yaml_parser_t parser;
    yaml_document_t doc;
    dc_status_t st = DC_OK;
    if ((st = prescan(text, len, name)) != DC_OK)
        return st;
    if (!yaml_parser_initialize(&parser))
        return dc_error(DC_ERR_NOMEM, "%s: yaml parser init failed", name);
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        st = dc_error(DC_ERR_FORMAT, "%s:%zu:%zu: YAML error: %s%s%s", name,
                      parser.problem_mark.line + 1, parser.problem_mark.column + 1,
                      parser.problem ? parser.problem : "unknown", parser.context ? " " : "",
                      parser.context ? parser.context : "");
        yaml_parser_delete(&parser);
        return st;
    }
    dc_topo_t *t = dc_topo_new(name);
    if (!t) {
        st = dc_error(DC_ERR_NOMEM, "%s: out of memory", name);
        goto out_doc;
    }
    t->port0_ok = (flags & DC_TOPO_LOAD_PORT0) != 0;
    yctx_t c = {.doc = &doc, .t = t, .file = t->source};
    if ((st = parse_root(&c, yaml_document_get_root_node(&doc))) != DC_OK)
        goto out_topo;
    if ((st = dc_topo_finish(t)) != DC_OK)
        goto out_topo;
    *out = t;
    t = NULL;
out_topo:
    dc_topo_free(t);
out_doc:
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return st;
}

dc_status_t dc_topo_load(const char *path, dc_topo_t **out)
{
    return dc_topo_load_flags(path, 0, out);
}

dc_status_t dc_topo_load_flags(const char *path, uint32_t flags, dc_topo_t **out)
{
    if (!path || !out)
        return dc_error(DC_ERR_INVALID, "dc_topo_load: NULL argument");
    FILE *f = fopen(path, "rb");
    if (!f)
        return dc_error_errno(DC_ERR_IO, errno, "%s", path);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    dc_status_t st = DC_OK;
    for (;;) {
        if (len == cap) {
            if (cap >= (64u << 20)) {
                st = dc_error(DC_ERR_FORMAT, "%s: larger than 64 MiB", path);
                goto out;
            }
            cap = cap ? cap * 2 : 65536;
            char *p = realloc(buf, cap);
            if (!p) {
                st = dc_error(DC_ERR_NOMEM, "%s: out of memory", path);
                goto out;
            }
            buf = p;
        }
        size_t r = fread(buf + len, 1, cap - len, f);
        len += r;
        if (r == 0) {
            if (ferror(f))
                st = dc_error_errno(DC_ERR_IO, errno, "%s: read", path);
            break;
        }
    }
    if (st == DC_OK)
        st = topo_parse(buf, len, path, flags, out);
out:
    free(buf);
    fclose(f);
    return st;
}
