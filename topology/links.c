/* links.c - measured link rates (from `deltacast perf link` or by hand)
 * replacing the nominal rates of a topology. */
#include "topology/topo.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A node by host name, by address, or by address without ":port" (the
 * "peer" of `deltacast perf link --json` is ADDR:PORT). */
static bool find_node(const dc_topo_t *t, const char *name, uint32_t *out)
{
    if (dc_topo_find(t, name, out) == DC_OK)
        return true;
    dc_clear_error();
    size_t len = strlen(name);
    const char *colon = strrchr(name, ':');
    size_t host_len = len;
    if (colon && colon[1] && strspn(colon + 1, "0123456789") == strlen(colon + 1))
        host_len = (size_t)(colon - name);
    for (uint32_t i = 0; i < t->n_nodes; i++) {
        const char *a = t->nodes[i].addr;
        if (!a[0])
            continue;
        if (strcmp(a, name) == 0 || (strlen(a) == host_len && strncmp(a, name, host_len) == 0) ||
            (strlen(t->nodes[i].name) == host_len && strncmp(t->nodes[i].name, name, host_len) == 0)) {
            *out = i;
            return true;
        }
    }
    return false;
}

static dc_status_t apply_one(dc_topo_t *t, const char *file, const char *where, const char *a,
                             const char *b, double bps)
{
    if (!(bps > 0) || bps > 1e15)
        return dc_error(DC_ERR_INVALID, "%s: %s: rate %g bit/s out of range", file, where, bps);
    uint32_t na, nb;
    bool an = find_node(t, a, &na), bn = find_node(t, b, &nb);
    if (an && bn) {
        if (na == nb)
            return dc_error(DC_ERR_INVALID, "%s: %s: a link joins two different nodes", file, where);
        if (t->nodes[na].region == t->nodes[nb].region) {
            t->nodes[na].lan_bps = bps;
            t->nodes[nb].lan_bps = bps;
        } else {
            t->nodes[na].wan_bps = bps;
            t->nodes[nb].wan_bps = bps;
        }
        return DC_OK;
    }
    int ra = dc_topo_region_find(t, a), rb = dc_topo_region_find(t, b);
    if (!an && !bn && ra >= 0 && rb >= 0 && ra != rb)
        return dc_topo_set_rlink(t, (uint32_t)ra, (uint32_t)rb, bps, -1);
    return dc_error(DC_ERR_INVALID,
                    "%s: %s: '%s' and '%s' must both be nodes or both be (different) regions of the topology",
                    file, where, a, b);
}

static const char *jstr(json_t *o, const char *k1, const char *k2, const char *k3)
{
    const char *ks[3] = {k1, k2, k3};
    for (int i = 0; i < 3; i++) {
        json_t *v = ks[i] ? json_object_get(o, ks[i]) : NULL;
        if (json_is_string(v))
            return json_string_value(v);
    }
    return NULL;
}

static dc_status_t apply_entry(dc_topo_t *t, const char *path, json_t *e, size_t i)
{
    char where[32];
    snprintf(where, sizeof(where), "entry %zu", i);
    if (!json_is_object(e))
        return dc_error(DC_ERR_FORMAT, "%s: %s is not an object", path, where);
    const char *a = jstr(e, "from", "src", "client"), *b = jstr(e, "to", "dst", "peer");
    if (!a || !b)
        return dc_error(DC_ERR_FORMAT, "%s: %s lacks \"from\"/\"to\" (or \"peer\") names", path, where);
    double bps = -1;
    json_t *v;
    if ((v = json_object_get(e, "bits_per_second")) && json_is_number(v))
        bps = json_number_value(v);
    else if ((v = json_object_get(e, "bps")) && json_is_number(v))
        bps = json_number_value(v);
    else if ((v = json_object_get(e, "gbps")) && json_is_number(v))
        bps = json_number_value(v) * 1e9;
    else if ((v = json_object_get(e, "rate")) && json_is_string(v)) {
        dc_status_t st = dc_parse_rate(json_string_value(v), &bps);
        if (st != DC_OK) {
            dc_error_prefix("%s: %s", path, where);
            return st;
        }
    } else {
        return dc_error(DC_ERR_FORMAT, "%s: %s has no bits_per_second, bps, gbps or rate", path, where);
    }
    return apply_one(t, path, where, a, b, bps);
}

