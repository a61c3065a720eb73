/* launch.c - rank and size from the launcher's environment (Open MPI, PMI,
 * PMIx, Slurm). */
#include "topology/topo.h"

#include <errno.h>
#include <stdlib.h>

static dc_status_t env_int(const char *name, int32_t *out, bool *found)
{
    const char *v = getenv(name);
    *found = false;
    if (!v)
        return DC_OK;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (!*v || *end || errno || x < 0 || x > INT32_MAX)
        return dc_error(DC_ERR_INVALID, "environment %s='%s' is not a non-negative integer", name, v);
    *out = (int32_t)x;
    *found = true;
    return DC_OK;
}

dc_status_t dc_launch_from_env(dc_launch_info_t *out)
{
    dc_status_t cst = dc_struct_check(out, sizeof(dc_launch_info_t), sizeof(dc_launch_info_t),
                                      "dc_launch_from_env: out");
    if (cst != DC_OK)
        return cst;
    static const struct {
        const char *src, *rank, *size, *local;
    } tab[] = {
        {"ompi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
        {"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
        {"pmix", "PMIX_RANK", "PMIX_SIZE", "PMIX_LOCAL_RANK"},
        {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
    };
    dc_launch_info_t r = {.size = sizeof(r), .rank = -1, .world_size = -1, .local_rank = -1, .source = "none"};
    for (size_t i = 0; i < DC_ARRAY_SIZE(tab); i++) {
        bool f;
        int32_t rank = -1, size = -1, local = -1;
        dc_status_t st = env_int(tab[i].rank, &rank, &f);
        if (st != DC_OK)
            return st;
        if (!f)
            continue;
        if ((st = env_int(tab[i].size, &size, &f)) != DC_OK)
            return st;
        if (!f && i == 2) {
            /* PMIx has no size variable of its own; Open MPI sets it above */
            size = -1;
        }
        if ((st = env_int(tab[i].local, &local, &f)) != DC_OK)
            return st;
        if (size >= 0 && rank >= size)
            return dc_error(DC_ERR_INVALID, "environment %s=%d is not below %s=%d", tab[i].rank, rank,
                            tab[i].size, size);
        r.rank = rank;
        r.world_size = size;
        r.local_rank = local;
        r.source = tab[i].src;
        break;
    }
    *out = r;
    return DC_OK;
}
