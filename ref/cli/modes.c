/* modes.c - `parity modes`: every mode, and for every pair of modes of
 * different families whether parity runs the composition or refuses it,
 * with the refusal's own message. Each verdict comes from running this
 * program's `check --print-layout` on the pair's merged flags (the
 * validation every run makes before it allocates a device), so the
 * matrix is the runs' rules, not a copy of them. --sample draws seeded
 * random three- and four-way compositions the same way.
 * tests/compose/test_pairs.sh reads `--tsv` and runs every supported
 * pair with `parity check`; a pair that validates but does not run
 * bit-exact fails there. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "modes.h"

/* ---- merging flags ---- */

/* Splits s (copied into *at, advancing it, at most *left bytes) into
 * words appended to w[*n..]; -1 when out of room. */
static int split_words(const char *s, char **at, int *left, char **w, int *n) {
    while (*s) {
        while (*s == ' ') s++;
        if (!*s) break;
        const char *e = strchr(s, ' ');
        const int len = e ? (int)(e - s) : (int)strlen(s);
        if (len + 1 > *left || *n >= MODES_MAX_ARGS) return -1;
        memcpy(*at, s, (size_t)len);
        (*at)[len] = 0;
        w[(*n)++] = *at;
        *at += len + 1, *left -= len + 1;
        s += len;
    }
    return 0;
}

static int is_number(const char *s) {
    if (!*s) return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9') return 0;
    return 1;
}

/* Adds words w[0..n) (flags, each followed by its value unless the next
 * word is a flag) to argv[0..*argc), merging a repeated flag. */
static int merge_words(char **w, int n, char **argv, int *argc) {
    for (int i = 0; i < n; i++) {
        char *flag = w[i], *val = i + 1 < n && strncmp(w[i + 1], "--", 2) ? w[++i] : NULL;
        int at = -1;
        for (int k = 0; k < *argc; k++)
            if (!strcmp(argv[k], flag)) at = k;
        if (at < 0) {
            if (*argc + 2 > MODES_MAX_ARGS) return -1;
            argv[(*argc)++] = flag;
            if (val) argv[(*argc)++] = val;
            continue;
        }
        char *old = at + 1 < *argc && strncmp(argv[at + 1], "--", 2) ? argv[at + 1] : NULL;
        if (!val && !old) continue;
        if (!val || !old) return -1;
        if (is_number(val) && is_number(old)) {
            if (atoll(val) > atoll(old)) argv[at + 1] = val;
        } else if (strcmp(val, old)) {
            return -1; /* two words for one flag: alternatives */
        }
    }
    return 0;
}

int modes_merge(const modes_entry_t *const *all, int n, int large, char *buf, int cap, char **argv) {
    char *w[MODES_MAX_ARGS];
    int nw = 0, argc = 0;
    const char *model = NULL;
    for (int k = 0; k < n; k++) {
        if (!all[k]->model) continue;
        if (model && strcmp(model, all[k]->model)) return -1;
        model = all[k]->model;
    }
    /* an encoder-decoder's model flags replace the GPT base: the
     * batch is the base's, the shape the model's own */
    if (split_words(model ? model : modes_base(large), &buf, &cap, w, &nw)) return -1;
    if (model && split_words(large ? "--global-batch-size 32" : "", &buf, &cap, w, &nw)) return -1;
    for (int k = 0; k < n; k++)
        if (split_words(all[k]->flags, &buf, &cap, w, &nw) ||
            split_words(modes_extra(all[k], all, n), &buf, &cap, w, &nw))
            return -1;
    /* the model's flags first (the base's --model is the first word) */
    if (merge_words(w, nw, argv, &argc)) return -1;
    return argc;
}

/* ---- running the validation ---- */

typedef struct {
    int n, ways[MODES_MAX_WAYS];
    int status;      /* 0 supported, 1 refused, 2 alternatives */
    char reason[512];
    char flags[1024];
} verdict_t;

/* The flags as one line (the @TMP placeholder left for the caller). */
static void join(char **argv, int argc, char *out, size_t cap) {
    size_t at = 0;
    out[0] = 0;
    for (int k = 0; k < argc && at + 1 < cap; k++)
        at += (size_t)snprintf(out + at, cap - at, "%s%s", k ? " " : "", argv[k]);
}

