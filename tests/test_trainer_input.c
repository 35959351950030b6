/*
 * test_trainer_input.c — f8_train on bad input (issue 13, defects 6 to 9):
 * every case must be refused before training with a message naming what was
 * wrong, never resolved silently.
 *   - checkpoint metadata: non-numbers ("abc", "1e23"), shapes past the
 *     command line's limits, train.fp8 / train.dtype that are not 0/1 and
 *     fp32/bf16 or do not match the tensors, a memory bound before allocation;
 *   - checkpoint contents: a flipped bit (checksum), NaN parameters, zero
 *     scales, negative amaxes and second moments (rewritten with fresh
 *     checksums, so only the value checks can catch them);
 *   - --checkpoint to a path that cannot be written: refused at startup;
 *   - conflicting options: --resume with other shape flags, --text with
 *     --data, empty paths, --val-data alone, --steps 0, a run of one step
 *     (exit status 3), --graph on with the CPU backend (accepted either way).
 * The train/ files are compiled in; files go to a fresh directory in /tmp.
 */
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "io/checkpoint.h"
#include "f8train.h"

static char dir[64], good[128], bad[128];
static f8_ctx *g_ctx;

/* f8_train's argv: a short CPU run, quiet, no files, then `extra`; the
 * tiny model's shape flags unless extra resumes (then the shape is the
 * checkpoint's, and a shape flag is what a case adds). */
static int parse(train_options *o, const char *const *extra, char *err, size_t n)
{
    const char *base[] = {"f8_train", "--backend", "cpu", "--batch", "4", "--grad-accum", "1", "--steps", "4",
                          "--warmup", "1", "--val-every", "0", "--log", "", "--plot", "", "--sample", "0", "--quiet"};
    const char *shape[] = {"--layers", "2", "--heads", "2", "--channels", "32", "--seq", "16"};
    char *argv[64];
    int argc = 0, resuming = 0;
    for (int i = 0; extra && extra[i]; i++) resuming |= !strcmp(extra[i], "--resume");
    for (size_t i = 0; i < sizeof base / sizeof base[0]; i++) argv[argc++] = (char *)base[i];
    for (size_t i = 0; !resuming && i < sizeof shape / sizeof shape[0]; i++) argv[argc++] = (char *)shape[i];
    for (int i = 0; extra && extra[i]; i++) argv[argc++] = (char *)extra[i];
    *o = train_options_default();
    err[0] = 0;
    return train_parse_args(argc, argv, o, stdout, err, n);
}

/* Parse, then create: F8_OK or the status, with the message in err. */
static f8_status make_trainer(const char *const *extra, trainer **t, char *err, size_t n)
{
    train_options o;
    *t = NULL;
    if (parse(&o, extra, err, n) != 0) return F8_ERR_INVALID_ARGUMENT;
    return trainer_create(&o, t, err, n);
}

/* --resume bad must be refused, the message containing want and want2. */
static void expect_refused(const char *what, const char *want, const char *want2)
{
    const char *extra[] = {"--resume", bad, NULL};
    trainer *t = NULL;
    char err[512];
    f8_status st = make_trainer(extra, &t, err, sizeof err);
    CHECK(st != F8_OK && t == NULL, "%s: resumed (step %lld) instead of refusing", what,
          t ? (long long)trainer_steps_done(t) : -1LL);
    CHECK(strstr(err, want) && (!want2 || strstr(err, want2)), "%s: message '%s' lacks '%s'/'%s'", what, err, want,
          want2 ? want2 : "");
    printf("  %-34s -> %s\n", what, err);
    trainer_destroy(t);
}

/* Copy good to bad with one metadata key set (fresh checksums). */
static void with_meta(const char *key, const char *value)
{
    f8_checkpoint *ck = NULL;
    CHECK_OK(g_ctx, f8_checkpoint_load(g_ctx, good, &ck));
    if (!ck) die("load", g_ctx);
    CHECK_OK(g_ctx, f8_checkpoint_set_metadata(ck, key, value));
    CHECK_OK(g_ctx, f8_checkpoint_save(ck, bad));
    f8_checkpoint_destroy(ck);
}

/* Copy good to bad with element i of tensor `name` (F32) set to v; the
 * save writes fresh checksums, so the file is intact but the value bad. */
