/* cmd_info.c - `deltacast info`: the transports and devices this machine
 * and build can use, each with the reason (like `ucx_info -d`): tcp
 * interfaces, UCX's version and transports, RDMA devices, ports and GIDs,
 * the CUDA device, kernel TLS, the CPU's kernel ISAs, the build's
 * features.  Text, or one JSON object with --json. */
#include "cli.h"
#include "dc_config.h"
#include "kernels/kern.h"
#include "kernels/kern_cuda.h"
#include "testkit/harness.h"
#include "util/dc_util.h"
#include "verbs/rdma.h"
#include "verbs/transport.h"
#include "verbs/ucx.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>

static void dc_info_help(FILE *fp)
{
    fprintf(fp,
            "Usage: deltacast info [--json]\n"
            "\n"
            "List what this machine and build can use, each with the reason (like\n"
            "`ucx_info -d`): every transport (tcp, ucx, rdma; usable or why not, the\n"
            "device and nominal speed, and which one --transport auto picks); tcp's\n"
            "interfaces and addresses; UCX's version and the transports its context\n"
            "found; RDMA devices, ports and GIDs; the CUDA device or why none;\n"
            "kernel TLS (CONFIG_TLS); the CPU's kernel ISAs and the one chosen\n"
            "(DELTACAST_KERN_ISA lowers it); the build's features.\n"
            "\n"
            "Options:\n"
            "  --json       one JSON object (keys: version, build_features, transports\n"
            "               [{name, compiled, usable, reason, device, speed_gbps,\n"
            "               max_msg_size, max_streams, gpu_memory}], auto, tcp\n"
            "               {interfaces}, ucx {version, usable, reason, transports},\n"
            "               rdma {devices, reason}, cuda, ktls {available, reason}, cpu\n"
            "               {model, isa_supported, kernel_isa, DELTACAST_KERN_ISA, crc32c},\n"
            "               hw {gpus, nics, numa_nodes, cores} or {reason})\n"
            "  -h, --help   show this help\n");
}

static json_t *dc_info_str_or_null(const char *s)
{
    return s && *s ? json_string(s) : json_null();
}

/* Comma- or newline-separated items as a JSON array of strings. */
static json_t *dc_info_split(const char *s, const char *seps)
{
    json_t *a = json_array();
    while (s && *s) {
        size_t n = strcspn(s, seps);
        if (n)
            json_array_append_new(a, json_stringn(s, n));
        s += n;
        if (*s)
            s++;
    }
    return a;
}

static json_t *dc_info_transports(void)
{
    json_t *a = json_array();
    const dc_verbs_ops_t *all[8];
    size_t n = dc_verbs_list(all, DC_ARRAY_SIZE(all));
    static const char *const known[] = {"rdma", "ucx", "tcp"};
    for (size_t k = 0; k < DC_ARRAY_SIZE(known); k++) {
        const dc_verbs_ops_t *t = NULL;
        for (size_t i = 0; i < n; i++)
            if (strcmp(all[i]->name, known[k]) == 0)
                t = all[i];
        json_t *o = json_object();
        json_object_set_new(o, "name", json_string(known[k]));
        json_object_set_new(o, "compiled", json_boolean(t != NULL));
        if (!t) {
            json_object_set_new(o, "usable", json_false());
            json_object_set_new(o, "reason",
                                json_string(strcmp(known[k], "ucx") == 0
                                                ? "not compiled in (built without UCX: "
                                                  "-Ducx=enabled needs libucx-dev)"
                                                : "not compiled in (built without "
                                                  "libibverbs/librdmacm: -Dverbs=enabled)"));
            json_array_append_new(a, o);
            continue;
        }
        dc_status_t st = t->init();
        json_object_set_new(o, "usable", json_boolean(st == DC_OK));
        if (st != DC_OK) {
            json_object_set_new(o, "reason", json_string(dc_last_error()));
            json_array_append_new(a, o);
            continue;
        }
        dc_verbs_caps_t c = {.size = sizeof(c)};
        if ((st = t->caps(&c)) != DC_OK) {
            json_object_set_new(o, "reason", json_string(dc_last_error()));
        } else {
            json_object_set_new(o, "reason", json_string("initialized"));
            json_object_set_new(o, "device", dc_info_str_or_null(c.device));
            json_object_set_new(o, "speed_gbps", c.speed_gbps > 0 ? json_real(c.speed_gbps)
                                                                   : json_null());
            json_object_set_new(o, "max_msg_size", json_integer((json_int_t)c.max_msg_size));
            json_object_set_new(o, "max_streams", json_integer(c.max_streams));
            json_object_set_new(o, "gpu_memory",
                                json_boolean(c.mem_kinds & DC_VERBS_MEM_CUDA));
        }
        json_array_append_new(a, o);
    }
    return a;
}