/* Runs `parity check ARGS --print-layout` (this program, tmp for @TMP)
 * and keeps its first line of stderr as the reason when it refuses. */
static void validate(verdict_t *v, char **argv, int argc, const char *self, const char *tmp) {
    char *args[MODES_MAX_ARGS + 4];
    int k = 0;
    args[k++] = (char *)self, args[k++] = "check";
    for (int i = 0; i < argc; i++) args[k++] = strcmp(argv[i], "@TMP") ? argv[i] : (char *)tmp;
    args[k++] = "--print-layout", args[k] = NULL;
    int pipefd[2];
    if (pipe(pipefd)) {
        v->status = 1, snprintf(v->reason, sizeof v->reason, "pipe: %s", strerror(errno));
        return;
    }
    fflush(NULL);
    const pid_t pid = fork();
    if (pid == 0) {
        const int null = open("/dev/null", O_WRONLY);
        dup2(null, 1), dup2(pipefd[1], 2), close(pipefd[0]);
        execv(self, args);
        _exit(127);
    }
    close(pipefd[1]);
    char msg[4096];
    size_t got = 0;
    ssize_t r;
    while ((r = read(pipefd[0], msg + got, sizeof msg - 1 - got)) > 0) got += (size_t)r;
    close(pipefd[0]);
    msg[got] = 0;
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) < 0) st = -1;
    v->status = !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    char *nl = strchr(msg, '\n');
    if (nl) *nl = 0;
    const char *m = strncmp(msg, "parity check: ", 14) ? msg : msg + 14;
    snprintf(v->reason, sizeof v->reason, "%.500s", v->status ? (*m ? m : "refused (no message)") : "");
}

/* One composition: alternatives when two modes share a family or
 * their flags disagree; else the program's verdict. */
static void judge(verdict_t *v, int large, const char *self, const char *tmp) {
    const modes_entry_t *all[MODES_MAX_WAYS];
    for (int k = 0; k < v->n; k++) all[k] = &modes_table[v->ways[k]];
    v->reason[0] = v->flags[0] = 0;
    for (int a = 0; a < v->n; a++)
        for (int b = a + 1; b < v->n; b++)
            if (!strcmp(all[a]->family, all[b]->family)) {
                v->status = 2;
                snprintf(v->reason, sizeof v->reason, "one family (%s): alternatives", all[a]->family);
                return;
            }
    char buf[2048], *argv[MODES_MAX_ARGS];
    const int argc = modes_merge(all, v->n, large, buf, sizeof buf, argv);
    if (argc < 0) {
        v->status = 2;
        snprintf(v->reason, sizeof v->reason, "their flags give one flag two values: alternatives");
        return;
    }
    join(argv, argc, v->flags, sizeof v->flags);
    validate(v, argv, argc, self, tmp);
}

/* ---- printing ---- */

static void name_of(const verdict_t *v, char *out, size_t cap) {
    size_t at = 0;
    for (int k = 0; k < v->n; k++)
        at += (size_t)snprintf(out + at, cap - at, "%s%s", k ? "+" : "", modes_table[v->ways[k]].name);
}

static const char *const status_name[] = {"supported", "refused", "alternatives"};

static void print_verdict(const verdict_t *v, int tsv, const char *kind) {
    char name[128];
    name_of(v, name, sizeof name);
    if (tsv) printf("%s\t%s\t%s\t%s\t%s\n", kind, name, status_name[v->status], v->flags, v->reason);
    else if (v->status == 1) printf("  %-28s refused: %s\n", name, v->reason);
    else if (v->status == 0) printf("  %-28s supported\n", name);
}

