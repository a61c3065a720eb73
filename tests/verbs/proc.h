/* proc.h - run the deltacast CLI as a separate process (tests/verbs). */
#ifndef DC_TEST_VERBS_PROC_H
#define DC_TEST_VERBS_PROC_H

#include "testenv.h"
#include <criterion/criterion.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

static inline const char *proc_bin(void)
{
    const char *b = dc_test_bin();
    return b && *b ? b : "deltacast";
}

/* Spawn argv with extra env "K=V" strings (NULL-terminated), stdout and
 * stderr to `log` (appended).  Returns the pid.  The child is killed when
 * the test's process exits. */
static inline pid_t proc_spawn(char *const argv[], const char *const env[], const char *log)
{
    fflush(NULL);
    pid_t parent = getpid();
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        /* dies with the test: a failed assertion leaves no server behind */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        for (int i = 0; env && env[i]; i++)
            putenv((char *)env[i]);
        if (log) {
            int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
            if (fd >= 0) {
                dup2(fd, 1);
                dup2(fd, 2);
                close(fd);
            }
        }
        execvp(argv[0], argv);
        _exit(127);
    }
    return pid;
}

static inline int proc_wait(pid_t pid, double timeout_s)
{
    double waited = 0;
    int st = 0;
    while (waitpid(pid, &st, WNOHANG) == 0) {
        if (waited > timeout_s) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        usleep(10000);
        waited += 0.01;
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Wait for a file to hold one line; returns it (static buffer). */
static inline const char *proc_read_line(const char *path, double timeout_s)
{
    static char line[256];
    for (double w = 0; w < timeout_s; w += 0.02) {
        FILE *f = fopen(path, "r");
        if (f) {
            bool ok = fgets(line, sizeof(line), f) && strchr(line, '\n');
            fclose(f);
            if (ok) {
                line[strcspn(line, "\n")] = 0;
                return line;
            }
        }
        usleep(20000);
    }
    return NULL;
}

static inline bool proc_file_contains(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    char buf[1024];
    bool found = false;
    while (!found && fgets(buf, sizeof(buf), f))
        found = strstr(buf, needle) != NULL;
    fclose(f);
    return found;
}

/* The JSON object a command printed to `path` after any log lines (from
 * its first '{'; the file's first MiB: a perf link sweep's is long); the
 * test fails when there is none.  Caller decrefs. */
static inline json_t *proc_json(const char *path)
{
    FILE *f = fopen(path, "r");
    cr_assert(f, "cannot read %s", path);
    const size_t cap = (size_t)1 << 20;
    char *buf = malloc(cap);
    cr_assert(buf);
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = 0;
    char *brace = strchr(buf, '{');
    cr_assert(brace, "no JSON in %s", path);
    json_error_t je;
    json_t *j = json_loads(brace, JSON_DISABLE_EOF_CHECK, &je);
    free(buf);
    cr_assert(j, "bad JSON in %s: %s", path, je.text);
    return j;
}

/* A `deltacast perf link --server --transport tcp` on 127.0.0.1 with its
 * files in a fresh directory: dir/addr (the address it listens on),
 * dir/server.log, and dir/<name> paths for the test's own logs. */
typedef struct proc_pl_server {
    char dir[64];
    char addr_file[256], log[256];
    char addr[256];
    pid_t pid;
} proc_pl_server_t;

/* Start it with extra env (NULL-terminated) and, when `once`, --once;
 * waits for its address.  `tag` names the directory. */
static inline void proc_pl_server_start(proc_pl_server_t *s, const char *tag,
                                        const char *const env[], bool once)
{
    snprintf(s->dir, sizeof(s->dir), "/tmp/dc-%s-XXXXXX", tag);
    cr_assert(mkdtemp(s->dir));
    snprintf(s->addr_file, sizeof(s->addr_file), "%s/addr", s->dir);
    snprintf(s->log, sizeof(s->log), "%s/server.log", s->dir);
    char *argv[] = {(char *)proc_bin(), "perf", "link", "--server", "--transport", "tcp",
                    "--bind", "127.0.0.1:0", "--addr-file", s->addr_file,
                    once ? "--once" : NULL, NULL};
    s->pid = proc_spawn(argv, env, s->log);
    const char *a = proc_read_line(s->addr_file, 20);
    cr_assert(a, "server did not start (see %s)", s->log);
    snprintf(s->addr, sizeof(s->addr), "%s", a);
}

/* dir/<name> of the server's directory. */
static inline const char *proc_pl_path(const proc_pl_server_t *s, const char *name, char *buf,
                                       size_t len)
{
    snprintf(buf, len, "%s/%s", s->dir, name);
    return buf;
}

#endif /* DC_TEST_VERBS_PROC_H */
