/* mpi_agree.c - every process of a run agrees on what it was given
 * before any work (coll_processes_agree_args, coll_processes_agree_items
 * in coll.h).
 *
 * Processes started with different arguments or environments would
 * otherwise run different programs that meet in the same collectives: a
 * different --steps hangs until the watchdog, a different --seed or
 * PARITY_BACKEND computes other bits and the checker blames the layout,
 * an output named on one process only is never written. So the first
 * thing a process does under mpirun is compare: first its argument list
 * and PARITY_* variables (the texts travel, so a difference can be named:
 * "process 1 has --steps 3, process 0 has --steps 2"), then what it
 * resolved from the files those arguments name (model config, layout,
 * data, checkpoint; only digests travel). Every process computes the
 * same verdict from the same gathered bytes, so all of them stop
 * together, with the same message and exit status, and none waits.
 */
#ifdef PARITY_HAVE_MPI
#include "mpi_internal.h"

#include <stdlib.h>
#include <string.h>

#include "parity/sha256.h"

extern char **environ;

static const int no_peer = -1;
static int stopped_together;

int coll_processes_stopped_together(void) { return stopped_together; }

/* Every process's bytes, gathered on every process: all[p] (lens[p]
 * bytes) inside one buffer, NULL when out of memory (on any process:
 * then on every one, so that none waits for another). The counts are
 * static, so that no allocation can keep a process out of the
 * collectives (one thread calls this, before any device runs). */
static int lens[PARITY_MAX_DEVICES], offs[PARITY_MAX_DEVICES];

static char *gather_all(const char *mine, int len) {
    const int P = runtime_processes();
    net_wait_t w = {NULL, "the processes' agreement", 0, &no_peer};
    MPI_Request r;
    MPI_Iallgather(&len, 1, MPI_INT, lens, 1, MPI_INT, net_host_comm, &r);
    net_wait_all(1, &r, &w);
    size_t total = 0;
    for (int p = 0; p < P; p++) {
        offs[p] = (int)total;
        total += (size_t)lens[p];
    }
    char *all = total < (size_t)1 << 30 ? malloc(total + 1) : NULL;
    int ok = all != NULL, all_ok = 0;
    /* one process out of memory must not leave the others waiting */
    MPI_Iallreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, net_host_comm, &r);
    net_wait_all(1, &r, &w);
    if (!all_ok) {
        free(all);
        return NULL;
    }
    MPI_Iallgatherv(mine, len, MPI_BYTE, all, lens, offs, MPI_BYTE, net_host_comm, &r);
    net_wait_all(1, &r, &w);
    return all;
}

/* ---- the arguments and the environment ---- */

/* A record list: "a" then an argument, or "e" then NAME=VALUE, each
 * NUL-terminated; the variables sorted by name. */
typedef struct {
    const char *arg[4096];
    int nargs;
    const char *env[1024];
    int nenv;
} given_t;

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int given_parse(const char *buf, int len, given_t *g) {
    g->nargs = g->nenv = 0;
    for (const char *s = buf; s < buf + len; s += strlen(s) + 1) {
        if (s[0] == 'a' && g->nargs < 4096) g->arg[g->nargs++] = s + 1;
        else if (s[0] == 'e' && g->nenv < 1024) g->env[g->nenv++] = s + 1;
        else return -1;
    }
    return 0;
}

/* What this process was given, as records (malloc'd). */
static char *given_records(int argc, char **argv, int *len) {
    const char *env[1024];
    int nenv = 0;
    for (char **v = environ; v && *v && nenv < 1024; v++)
        if (!strncmp(*v, "PARITY_", 7) && strchr(*v, '=')) env[nenv++] = *v; /* execve allows none */
    qsort(env, (size_t)nenv, sizeof *env, cmp_str);
    size_t n = 0;
    for (int i = 1; i < argc && i <= 4096; i++) n += strlen(argv[i]) + 2;
    for (int i = 0; i < nenv; i++) n += strlen(env[i]) + 2;
    char *buf = n < (size_t)1 << 28 ? malloc(n + 1) : NULL;
    if (!buf) return NULL;
    size_t at = 0;
    for (int i = 1; i < argc && i <= 4096; i++) at += (size_t)sprintf(buf + at, "a%s", argv[i]) + 1;
    for (int i = 0; i < nenv; i++) at += (size_t)sprintf(buf + at, "e%s", env[i]) + 1;
    *len = (int)at;
    return buf;
}

/* Argument k as a user reads it: a flag with its value ("--steps 3"),
 * a value with the flag before it, or "nothing". */
static void arg_text(const given_t *g, int k, char *out, size_t cap) {
    if (k >= g->nargs) {
        snprintf(out, cap, "nothing");
        return;
    }
    const char *a = g->arg[k];
    if (a[0] != '-' && k > 0 && !strncmp(g->arg[k - 1], "--", 2))
        snprintf(out, cap, "'%s %s'", g->arg[k - 1], a);
    else if (!strncmp(a, "--", 2) && k + 1 < g->nargs && g->arg[k + 1][0] != '-')
        snprintf(out, cap, "'%s %s'", a, g->arg[k + 1]);
    else
        snprintf(out, cap, "'%s'", a);
}