/* splitmix64: the sample's draws, reproducible from the printed seed. */
static uint64_t next(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* n random compositions of 3 or 4 modes of distinct families. */
static void sample(int n, uint64_t seed, int large, int tsv, const char *self, const char *tmp) {
    const int M = modes_count();
    uint64_t s = seed;
    printf("%s%s%llu\n", tsv ? "seed\t" : "", tsv ? "" : "sample seed ", (unsigned long long)seed);
    for (int i = 0; i < n; i++) {
        verdict_t v = {0};
        v.n = 3 + (int)(next(&s) % 2);
        for (int k = 0; k < v.n; k++) {
            int m, clash;
            do { /* a mode of a family not drawn yet */
                m = (int)(next(&s) % (uint64_t)M), clash = 0;
                for (int j = 0; j < k; j++)
                    clash |= !strcmp(modes_table[m].family, modes_table[v.ways[j]].family);
            } while (clash);
            v.ways[k] = m;
        }
        judge(&v, large, self, tmp);
        print_verdict(&v, tsv, "combo");
    }
}

static void usage(FILE *f) {
    fputs("usage: parity modes [--tsv] [--large] [--sample N [--seed S]]\n"
          "every mode parity composes, then every pair of modes of different families:\n"
          "supported, or refused with the message a run gives (each verdict is this program's\n"
          "own `parity check FLAGS --print-layout`, so the matrix cannot drift from the runs)\n"
          "  --tsv        tab-separated: mode NAME FAMILY FLAGS WHAT, then\n"
          "               pair|combo A+B STATUS FLAGS REASON (tests/compose/ reads it)\n"
          "  --large      the pairs at make check-compose's size (gpt-tiny, 32 sequences)\n"
          "  --sample N   instead of the pairs: N random 3- and 4-way compositions\n"
          "  --seed S     the sample's seed (default: from the clock; printed either way)\n"
          "  @TMP in a mode's flags is a directory of the caller's (offload files)\n",
          f);
}

int cmd_modes(int argc, char **argv) {
    int tsv = 0, large = 0, n_sample = -1;
    uint64_t seed = 0;
    int seeded = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return usage(stdout), 0;
        else if (!strcmp(a, "--tsv") && !tsv) tsv = 1;
        else if (!strcmp(a, "--large") && !large) large = 1;
        else if (!strcmp(a, "--sample") && n_sample < 0 && i + 1 < argc && is_number(argv[i + 1]) &&
                 strlen(argv[i + 1]) < 7)
            n_sample = atoi(argv[++i]);
        else if (!strcmp(a, "--seed") && !seeded && i + 1 < argc && is_number(argv[i + 1]) &&
                 strlen(argv[i + 1]) < 20)
            seed = strtoull(argv[++i], NULL, 10), seeded = 1;
        else {
            fprintf(stderr, "parity modes: '%s': unknown, repeated or without its number\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (seeded && n_sample < 0) {
        fprintf(stderr, "parity modes: --seed: only --sample draws compositions\n");
        return 2;
    }
    char self[4096];
    const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) {
        fprintf(stderr, "parity modes: /proc/self/exe: %s\n", strerror(errno));
        return 2;
    }
    self[len] = 0;
    char tmp[] = "/tmp/parity-modes-XXXXXX"; /* offload's files would go here: none are made */
    if (!mkdtemp(tmp)) {
        fprintf(stderr, "parity modes: %s: %s\n", tmp, strerror(errno));
        return 2;
    }
    const int M = modes_count();
    if (!tsv) printf("modes (%d; families in brackets; a pair of one family is two alternatives):\n", M);
    for (int m = 0; m < M; m++) {
        const modes_entry_t *e = &modes_table[m];
        if (tsv) printf("mode\t%s\t%s\t%s\t%s\n", e->name, e->family, e->flags, e->what);
        else printf("  %-14s [%s] %s: %s\n", e->name, e->family, e->what, *e->flags ? e->flags : e->model);
    }
    if (n_sample >= 0) {
        if (!seeded) seed = (uint64_t)time(NULL) * 2654435761u ^ (uint64_t)getpid();
        sample(n_sample, seed, large, tsv, self, tmp);
    } else {
        int count[3] = {0};
        if (!tsv) printf("pairs (the base: %s):\n", modes_base(large));
        for (int a = 0; a < M; a++)
            for (int b = a + 1; b < M; b++) {
                verdict_t v = {.n = 2, .ways = {a, b}};
                judge(&v, large, self, tmp);
                count[v.status]++;
                print_verdict(&v, tsv, "pair");
            }
        printf("%s%d supported, %d refused, %d alternatives\n", tsv ? "total\t" : "", count[0],
               count[1], count[2]);
    }
    rmdir(tmp);
    return 0;
}