static json_t *dc_info_tcp(void)
{
    json_t *o = json_object(), *a = json_array();
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) != 0) {
        json_object_set_new(o, "reason", json_sprintf("getifaddrs: %s", strerror(errno)));
    } else {
        for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
            if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET &&
                                 i->ifa_addr->sa_family != AF_INET6))
                continue;
            char addr[INET6_ADDRSTRLEN] = "?";
            const void *src = i->ifa_addr->sa_family == AF_INET
                                  ? (const void *)&((struct sockaddr_in *)i->ifa_addr)->sin_addr
                                  : (const void *)&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr;
            inet_ntop(i->ifa_addr->sa_family, src, addr, sizeof(addr));
            json_t *r = json_object();
            json_object_set_new(r, "name", json_string(i->ifa_name));
            json_object_set_new(r, "family",
                                json_string(i->ifa_addr->sa_family == AF_INET ? "inet" : "inet6"));
            json_object_set_new(r, "address", json_string(addr));
            json_object_set_new(r, "up", json_boolean(i->ifa_flags & IFF_UP));
            json_object_set_new(r, "loopback", json_boolean(i->ifa_flags & IFF_LOOPBACK));
            json_array_append_new(a, r);
        }
        freeifaddrs(ifs);
    }
    json_object_set_new(o, "interfaces", a);
    return o;
}

static json_t *dc_info_ucx(void)
{
    json_t *o = json_object();
#if DC_HAVE_UCX
    char ver[64], res[1024];
    dc_status_t st = dc_ucx_describe(ver, sizeof(ver), res, sizeof(res));
    json_object_set_new(o, "compiled", json_true());
    json_object_set_new(o, "version", json_string(ver));
    json_object_set_new(o, "usable", json_boolean(st == DC_OK));
    json_object_set_new(o, "reason", json_string(st == DC_OK ? "context created"
                                                             : dc_last_error()));
    json_object_set_new(o, "transports", dc_info_split(res, ","));
#else
    json_object_set_new(o, "compiled", json_false());
    json_object_set_new(o, "usable", json_false());
    json_object_set_new(o, "reason", json_string("not compiled in (built without UCX)"));
#endif
    return o;
}

static json_t *dc_info_rdma(void)
{
    json_t *o = json_object();
#if DC_HAVE_VERBS
    char buf[8192];
    dc_status_t st = dc_rdma_describe(buf, sizeof(buf));
    json_object_set_new(o, "compiled", json_true());
    json_object_set_new(o, "devices", st == DC_OK ? dc_info_split(buf, "\n") : json_array());
    json_object_set_new(o, "reason", json_string(st == DC_OK ? "ibverbs devices listed"
                                                             : dc_last_error()));
#else
    json_object_set_new(o, "compiled", json_false());
    json_object_set_new(o, "devices", json_array());
    json_object_set_new(o, "reason", json_string("no RDMA device: not compiled in (built "
                                                 "without libibverbs/librdmacm)"));
#endif
    return o;
}

