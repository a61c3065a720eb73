/*
 * hw.c - local GPU/NIC discovery with hwloc: for every GPU, the NIC that
 * shares the deepest ancestor with it (same PCIe switch beats same host
 * bridge beats same NUMA node beats same machine), so a transfer from that
 * GPU's memory uses the NIC next to it.
 *
 *      Machine
 *      ├── Package/NUMA 0
 *      │   └── HostBridge ── PCIBridge (switch) ─┬─ GPU cuda0   <- distance 1
 *      │                                          └─ NIC mlx5_0 <- to mlx5_0
 *      └── Package/NUMA 1
 *          └── HostBridge ── PCIBridge ── NIC mlx5_1             (farther)
 */
#include "topology/topo.h"

#include <stdlib.h>
#include <string.h>

#if DC_HAVE_HWLOC
#include <hwloc.h>
#endif

typedef struct dc_hw_priv {
    dc_hw_info_t pub;
    dc_hw_gpu_t *gpus;
    dc_hw_nic_t *nics;
    char **strings;
    size_t n_strings, cap_strings;
} dc_hw_priv_t;

static const char *keep(dc_hw_priv_t *h, const char *s)
{
    if (h->n_strings == h->cap_strings) {
        size_t nc = h->cap_strings ? h->cap_strings * 2 : 32;
        char **p = realloc(h->strings, nc * sizeof(*p));
        if (!p)
            return NULL;
        h->strings = p;
        h->cap_strings = nc;
    }
    char *d = strdup(s ? s : "");
    if (!d)
        return NULL;
    h->strings[h->n_strings++] = d;
    return d;
}

void dc_hw_free(dc_hw_info_t *hw)
{
    if (!hw)
        return;
    dc_hw_priv_t *h = (dc_hw_priv_t *)hw;
    for (size_t i = 0; i < h->n_strings; i++)
        free(h->strings[i]);
    free(h->strings);
    free(h->gpus);
    free(h->nics);
    free(h);
}

#if DC_HAVE_HWLOC
static hwloc_obj_t pci_parent(hwloc_obj_t o)
{
    while (o && o->type == HWLOC_OBJ_OS_DEVICE)
        o = o->parent;
    return o;
}

static void pci_id(hwloc_obj_t o, char *buf, size_t len)
{
    buf[0] = 0;
    hwloc_obj_t p = pci_parent(o);
    if (p && p->type == HWLOC_OBJ_PCI_DEVICE)
        snprintf(buf, len, "%04x:%02x:%02x.%01x", p->attr->pcidev.domain, p->attr->pcidev.bus,
                 p->attr->pcidev.dev, p->attr->pcidev.func);
}

/* Hops from a up to the first common ancestor with b. */
static int distance(hwloc_obj_t a, hwloc_obj_t b)
{
    int d = 0;
    for (hwloc_obj_t x = pci_parent(a); x; x = x->parent, d++)
        for (hwloc_obj_t y = pci_parent(b); y; y = y->parent)
            if (x == y)
                return d;
    return 1000;
}
#endif