/* One JSON value: {"links": [...]}, an array of entries, or one entry (a
 * `deltacast perf link --json` result with "from" added). */
static dc_status_t apply_json(dc_topo_t *t, const char *path, json_t *root, size_t *count)
{
    json_t *arr = json_is_array(root) ? root : json_object_get(root, "links");
    if (!arr && json_is_object(root))
        return apply_entry(t, path, root, (*count)++);
    if (!json_is_array(arr))
        return dc_error(DC_ERR_FORMAT, "%s: expected {\"links\": [...]}, an array or link objects", path);
    size_t i;
    json_t *e;
    json_array_foreach(arr, i, e)
    {
        dc_status_t st = apply_entry(t, path, e, (*count)++);
        if (st != DC_OK)
            return st;
    }
    return DC_OK;
}

dc_status_t dc_topo_apply_link_rates(dc_topo_t *t, const char *path)
{
    if (!t || !path)
        return dc_error(DC_ERR_INVALID, "dc_topo_apply_link_rates: NULL argument");
    FILE *f = fopen(path, "r");
    if (!f)
        return dc_error_errno(DC_ERR_IO, errno, "%s", path);
    int c;
    while ((c = fgetc(f)) == ' ' || c == '\n' || c == '\t' || c == '\r')
        ;
    dc_status_t st = DC_OK;
    if (c == '{' || c == '[') {
        /* a sequence of JSON values (JSON lines work too) */
        rewind(f);
        char *buf = malloc(16u << 20);
        size_t len = buf ? fread(buf, 1, 16u << 20, f) : 0;
        if (!buf)
            st = dc_error(DC_ERR_NOMEM, "%s: out of memory", path);
        else if (len == 16u << 20)
            st = dc_error(DC_ERR_FORMAT, "%s: larger than 16 MiB", path);
        size_t pos = 0, count = 0;
        while (st == DC_OK) {
            while (pos < len && strchr(" \t\r\n", buf[pos]))
                pos++;
            if (pos >= len)
                break;
            json_error_t je;
            json_t *root = json_loadb(buf + pos, len - pos, JSON_DISABLE_EOF_CHECK, &je);
            if (!root) {
                st = dc_error(DC_ERR_FORMAT, "%s: JSON error near byte %zu: %s", path, pos + (size_t)je.position,
                              je.text);
                break;
            }
            pos += (size_t)je.position;
            st = apply_json(t, path, root, &count);
            json_decref(root);
        }
        free(buf);
        fclose(f);
        return st;
    }
    rewind(f);
    char line[1024];
    unsigned lineno = 0;
    while (fgets(line, sizeof(line), f)) {
        lineno++;
        char *hash = strchr(line, '#');
        if (hash)
            *hash = 0;
        char a[256], b[256], r[64], extra[2];
        int n = sscanf(line, "%255s %255s %63s %1s", a, b, r, extra);
        if (n <= 0)
            continue;
        char where[32];
        snprintf(where, sizeof(where), "line %u", lineno);
        if (n != 3) {
            st = dc_error(DC_ERR_FORMAT, "%s:%u: expected 'A B RATE'", path, lineno);
            break;
        }
        double bps;
        if ((st = dc_parse_rate(r, &bps)) != DC_OK) {
            dc_error_prefix("%s:%u", path, lineno);
            break;
        }
        if ((st = apply_one(t, path, where, a, b, bps)) != DC_OK)
            break;
    }
    fclose(f);
    return st;
}