static json_t *dc_info_cuda(void)
{
    json_t *o = json_object();
    json_object_set_new(o, "compiled", json_boolean(DC_HAVE_CUDA));
    int ok = dc_kern_cuda_available();
    json_object_set_new(o, "usable", json_boolean(ok));
    if (!ok) {
        json_object_set_new(o, "reason", json_string(DC_HAVE_CUDA ? dc_kern_cuda_why()
                                                                  : "not compiled in (built "
                                                                    "without nvcc)"));
        return o;
    }
    dc_kern_cuda_props_t p;
    if (dc_kern_cuda_props(&p) == DC_OK) {
        json_object_set_new(o, "device", json_string(p.name));
        json_object_set_new(o, "compute_capability", json_sprintf("%d.%d", p.cc_major,
                                                                  p.cc_minor));
        json_object_set_new(o, "sm_count", json_integer(p.sm_count));
        json_object_set_new(o, "memory_bytes", json_integer((json_int_t)p.total_mem));
    }
    json_object_set_new(o, "reason", json_string("a device is usable"));
    return o;
}

/* Kernel TLS: the "tls" upper-layer protocol registered, or its module
 * present (loaded on first use), or the kernel's config says no. */
static json_t *dc_info_ktls(void)
{
    json_t *o = json_object();
    char ulp[256] = "";
    FILE *f = fopen("/proc/sys/net/ipv4/tcp_available_ulp", "r");
    if (f) {
        if (!fgets(ulp, sizeof(ulp), f))
            ulp[0] = 0;
        fclose(f);
        ulp[strcspn(ulp, "\n")] = 0;
    }
    struct utsname u;
    char path[512] = "";
    struct stat sb;
    bool mod = false;
    if (uname(&u) == 0) {
        static const char *const ext[] = {"", ".xz", ".zst", ".gz"};
        for (size_t i = 0; i < DC_ARRAY_SIZE(ext) && !mod; i++) {
            snprintf(path, sizeof(path), "/lib/modules/%s/kernel/net/tls/tls.ko%s", u.release,
                     ext[i]);
            mod = stat(path, &sb) == 0;
        }
    }
    bool reg = false;
    for (const char *p = ulp; *p;) {
        size_t n = strcspn(p, " ");
        reg |= n == 3 && memcmp(p, "tls", 3) == 0;
        p += n + (p[n] == ' ');
    }
    json_object_set_new(o, "available", json_boolean(reg || mod));
    if (reg)
        json_object_set_new(o, "reason", json_sprintf("the tls ULP is registered "
                                                      "(tcp_available_ulp: %s)", ulp));
    else if (mod)
        json_object_set_new(o, "reason", json_sprintf("module %s present (loaded on first use)",
                                                      path));
    else
        json_object_set_new(o, "reason",
                            json_sprintf("this kernel (%s) has no CONFIG_TLS: no tls in "
                                         "tcp_available_ulp (%s) and no tls module; TLS "
                                         "runs in user space (OpenSSL)",
                                         uname(&u) == 0 ? u.release : "?",
                                         ulp[0] ? ulp : "empty"));
    return o;
}

static json_t *dc_info_cpu(void)
{
    json_t *o = json_object();
    char model[256] = "";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof(line), f)) {
            if (strncmp(line, "model name", 10) == 0) {
                const char *c = strchr(line, ':');
                if (c) {
                    snprintf(model, sizeof(model), "%s", c + 1 + (c[1] == ' '));
                    model[strcspn(model, "\n")] = 0;
                }
                break;
            }
        }
        fclose(f);
    }
    json_object_set_new(o, "model", dc_info_str_or_null(model));
    json_t *isas = json_array();
    static const char *const all[] = {"scalar", "avx2", "avx512"};
    for (size_t i = 0; i < DC_ARRAY_SIZE(all); i++)
        if (dc_kern_isa_supported(all[i]))
            json_array_append_new(isas, json_string(all[i]));
    json_object_set_new(o, "isa_supported", isas);
    json_object_set_new(o, "kernel_isa", json_string(dc_kern_isa()));
    json_object_set_new(o, "DELTACAST_KERN_ISA", dc_info_str_or_null(dc_config_get("kern_isa")));
    json_object_set_new(o, "crc32c", json_string(dc_crc32c_impl()));
    return o;
}