dc_status_t dc_hw_discover(dc_hw_info_t **out)
{
    if (!out)
        return dc_error(DC_ERR_INVALID, "dc_hw_discover: NULL out");
#if !DC_HAVE_HWLOC
    return dc_error(DC_ERR_UNSUPPORTED, "hwloc discovery: deltacast was built without hwloc");
#else
    dc_status_t st = DC_OK;
    hwloc_topology_t topo;
    hwloc_obj_t *gobj = NULL, *nobj = NULL;
    dc_hw_priv_t *h = calloc(1, sizeof(*h));
    if (!h)
        return dc_error(DC_ERR_NOMEM, "hwloc discovery: out of memory");
    if (hwloc_topology_init(&topo) != 0) {
        free(h);
        return dc_error(DC_ERR_IO, "hwloc_topology_init failed");
    }
    hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    if (hwloc_topology_load(topo) != 0) {
        st = dc_error(DC_ERR_IO, "hwloc_topology_load failed");
        goto out_topo;
    }
    uint32_t ng = 0, nn = 0;
    for (hwloc_obj_t o = NULL; (o = hwloc_get_next_osdev(topo, o)) != NULL;) {
        hwloc_obj_osdev_type_t t = o->attr->osdev.type;
        if (t == HWLOC_OBJ_OSDEV_GPU || t == HWLOC_OBJ_OSDEV_COPROC)
            ng++;
        else if (t == HWLOC_OBJ_OSDEV_OPENFABRICS || t == HWLOC_OBJ_OSDEV_NETWORK)
            nn++;
    }
    h->gpus = calloc(ng ? ng : 1, sizeof(*h->gpus));
    h->nics = calloc(nn ? nn : 1, sizeof(*h->nics));
    gobj = calloc(ng ? ng : 1, sizeof(*gobj));
    nobj = calloc(nn ? nn : 1, sizeof(*nobj));
    if (!h->gpus || !h->nics || !gobj || !nobj) {
        st = dc_error(DC_ERR_NOMEM, "hwloc discovery: out of memory");
        goto out_topo;
    }
    ng = nn = 0;
    char pci[32];
    for (hwloc_obj_t o = NULL; (o = hwloc_get_next_osdev(topo, o)) != NULL;) {
        hwloc_obj_osdev_type_t t = o->attr->osdev.type;
        pci_id(o, pci, sizeof(pci));
        if (t == HWLOC_OBJ_OSDEV_GPU || t == HWLOC_OBJ_OSDEV_COPROC) {
            h->gpus[ng].name = keep(h, o->name);
            h->gpus[ng].pci = keep(h, pci);
            h->gpus[ng].nic = -1;
            h->gpus[ng].distance = -1;
            if (!h->gpus[ng].name || !h->gpus[ng].pci) {
                st = dc_error(DC_ERR_NOMEM, "hwloc discovery: out of memory");
                goto out_topo;
            }
            gobj[ng++] = o;
        } else if (t == HWLOC_OBJ_OSDEV_OPENFABRICS || t == HWLOC_OBJ_OSDEV_NETWORK) {
            h->nics[nn].name = keep(h, o->name);
            h->nics[nn].kind = t == HWLOC_OBJ_OSDEV_OPENFABRICS ? "openfabrics" : "network";
            h->nics[nn].pci = keep(h, pci);
            if (!h->nics[nn].name || !h->nics[nn].pci) {
                st = dc_error(DC_ERR_NOMEM, "hwloc discovery: out of memory");
                goto out_topo;
            }
            nobj[nn++] = o;
        }
    }
    for (uint32_t g = 0; g < ng; g++) {
        int best = -1, bd = 1 << 30;
        for (uint32_t n = 0; n < nn; n++) {
            int d = distance(gobj[g], nobj[n]);
            /* prefer RDMA devices at equal distance; ties by order */
            int key = d * 2 + (strcmp(h->nics[n].kind, "openfabrics") == 0 ? 0 : 1);
            if (key < bd) {
                bd = key;
                best = (int)n;
            }
        }
        h->gpus[g].nic = best;
        h->gpus[g].distance = best >= 0 ? bd / 2 : -1;
    }
    h->pub.size = sizeof(h->pub);
    h->pub.n_gpus = ng;
    h->pub.gpus = h->gpus;
    h->pub.n_nics = nn;
    h->pub.nics = h->nics;
    int numa = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
    int cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
    h->pub.n_numa = numa > 0 ? (uint32_t)numa : 1;
    h->pub.n_cores = cores > 0 ? (uint32_t)cores : 1;
out_topo:
    free(gobj);
    free(nobj);
    hwloc_topology_destroy(topo);
    if (st != DC_OK) {
        dc_hw_free(&h->pub);
        return st;
    }
    *out = &h->pub;
    return DC_OK;
#endif
}