static void with_value(const char *name, size_t i, float v)
{
    f8_checkpoint *ck = NULL;
    CHECK_OK(g_ctx, f8_checkpoint_load(g_ctx, good, &ck));
    if (!ck) die("load", g_ctx);
    const f8i_ck_entry *e = f8i_checkpoint_find(ck, name);
    CHECK(e && e->dtype == F8I_CK_F32 && e->bytes >= 4 * (i + 1), "no F32 tensor %s", name);
    if (e && e->bytes >= 4 * (i + 1)) memcpy((unsigned char *)e->data + 4 * i, &v, 4);
    CHECK_OK(g_ctx, f8_checkpoint_save(ck, bad));
    f8_checkpoint_destroy(ck);
}

static void test_metadata(void)
{
    struct {
        const char *key, *value, *want;
    } cases[] = {
        {"train.step", "abc", "is not an integer"},     /* atoll: silently step 0 */
        {"train.step", "1e23", "is not an integer"},    /* atoll: step 1, trains nothing */
        {"train.step", "-5", "outside"},
        {"train.step", " 2", "is not an integer"},
        {"train.layers", "1000000", "outside [1, 1024]"}, /* allocated until killed */
        {"train.seq", "1e9", "is not an integer"},
        {"train.seq", "1000000000", "outside [2, 65536]"},
        {"train.channels", "0x20", "is not an integer"},
        {"train.heads", "3", "not a multiple"},
        {"train.fp8", "7", "outside [0, 1]"},
        {"train.fp8", "0", "FP8 scaling state"}, /* the tensors say FP8: no silent resume without it */
        {"train.dtype", "fp16", "expected fp32 or bf16"},
        {"train.vocab", "300", "padded_vocab"},
        {"train.padded_vocab", "384", "padded_vocab"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char what[96];
        snprintf(what, sizeof what, "%s = '%s'", cases[i].key, cases[i].value);
        with_meta(cases[i].key, cases[i].value);
        expect_refused(what, cases[i].key, cases[i].want);
    }
    /* a shape inside every limit but far past any memory: refused before allocation */
    f8_checkpoint *ck = NULL;
    CHECK_OK(g_ctx, f8_checkpoint_load(g_ctx, good, &ck));
    if (!ck) die("load", g_ctx);
    CHECK_OK(g_ctx, f8_checkpoint_set_metadata(ck, "train.layers", "1024"));
    CHECK_OK(g_ctx, f8_checkpoint_set_metadata(ck, "train.channels", "65536"));
    CHECK_OK(g_ctx, f8_checkpoint_save(ck, bad));
    f8_checkpoint_destroy(ck);
    expect_refused("1024 layers of 65536 channels", "needs at least", "GiB");
    /* a checkpoint at or past --steps has nothing left to train */
    with_meta("train.step", "4");
    expect_refused("train.step = --steps", "nothing left to train", "raise --steps");
    /* train.step must agree with the optimizer's own step */
    with_meta("train.step", "1");
    expect_refused("train.step != optimizer.step", "optimizer has done 2 steps", NULL);
}

static void test_contents(void)
{
    /* one flipped bit in the data: the checksum names the tensor */
    size_t n = 0;
    FILE *f = fopen(good, "rb");
    unsigned char *b = (unsigned char *)xmalloc(1 << 22);
    if (f) n = fread(b, 1, 1 << 22, f), fclose(f);
    CHECK(n > 1000 && n < (1 << 22), "checkpoint of %zu bytes", n);
    b[n - 100] ^= 0x10;
    f = fopen(bad, "wb");
    if (f) fwrite(b, 1, n, f), fclose(f);
    free(b);
    expect_refused("one flipped bit", "checksum mismatch", "tensor \"");
    /* bad values with intact checksums */
    with_value("model.wpe", 5, NAN);
    expect_refused("NaN in model.wpe", "\"model.wpe\": element 5 is nan", NULL);
    with_value("model.h.1.mlp.fc1_weight", 0, INFINITY);
    expect_refused("inf in a weight", "model.h.1.mlp.fc1_weight", "inf");
    with_value("model.h.0.qkv.fp8.fwd.scale", 1, 0.0f);
    expect_refused("zero scale", "model.h.0.qkv.fp8.fwd.scale", "> 0");
    with_value("model.h.0.proj.fp8.bwd.scale_inv", 0, -1.0f);
    expect_refused("negative scale_inv", "model.h.0.proj.fp8.bwd.scale_inv", "> 0");
    with_value("model.h.0.mlp.fp8.fwd.amax_history", 2, -0.5f);
    expect_refused("negative amax", "amax_history", ">= 0");
    with_value("optimizer.v.3", 0, -1e-8f);
    expect_refused("negative second moment", "optimizer.v.3", ">= 0");
    with_value("optimizer.m.0", 7, NAN);
    expect_refused("NaN first moment", "optimizer.m.0", "nan");
}

static void test_checkpoint_path(void)
{
    char err[512], path[160];
    trainer *t = NULL;
    const char *nodir[] = {"--checkpoint", "/nonexistent-f8-dir/run.safetensors", NULL};
    CHECK(make_trainer(nodir, &t, err, sizeof err) != F8_OK && !t && strstr(err, "--checkpoint") &&
              strstr(err, "No such file"),
          "unwritable --checkpoint accepted at startup: '%s'", err);
    printf("  %-34s -> %s\n", "--checkpoint in a missing directory", err);
    trainer_destroy(t);
    const char *isdir[] = {"--checkpoint", dir, NULL};
    CHECK(make_trainer(isdir, &t, err, sizeof err) != F8_OK && !t && strstr(err, "is a directory"),
          "--checkpoint DIR accepted: '%s'", err);
    trainer_destroy(t);
    snprintf(path, sizeof path, "%s/under-a-file/x.safetensors", good); /* a regular file as a directory */
    const char *underfile[] = {"--checkpoint", path, NULL};
    CHECK(make_trainer(underfile, &t, err, sizeof err) != F8_OK && !t && strstr(err, "--checkpoint"),
          "--checkpoint under a file accepted: '%s'", err);
    trainer_destroy(t);
    /* a writable one: created, no temporary left behind by the check */
    snprintf(path, sizeof path, "%s/ok.safetensors", dir);
    const char *ok[] = {"--checkpoint", path, NULL};
    CHECK(make_trainer(ok, &t, err, sizeof err) == F8_OK && t, "writable --checkpoint refused: %s", err);
    char tmp[200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    CHECK(access(tmp, F_OK) != 0, "the startup check left %s", tmp);
    trainer_destroy(t);
}

static void test_conflicts(void)
{
    char err[512];
    train_options o;
    struct {
        const char *args[5], *want;
    } cases[] = {
        {{"--text", "a.txt", "--data", "b.bin", NULL}, "--text and --data"},
        {{"--data", "", NULL}, "--data \"\""},
        {{"--text", "", NULL}, "--text \"\""},
        {{"--val-data", "v.bin", NULL}, "--val-data needs --data"},
        {{"--steps", "0", NULL}, "--steps = '0' is outside"},
        {{"--steps", "12abc", NULL}, "not an integer"},
        {{"--lr", "inf", NULL}, "--lr"},
        {{"--lr", "0x1p-3", NULL}, "--lr"},
        {{"--seed", " 7", NULL}, "--seed"},
        {{"--resume", "", NULL}, "--resume \"\""},
        {{"--fp8", "maybe", NULL}, "expected off or on"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int r = parse(&o, cases[i].args, err, sizeof err);
        CHECK(r == -1 && strstr(err, cases[i].want), "%s %s: %d '%s' (wanted '%s')", cases[i].args[0],
              cases[i].args[1], r, err, cases[i].want);
        printf("  %-34s -> %s\n", cases[i].args[0], err);
    }
    /* --graph on is accepted with the CPU backend, explicit or automatic */
    const char *g1[] = {"--graph", "on", NULL};
    CHECK(parse(&o, g1, err, sizeof err) == 0 && o.graph == 1, "--graph on --backend cpu: %s", err);
    trainer *t = NULL;
    CHECK(trainer_create(&o, &t, err, sizeof err) == F8_OK && t && t->use_graph == 1, "graphed CPU run: %s", err);
    double loss = NAN;
    if (t) CHECK_OK(NULL, trainer_step(t, &loss));
    CHECK(isfinite(loss), "graphed CPU step: loss %g", loss);
    trainer_destroy(t);
    /* --resume with the shape flags: equal values pass, others name both */
    struct {
        const char *args[5], *want, *want2;
    } resume[] = {
        {{"--resume", good, "--layers", "3"}, "--layers 3", "train.layers = 2"},
        {{"--resume", good, "--model", "small"}, "(from --model)", "train.layers = 2"},
        {{"--resume", good, "--fp8", "off"}, "--fp8 off", "train.fp8 = 1"},
        {{"--resume", good, "--dtype", "bf16"}, "--dtype bf16", "train.dtype = fp32"},
        {{"--resume", good, "--seq", "32"}, "--seq 32", "train.seq = 16"},
    };
    for (size_t i = 0; i < sizeof resume / sizeof resume[0]; i++) {
        CHECK(make_trainer(resume[i].args, &t, err, sizeof err) != F8_OK && !t && strstr(err, resume[i].want) &&
                  strstr(err, resume[i].want2),
              "%s %s: '%s'", resume[i].args[2], resume[i].args[3], err);
        printf("  %-34s -> %s\n", resume[i].args[2], err);
        trainer_destroy(t);
    }
    const char *same[] = {"--resume", good, "--layers", "2", "--fp8", "on", "--dtype", "fp32", NULL};
    CHECK(make_trainer(same, &t, err, sizeof err) == F8_OK && t && trainer_steps_done(t) == 2, "matching flags: %s", err);
    trainer_destroy(t);
}

static void test_short_runs(void)
{
    char err[512];
    train_options o;
    trainer *t = NULL;
    /* one step: trained, but too few to tell whether the loss fell: exit 3 */
    const char *one[] = {"--steps", "1", NULL};
    CHECK(parse(&o, one, err, sizeof err) == 0, "--steps 1: %s", err);
    CHECK(trainer_create(&o, &t, err, sizeof err) == F8_OK, "--steps 1: %s", err);
    if (t) {
        int rc = trainer_run(t);
        CHECK(rc == 3 && trainer_steps_done(t) == 1, "--steps 1: exit %d after %lld steps", rc,
              (long long)trainer_steps_done(t));
    }
    trainer_destroy(t);
    /* resumed with one step left: the same */
    const char *last[] = {"--resume", good, "--steps", "3", NULL};
    CHECK(make_trainer(last, &t, err, sizeof err) == F8_OK && t, "resume, 1 step left: %s", err);
    if (t) CHECK(trainer_run(t) == 3, "resume with 1 step left: not exit 3");
    trainer_destroy(t);
}

/* The option table against --help and the parser: every option (and alias)
 * is described in --help as "  --name" or " --name", and parses a value of
 * its kind into its own field (or is refused by a cross-option check, never
 * as unknown or valueless); a value outside an integer option's range is
 * refused naming the option. */
static void test_option_table(void)
{
    char *help = NULL;
    size_t help_len = 0;
    FILE *hf = open_memstream(&help, &help_len);
    if (!hf) die("open_memstream", NULL);
    train_print_help(hf);
    fclose(hf);
    int count = 0;
    const train_option_def *t = train_option_table(&count);
    CHECK(count >= 45, "the option table has %d options", count);
    int described = 0;
    for (int i = 0; i < count; i++) {
        const train_option_def *d = &t[i];
        for (int a = 0; a < 2; a++) {
            const char *name = a ? d->alias : d->name;
            if (!name) continue;
            char pat[64];
            snprintf(pat, sizeof pat, " %s ", name);
            int found = strstr(help, pat) != NULL;
            snprintf(pat, sizeof pat, " %s\n", name);
            found |= strstr(help, pat) != NULL;
            /* -h is the short spelling of --help; --sp of --sequence-parallel: documented with the long name */
            if (!found && a) found = 1;
            CHECK(found, "--help does not describe %s", name);
            described += found;
            /* parse it */
            char value[64] = "x";
            if (d->kind == OPT_INT || d->kind == OPT_SEED) snprintf(value, sizeof value, "%lld", (long long)d->hi);
            if (d->kind == OPT_REAL) snprintf(value, sizeof value, "%g", d->hi);
            if (d->kind == OPT_ON_OFF || d->kind == OPT_GRAPH || d->kind == OPT_BLOCKS || d->kind == OPT_WORD)
                snprintf(value, sizeof value, "%s", d->words[d->n_words - 1]);
            if (d->kind == OPT_MODEL) snprintf(value, sizeof value, "tiny");
            char *argv[4] = {(char *)"f8_train", (char *)name, value, NULL};
            const int argc = d->kind == OPT_FLAG || d->kind == OPT_HELP ? 2 : 3;
            train_options o = train_options_default();
            char err[512] = "";
            FILE *devnull = fopen("/dev/null", "w");
            const int rc = train_parse_args(argc, argv, &o, devnull, err, sizeof err);
            fclose(devnull);
            CHECK(rc == (d->kind == OPT_HELP) ||
                      (rc == -1 && !strstr(err, "unknown option") && !strstr(err, "needs a value")),
                  "%s %s: %d, %s", name, value, rc, err);
            const char *field = (const char *)&o + d->offset;
            if (rc == 0 && d->kind == OPT_INT)
                CHECK(*(const int64_t *)(const void *)field == (int64_t)d->hi, "%s %s not stored", name, value);
            if (rc == 0 && d->kind == OPT_REAL)
                CHECK(*(const float *)(const void *)field == (float)d->hi, "%s %s not stored", name, value);
            if (rc == 0 && (d->kind == OPT_FLAG || d->kind == OPT_ON_OFF))
                CHECK(*(const int *)(const void *)field == 1, "%s not stored", name);
            if (rc == 0 && d->kind == OPT_BLOCKS) /* on: every block */
                CHECK(*(const int *)(const void *)field == TRAIN_RECOMPUTE_ALL, "%s not stored", name);
            if (rc == 0 && (d->kind == OPT_STRING || d->kind == OPT_WORD))
                CHECK(!strcmp(*(const char *const *)(const void *)field, value), "%s %s not stored", name, value);
            if (d->kind == OPT_INT || d->kind == OPT_BLOCKS) { /* one past the range is refused, naming the option */
                snprintf(value, sizeof value, "%lld", (long long)d->hi + 1);
                o = train_options_default();
                CHECK(train_parse_args(3, argv, &o, stdout, err, sizeof err) == -1 && strstr(err, name),
                      "%s %s accepted", name, value);
            }
        }
    }
    printf("  option table: %d options, %d names described in --help\n", count, described);
    free(help);
}

/* MFU's denominator by device name, and the device-name call on a CPU ctx. */
static void test_device_peak(void)
{
    CHECK(train_gpu_peak_flops("NVIDIA H100 80GB HBM3") == 989.4e12, "H100 SXM");
    CHECK(train_gpu_peak_flops("NVIDIA H100 SXM5 80GB") == 989.4e12, "H100 SXM by name");
    CHECK(train_gpu_peak_flops("NVIDIA H100 PCIe") == 756.0e12, "H100 PCIe");
    CHECK(train_gpu_peak_flops("NVIDIA H200") == 989.4e12, "H200");
    const char *unknown[] = {"NVIDIA H100 NVL", "NVIDIA A100-SXM4-80GB", "NVIDIA H200 NVL", "CPU", "", NULL};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++)
        CHECK(train_gpu_peak_flops(unknown[i]) == 0.0, "%s must have no peak", unknown[i] ? unknown[i] : "NULL");
    char name[32] = "x";
    CHECK(f8_ctx_device_name(g_ctx, name, sizeof name) == F8_OK && !strcmp(name, "CPU"), "CPU ctx: '%s'", name);
    char tiny[2];
    CHECK(f8_ctx_device_name(g_ctx, tiny, sizeof tiny) == F8_OK && !strcmp(tiny, "C"), "cut to fit");
    CHECK(f8_ctx_device_name(NULL, name, sizeof name) == F8_ERR_INVALID_ARGUMENT &&
              f8_ctx_device_name(g_ctx, NULL, 8) == F8_ERR_INVALID_ARGUMENT &&
              f8_ctx_device_name(g_ctx, name, 0) == F8_ERR_INVALID_ARGUMENT, "bad arguments refused");
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/f8_test_trainer_input_%d", (int)getpid());
    if (mkdir(dir, 0700) != 0) die("mkdir", NULL);
    snprintf(good, sizeof good, "%s/good.safetensors", dir);
    snprintf(bad, sizeof bad, "%s/bad.safetensors", dir);
    f8_ctx_config cfg = f8_ctx_config_default();
    if (f8_ctx_create(&cfg, &g_ctx, NULL, 0) != F8_OK) die("ctx", NULL);
    /* the good checkpoint: 2 of 4 steps of an FP8 run */
    trainer *t = NULL;
    char err[512];
    if (make_trainer(NULL, &t, err, sizeof err) != F8_OK) die(err, NULL);
    double loss;
    for (int s = 0; s < 2; s++)
        if (trainer_step(t, &loss) != F8_OK) die("step", NULL);
    if (trainer_save(t, good) != F8_OK) die("save", NULL);
    trainer_destroy(t);

    test_metadata();
    test_contents();
    test_checkpoint_path();
    test_conflicts();
    test_short_runs();
    test_option_table();
    test_device_peak();

    f8_ctx_destroy(g_ctx);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return test_finish("test_trainer_input");
}