static json_t *dc_info_hw(void)
{
    json_t *o = json_object();
    dc_hw_info_t *hw = NULL;
    dc_status_t st = dc_hw_discover(&hw);
    if (st != DC_OK) {
        json_object_set_new(o, "reason", json_string(dc_last_error()));
        return o;
    }
    json_t *g = json_array(), *n = json_array();
    for (uint32_t i = 0; i < hw->n_gpus; i++) {
        json_t *r = json_object();
        json_object_set_new(r, "name", json_string(hw->gpus[i].name));
        json_object_set_new(r, "pci", json_string(hw->gpus[i].pci));
        json_object_set_new(r, "closest_nic", json_integer(hw->gpus[i].nic));
        json_array_append_new(g, r);
    }
    for (uint32_t i = 0; i < hw->n_nics; i++) {
        json_t *r = json_object();
        json_object_set_new(r, "name", json_string(hw->nics[i].name));
        json_object_set_new(r, "kind", json_string(hw->nics[i].kind));
        json_object_set_new(r, "pci", json_string(hw->nics[i].pci));
        json_array_append_new(n, r);
    }
    json_object_set_new(o, "gpus", g);
    json_object_set_new(o, "nics", n);
    json_object_set_new(o, "numa_nodes", json_integer(hw->n_numa));
    json_object_set_new(o, "cores", json_integer(hw->n_cores));
    json_object_set_new(o, "reason", json_string("hwloc"));
    dc_hw_free(hw);
    return o;
}

static const char *dc_info_s(const json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "-";
}