/* The value of variable NAME in g ("NAME=VALUE"), NULL when unset. */
static const char *env_value(const given_t *g, const char *name, size_t nlen) {
    for (int i = 0; i < g->nenv; i++)
        if (!strncmp(g->env[i], name, nlen) && g->env[i][nlen] == '=') return g->env[i] + nlen + 1;
    return NULL;
}

/* The first difference between process p's records and process 0's. */
static int name_difference(int p, const given_t *mine, const given_t *zero, perr_t *e) {
    int k = 0;
    while (k < mine->nargs && k < zero->nargs && !strcmp(mine->arg[k], zero->arg[k])) k++;
    if (k < mine->nargs || k < zero->nargs) {
        char a[600], b[600];
        arg_text(mine, k, a, sizeof a);
        arg_text(zero, k, b, sizeof b);
        return perr_set(e, "MPI process %d was started with other arguments than process 0: "
                           "argument %d is %s on process %d and %s on process 0; every process of "
                           "a run must be given the same arguments", p, k + 1, a, p, b);
    }
    /* the variables: the first name (in order) whose value differs */
    const given_t *side[2] = {mine, zero};
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < side[s]->nenv; i++) {
            const char *var = side[s]->env[i], *eq = strchr(var, '=');
            const size_t nlen = (size_t)(eq - var);
            const char *v1 = env_value(mine, var, nlen), *v0 = env_value(zero, var, nlen);
            if (v1 && v0 && !strcmp(v1, v0)) continue;
            return perr_set(e, "MPI process %d was started with another environment than process 0: "
                               "%.*s is %s%s%s on process %d and %s%s%s on process 0; every process "
                               "of a run must have the same PARITY_* variables (mpirun -x NAME)",
                            p, (int)nlen, var, v1 ? "'" : "", v1 ? v1 : "unset", v1 ? "'" : "", p,
                            v0 ? "'" : "", v0 ? v0 : "unset", v0 ? "'" : "");
        }
    return perr_set(e, "MPI process %d was started differently from process 0", p);
}

int coll_processes_agree_args(int argc, char **argv, perr_t *e) {
    if (runtime_processes() < 2) return 0;
    const int P = runtime_processes();
    int len = 0;
    char *mine = given_records(argc, argv, &len);
    char *all = gather_all(mine ? mine : "", mine ? len : 0); /* out of memory: none of ours */
    int rc = 0;
    given_t *g = malloc(2 * sizeof *g);
    if (!mine || !all || !g) {
        rc = perr_set(e, "out of host memory comparing the processes' arguments");
    } else {
        for (int p = 1; p < P && !rc; p++) {
            if (lens[p] == lens[0] && !memcmp(all + offs[p], all, (size_t)lens[0])) continue;
            if (given_parse(all + offs[p], lens[p], &g[0]) || given_parse(all, lens[0], &g[1]))
                rc = perr_set(e, "MPI process %d sent an unreadable argument list", p);
            else
                rc = name_difference(p, &g[0], &g[1], e);
        }
    }
    stopped_together = rc != 0;
    free(g);
    free(all);
    free(mine);
    return rc;
}

/* ---- what the arguments resolved to ---- */

int coll_processes_agree_items(int n, const coll_agree_item_t *items, perr_t *e) {
    if (runtime_processes() < 2) return 0;
    const int P = runtime_processes();
    uint8_t mine[COLL_AGREE_MAX_ITEMS * 32];
    if (n > COLL_AGREE_MAX_ITEMS) n = COLL_AGREE_MAX_ITEMS; /* the rest compared by none */
    for (int i = 0; i < n; i++) sha256(items[i].data, items[i].len, mine + 32 * i);
    char *all = gather_all((const char *)mine, n * 32);
    int rc = all ? 0 : perr_set(e, "out of host memory comparing the processes' inputs");
    for (int p = 1; p < P && !rc; p++)
        for (int i = 0; i < n && !rc; i++)
            if (lens[p] != lens[0] || memcmp(all + offs[p] + 32 * i, all + 32 * i, 32))
                rc = perr_set(e, "MPI process %d resolved %s differently from process 0 (the same "
                                 "arguments, but what they name differs between the processes: %s); "
                                 "every process must read the same files",
                              p, items[i].what, items[i].source);
    stopped_together = rc != 0;
    free(all);
    return rc;
}

void coll_processes_stop_together(void) { stopped_together = runtime_processes() > 1; }

#else /* built without MPI: one process, nothing to agree on */

#include "net.h"

int coll_processes_agree_args(int argc, char **argv, perr_t *e) {
    (void)argc, (void)argv, (void)e;
    return 0;
}

int coll_processes_agree_items(int n, const coll_agree_item_t *items, perr_t *e) {
    (void)n, (void)items, (void)e;
    return 0;
}

int coll_processes_stopped_together(void) { return 0; }
void coll_processes_stop_together(void) {}
#endif
