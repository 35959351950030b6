/*
 * launch.c — starting the data-parallel ranks of f8_train (trainer.h's
 * train_launch).
 *
 * Design note. Three ways, one trainer per rank:
 *  - --ranks N: N threads of this process, CPU ctxs joined by one
 *    f8_comm_group (the test oracle; no GPU needed).
 *  - --gpus N: N child processes, rank r on GPU r, NCCL. The NCCL id is made
 *    by rank 0 (not by the parent: NCCL must not be initialised before a
 *    fork) and written into a pipe per other rank. The parent only waits: a
 *    rank that fails or dies makes it stop the others (SIGTERM) and say which
 *    rank and how, so a dead rank never leaves the rest hanging in a
 *    collective.
 *  - RANK, WORLD_SIZE (and LOCAL_RANK, MASTER_ADDR, MASTER_PORT) in the
 *    environment, as torchrun sets them (or mpirun's OMPI_COMM_WORLD_* /
 *    PMI_* with MASTER_ADDR and MASTER_PORT exported): this process is
 *    one rank on GPU LOCAL_RANK; rank 0 makes the id and serves it over TCP
 *    on MASTER_PORT, the others fetch it from MASTER_ADDR:MASTER_PORT.
 * Ranks other than 0 are quiet and write no log, plot or sample; all ranks
 * take part in checkpoints (the optimizer shards are gathered), rank 0 writes.
 */
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "parse.h"
#include "tp.h"
#include "trainer.h"

/* The options of rank r of world. */
train_options train_rank_options(const train_options *o, int r, int world)
{
    train_options x = *o;
    x.rank = r;
    x.world = world;
    if (r > 0) {
        x.quiet = 1;
        x.log = "";
        x.plot = "";
        x.fp8_report = 0;
        if (o->tp <= 1) { /* with TP the whole group runs every forward (its collectives): rank 0 alone prints */
            x.val_every = 0;
            x.sample = 0;
        }
    }
    return x;
}

/* One rank from creation to the end of its run; returns its exit code. */
static int run_rank(const train_options *o)
{
    char err[512] = "";
    trainer *t = NULL;
    f8_status st = trainer_create(o, &t, err, sizeof err);
    if (st != F8_OK) {
        fprintf(stderr, "f8_train: rank %d: %s: %s\n", o->rank, f8_status_string(st), err);
        return 1;
    }
    int rc = trainer_run(t);
    trainer_destroy(t);
    return rc;
}

/* ---- CPU ranks ------------------------------------------------------------------ */

typedef struct cpu_rank {
    train_options o;
    f8_comm_group **groups; /* every group of the run (world, TP, DP) */
    int n_groups;
    int rc;
} cpu_rank;

static void abort_all(f8_comm_group **g, int n)
{
    for (int k = 0; k < n; k++) f8_comm_group_abort(g[k]);
}

static void *cpu_rank_main(void *arg)
{
    cpu_rank *r = (cpu_rank *)arg;
    r->rc = run_rank(&r->o);
    /* a rank that stopped early (or never joined) must not leave the others
     * waiting, in whichever group they wait */
    if (r->rc == 1) abort_all(r->groups, r->n_groups);
    return NULL;
}

static int launch_cpu(const train_options *o)
{
    const int n = (int)o->ranks, P = o->tp > 1 ? (int)o->tp : 1, D = n / P;
    char err[256];
    /* groups[0] is the world; with --tp, then D TP groups of P ranks and P DP groups of D ranks */
    const int n_groups = P > 1 ? 1 + D + P : 1;
    f8_comm_group **g = (f8_comm_group **)calloc((size_t)n_groups, sizeof *g);
    int made = 0;
    for (; g && made < n_groups; made++)
        if (f8_comm_group_create(made == 0 ? n : made <= D ? P : D, &g[made], err, sizeof err) != F8_OK) break;
    if (!g || made < n_groups) {
        fprintf(stderr, "f8_train: %s\n", g ? err : "out of memory");
        for (int k = 0; g && k < made; k++) f8_comm_group_destroy(g[k]);
        free(g);
        return 1;
    }
    cpu_rank *ranks = (cpu_rank *)calloc((size_t)n, sizeof *ranks);
    pthread_t *th = (pthread_t *)calloc((size_t)n, sizeof *th);
    int started = 0, rc = 0;
    for (int r = 0; ranks && th && r < n; r++, started++) {
        ranks[r].o = train_rank_options(o, r, n);
        if (strcmp(ranks[r].o.backend, "auto") == 0) ranks[r].o.backend = "cpu";
        ranks[r].o.comm_group = g[0];
        if (P > 1) ranks[r].o.tp_group = g[1 + r / P], ranks[r].o.dp_group = g[1 + D + r % P];
        ranks[r].groups = g;
        ranks[r].n_groups = n_groups;
        if (pthread_create(&th[r], NULL, cpu_rank_main, &ranks[r]) != 0) {
            fprintf(stderr, "f8_train: cannot start rank %d's thread\n", r);
            abort_all(g, n_groups);
            rc = 1;
            break;
        }
    }
    if (!ranks || !th) rc = 1;
    for (int r = 0; r < started; r++) pthread_join(th[r], NULL);
    for (int r = 1; r < started && !rc; r++)
        if (ranks[r].rc == 1) rc = 1;
    if (!rc && started) rc = ranks[0].rc;
    free(ranks);
    free(th);
    for (int k = 0; k < n_groups; k++) f8_comm_group_destroy(g[k]);
    free(g);
    return rc;
}