static void dc_info_print(const json_t *j)
{
    printf("deltacast %s (%s)\n", dc_info_s(j, "version"), dc_info_s(j, "build_features"));
    printf("\nTransports:\n");
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(j, "transports"), i, v) {
        bool ok = json_is_true(json_object_get(v, "usable"));
        printf("  %-5s %-10s ", dc_info_s(v, "name"), ok ? "usable" : "unusable");
        if (ok) {
            json_t *sp = json_object_get(v, "speed_gbps");
            printf("device %s", dc_info_s(v, "device"));
            if (json_is_number(sp))
                printf(", %.0f Gb/s", json_number_value(sp));
            printf(", messages up to %lld B, %lld stream(s)%s\n",
                   (long long)json_integer_value(json_object_get(v, "max_msg_size")),
                   (long long)json_integer_value(json_object_get(v, "max_streams")),
                   json_is_true(json_object_get(v, "gpu_memory")) ? ", GPU memory" : "");
        } else {
            printf("%s\n", dc_info_s(v, "reason"));
        }
    }
    printf("  --transport auto: %s\n", dc_info_s(j, "auto"));
    printf("\ntcp interfaces:\n");
    json_array_foreach(json_object_get(json_object_get(j, "tcp"), "interfaces"), i, v)
        printf("  %-12s %-6s %-40s %s%s\n", dc_info_s(v, "name"), dc_info_s(v, "family"),
               dc_info_s(v, "address"), json_is_true(json_object_get(v, "up")) ? "up" : "down",
               json_is_true(json_object_get(v, "loopback")) ? ", loopback" : "");
    const json_t *u = json_object_get(j, "ucx");
    printf("\nucx: ");
    if (!json_is_true(json_object_get(u, "compiled"))) {
        printf("%s\n", dc_info_s(u, "reason"));
    } else {
        printf("UCX %s, %s\n", dc_info_s(u, "version"), dc_info_s(u, "reason"));
        json_array_foreach(json_object_get(u, "transports"), i, v)
            printf("  %s\n", json_string_value(v));
    }
    const json_t *r = json_object_get(j, "rdma");
    const json_t *devs = json_object_get(r, "devices");
    printf("\nrdma: %s\n", json_array_size(devs) ? "" : dc_info_s(r, "reason"));
    json_array_foreach(devs, i, v)
        printf("  %s\n", json_string_value(v));
    const json_t *c = json_object_get(j, "cuda");
    if (json_is_true(json_object_get(c, "usable")))
        printf("\ncuda: %s (compute capability %s, %lld SMs)\n", dc_info_s(c, "device"),
               dc_info_s(c, "compute_capability"),
               (long long)json_integer_value(json_object_get(c, "sm_count")));
    else
        printf("\ncuda: unusable: %s\n", dc_info_s(c, "reason"));
    const json_t *k = json_object_get(j, "ktls");
    printf("\nkernel TLS: %s: %s\n",
           json_is_true(json_object_get(k, "available")) ? "available" : "not available",
           dc_info_s(k, "reason"));
    const json_t *p = json_object_get(j, "cpu");
    printf("\ncpu: %s\n  kernel ISA %s (this CPU and build run:", dc_info_s(p, "model"),
           dc_info_s(p, "kernel_isa"));
    json_array_foreach(json_object_get(p, "isa_supported"), i, v)
        printf(" %s", json_string_value(v));
    printf(")");
    if (json_is_string(json_object_get(p, "DELTACAST_KERN_ISA")))
        printf(", DELTACAST_KERN_ISA=%s", dc_info_s(p, "DELTACAST_KERN_ISA"));
    printf(", crc32c %s\n", dc_info_s(p, "crc32c"));
    const json_t *h = json_object_get(j, "hw");
    if (json_object_get(h, "gpus")) {
        printf("\nhardware (hwloc): %lld core(s), %lld NUMA node(s)\n",
               (long long)json_integer_value(json_object_get(h, "cores")),
               (long long)json_integer_value(json_object_get(h, "numa_nodes")));
        json_array_foreach(json_object_get(h, "nics"), i, v)
            printf("  nic %-12s %-12s %s\n", dc_info_s(v, "name"), dc_info_s(v, "kind"),
                   dc_info_s(v, "pci"));
        json_array_foreach(json_object_get(h, "gpus"), i, v)
            printf("  gpu %-12s %s\n", dc_info_s(v, "name"), dc_info_s(v, "pci"));
    } else {
        printf("\nhardware: %s\n", dc_info_s(h, "reason"));
    }
}

int dc_cmd_info(int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    bool json = false;
    int c;
    optind = 1;
    while ((c = dc_cli_getopt("info", argc, argv, "h", opts)) != -1) {
        switch (c) {
        case 'j': json = true; break;
        case 'h': dc_info_help(stdout); return DC_EXIT_OK;
        default: return DC_EXIT_USAGE;
        }
    }
    if (optind < argc)
        return dc_cli_usage_error("info", "unexpected argument '%s'", argv[optind]);
    if (json)
        dc_perf_json_reserve_stdout(); /* a library printing to stdout goes to stderr */
    json_t *j = json_object();
    json_object_set_new(j, "version", json_string(dc_version_string()));
    json_object_set_new(j, "build_features", json_string(dc_build_features()));
    json_object_set_new(j, "transports", dc_info_transports());
    const dc_verbs_ops_t *t;
    char why[512];
    json_object_set_new(j, "auto", dc_verbs_select("auto", &t, why, sizeof(why)) == DC_OK
                                       ? json_string(why)
                                       : json_string(dc_last_error()));
    json_object_set_new(j, "tcp", dc_info_tcp());
    json_object_set_new(j, "ucx", dc_info_ucx());
    json_object_set_new(j, "rdma", dc_info_rdma());
    json_object_set_new(j, "cuda", dc_info_cuda());
    json_object_set_new(j, "ktls", dc_info_ktls());
    json_object_set_new(j, "cpu", dc_info_cpu());
    json_object_set_new(j, "hw", dc_info_hw());
    if (json)
        dc_perf_json_print(j);
    else
        dc_info_print(j);
    json_decref(j);
    return DC_EXIT_OK;
}
