/* test_gen_slow.c - `deltacast gen` at benchmark size (suite 'slow'):
 * 1e9 BF16 parameters (two 2 GB files), streamed.  Checks the summary, the
 * file sizes, that both files open and validate, and the change rate.
 * Skips when the temp file system lacks 5 GB. */
#include "testenv.h"
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>

#include "kernels/safetensors.h"

Test(gen_slow, one_billion_params, .timeout = 1200)
{
    const char *bin = dc_test_bin();
    cr_assert_not_null(bin);
    char dir[] = "/tmp/dc_gen_slowXXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    struct statvfs vfs;
    if (statvfs(dir, &vfs) == 0 && (double)vfs.f_bavail * (double)vfs.f_frsize < 5e9) {
        rmdir(dir);
        cr_skip_test("less than 5 GB free under /tmp");
    }
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "'%s' gen --params 1e9 --change-rate 0.01 --model optimizer --json -o '%s'", bin, dir);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    static char out[8192];
    size_t n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = 0;
    int rc = pclose(p);
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    char base[600], next[600];
    snprintf(base, sizeof(base), "%s/base.safetensors", dir);
    snprintf(next, sizeof(next), "%s/next.safetensors", dir);

    bool ok = WIFEXITED(rc) && WEXITSTATUS(rc) == 0 && j != NULL;
    double params = ok ? json_number_value(json_object_get(j, "params")) : 0;
    double rate = ok ? json_number_value(json_object_get(j, "real_rate")) : 0;
    double bytes = ok ? json_number_value(json_object_get(j, "file_bytes")) : 0;
    double secs = ok ? json_number_value(json_object_get(j, "seconds")) : 0;
    struct stat sb, sn;
    bool sizes = stat(base, &sb) == 0 && stat(next, &sn) == 0 && (double)sb.st_size == bytes &&
                 sb.st_size == sn.st_size;
    dc_st_file_t *fb = NULL, *fn = NULL;
    bool opened = dc_st_open(base, DC_ST_READ, &fb) == DC_OK &&
                  dc_st_open(next, DC_ST_READ, &fn) == DC_OK;
    dc_st_close(fb);
    dc_st_close(fn);
    unlink(base);
    unlink(next);
    rmdir(dir);
    json_decref(j);

    cr_assert(ok, "gen failed: %s", out);
    cr_log_info("gen 1e9: %.0f params, %.2f s, real rate %.5f", params, secs, rate);
    cr_assert(params > 0.99e9 && params <= 1e9, "params %g", params);
    cr_assert(bytes > 2e9, "file_bytes %g", bytes);
    cr_assert(sizes, "file sizes do not match the summary");
    cr_assert(opened, "generated files do not validate: %s", dc_last_error());
    cr_assert(rate > 0.008 && rate < 0.012, "real rate %g", rate);
}