/* ---- GPU processes --------------------------------------------------------------- */

static int write_all(int fd, const void *p, size_t n)
{
    for (size_t k = 0; k < n;) {
        ssize_t w = write(fd, (const char *)p + k, n - k);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        k += (size_t)w;
    }
    return 0;
}

static int read_all(int fd, void *p, size_t n)
{
    for (size_t k = 0; k < n;) {
        ssize_t r = read(fd, (char *)p + k, n - k);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        k += (size_t)r;
    }
    return 0;
}

/* Child r: get the ids (rank 0 makes them and sends them on), then run.
 * ids[0] joins the world; with --tp (untested on GPUs so far) ids[1 + d]
 * the TP group of replica d and ids[1 + D + t] the DP group of TP index t. */
static int gpu_child(const train_options *o, int r, int n, int (*fds)[2])
{
    const int P = o->tp > 1 ? (int)o->tp : 1, D = n / P, n_ids = P > 1 ? 1 + D + P : 1;
    f8_comm_id ids[1 + 2 * 1024];
    char err[256];
    signal(SIGPIPE, SIG_IGN); /* a rank that died before reading: write fails, rank 0 says so */
    train_options x = train_rank_options(o, r, n);
    x.device = r;
    if (strcmp(x.backend, "auto") == 0) x.backend = "cuda";
    /* keep only the ends this rank uses: a reader then sees end-of-file, not
     * a hang, when rank 0 dies before it writes */
    for (int k = 0; k < n; k++) {
        if (r != 0 || k == 0) close(fds[k][1]);
        if (k != r || r == 0) close(fds[k][0]);
    }
    if (r == 0) {
        int ok = 1;
        for (int k = 0; k < n_ids && ok; k++) ok = f8_comm_id_create(&ids[k], err, sizeof err) == F8_OK;
        if (!ok) fprintf(stderr, "f8_train: rank 0: %s\n", err);
        for (int k = 1; k < n; k++) {
            if (ok && write_all(fds[k][1], ids, sizeof ids[0] * (size_t)n_ids) != 0) ok = 0;
            close(fds[k][1]);
        }
        if (!ok) return 1;
    } else {
        const int got = read_all(fds[r][0], ids, sizeof ids[0] * (size_t)n_ids);
        close(fds[r][0]);
        if (got != 0) {
            fprintf(stderr, "f8_train: rank %d: rank 0 sent no NCCL id (it failed first)\n", r);
            return 1;
        }
    }
    x.comm_id = &ids[0];
    if (P > 1) x.tp_id = &ids[1 + r / P], x.dp_id = &ids[1 + D + r % P];
    return run_rank(&x);
}

static int launch_gpus(const train_options *o)
{
    const int n = (int)o->gpus;
    int (*fds)[2] = (int (*)[2])calloc((size_t)n, sizeof *fds);
    pid_t *pids = (pid_t *)calloc((size_t)n, sizeof *pids);
    if (!fds || !pids) return free(fds), free(pids), 1;
    for (int k = 0; k < n; k++)
        if (pipe(fds[k]) != 0) return fprintf(stderr, "f8_train: pipe: %s\n", strerror(errno)), 1;
    fflush(stdout);
    fflush(stderr);
    int started = 0;
    for (int r = 0; r < n; r++, started++) {
        pids[r] = fork();
        if (pids[r] == 0) _exit(gpu_child(o, r, n, fds));
        if (pids[r] < 0) {
            fprintf(stderr, "f8_train: fork of rank %d: %s\n", r, strerror(errno));
            break;
        }
    }
    for (int k = 0; k < n; k++) close(fds[k][0]), close(fds[k][1]);
    int rc = started == n ? -1 : 1, left = started;
    if (rc == 1)
        for (int r = 0; r < started; r++) kill(pids[r], SIGTERM);
    while (left > 0) {
        int status;
        pid_t p = wait(&status);
        if (p < 0 && errno == EINTR) continue;
        if (p < 0) break;
        int r = 0;
        while (r < started && pids[r] != p) r++;
        if (r == started) continue;
        left--;
        pids[r] = 0;
        const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
        if (r == 0 && rc == -1) rc = code;
        if (code == 1 || !WIFEXITED(status)) { /* a failed or killed rank: stop the rest now */
            if (WIFSIGNALED(status))
                fprintf(stderr, "f8_train: rank %d was killed by signal %d: stopping the other ranks\n", r,
                        WTERMSIG(status));
            else
                fprintf(stderr, "f8_train: rank %d failed: stopping the other ranks\n", r);
            for (int k = 0; k < started; k++)
                if (pids[k] > 0) kill(pids[k], SIGTERM);
            rc = 1;
        }
    }
    free(fds);
    free(pids);
    return rc < 0 ? 1 : rc;
}

/* ---- one rank of a multi-node job (environment variables) ----------------------- */

/* Rank 0 serves the id to world - 1 connections on port; the others fetch it
 * from addr:port, retrying for up to a minute while rank 0 starts. */
int train_tcp_share_id(int rank, int world, const char *addr, const char *port, f8_comm_id *id)
{
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = rank == 0 ? AI_PASSIVE : 0;
    if (getaddrinfo(rank == 0 ? NULL : addr, port, &hints, &ai) != 0 || !ai) {
        fprintf(stderr, "f8_train: rank %d: cannot resolve %s:%s\n", rank, rank ? addr : "*", port);
        return -1;
    }
    int ok = -1;
    if (rank == 0) {
        int s = socket(ai->ai_family, ai->ai_socktype, 0), one = 1;
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (s >= 0 && bind(s, ai->ai_addr, ai->ai_addrlen) == 0 && listen(s, world) == 0) {
            ok = 0;
            for (int k = 1; k < world && ok == 0; k++) {
                int c = accept(s, NULL, NULL);
                ok = c >= 0 && write_all(c, id, sizeof *id) == 0 ? 0 : -1;
                if (c >= 0) close(c);
            }
        }
        if (ok != 0) fprintf(stderr, "f8_train: rank 0: serving the NCCL id on port %s: %s\n", port, strerror(errno));
        if (s >= 0) close(s);
    } else {
        for (int tries = 0; tries < 600 && ok != 0; tries++) {
            int s = socket(ai->ai_family, ai->ai_socktype, 0);
            if (s >= 0 && connect(s, ai->ai_addr, ai->ai_addrlen) == 0) ok = read_all(s, id, sizeof *id);
            if (s >= 0) close(s);
            if (ok != 0) {
                struct timespec ts = {0, 100000000};
                nanosleep(&ts, NULL);
            }
        }
        if (ok != 0) fprintf(stderr, "f8_train: rank %d: no NCCL id from %s:%s within a minute\n", rank, addr, port);
    }
    freeaddrinfo(ai);
    return ok;
}

/* The first of these variables that is set: torchrun's, Open MPI's, MPICH/Intel MPI's. */
static const char *env_any(const char *a, const char *b, const char *c)
{
    const char *v = getenv(a);
    if (!v) v = getenv(b);
    if (!v) v = getenv(c);
    return v;
}

static int launch_env(const train_options *o, int rank, int world)
{
    const char *local = env_any("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID");
    const char *addr = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
    int64_t dev = 0;
    char err[256];
    if (local && parse_int("LOCAL_RANK (environment)", local, 0, 1023, &dev, err, sizeof err) != 0) {
        fprintf(stderr, "f8_train: %s\n", err);
        return 1;
    }
    if (world > 1 && (!addr || !port)) { /* one rank has nobody to share the id with */
        fprintf(stderr, "f8_train: RANK and WORLD_SIZE are set but MASTER_ADDR or MASTER_PORT is not\n");
        return 1;
    }
    f8_comm_id id;
    if (rank == 0 && f8_comm_id_create(&id, err, sizeof err) != F8_OK) {
        fprintf(stderr, "f8_train: rank 0: %s\n", err);
        return 1;
    }
    if (world > 1 && train_tcp_share_id(rank, world, addr, port, &id) != 0) return 1;
    train_options x = train_rank_options(o, rank, world);
    x.device = (int)dev;
    if (strcmp(x.backend, "auto") == 0) x.backend = "cuda";
    x.comm_id = &id;
    return run_rank(&x);
}

int train_launch_from_env(void) { return env_any("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE") != NULL; }

int train_launch(const train_options *o)
{
    char err[256];
    if (train_check_tp(o, err, sizeof err) != 0) {
        fprintf(stderr, "f8_train: %s\n", err);
        return 1;
    }
    if (o->ranks > 0) return launch_cpu(o);
    if (o->gpus > 0) return launch_gpus(o);
    const char *r = env_any("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"),
               *w = env_any("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE");
    int64_t rank = -1, world = 0;
    /* strictly: "abc" is not rank 0 */
    if ((r && parse_int("RANK (environment)", r, 0, 1 << 20, &rank, err, sizeof err) != 0) ||
        (w && parse_int("WORLD_SIZE (environment)", w, 1, 1 << 20, &world, err, sizeof err) != 0)) {
        fprintf(stderr, "f8_train: %s\n", err);
        return 1;
    }
    if (r && w && o->tp > 1) {
        fprintf(stderr, "f8_train: --tp with RANK/WORLD_SIZE (one process per GPU, started outside) is not supported "
                        "yet: use --gpus N --tp K on one machine\n");
        return 1;
    }
    if (r && w && rank < world) return launch_env(o, (int)rank, (int)world);
    if (r || w) {
        fprintf(stderr, "f8_train: rank %s of world size %s (from the environment): need 0 <= rank < size\n",
                r ? r : "(unset)",
                w ? w : "(unset)");
        return 1;
    }
    return run_rank(o);
}
