/*
 * main.c — f8_train, f8's main program: FP8 training of a GPT (trainer.h),
 * `f8_train plot OUT.svg LOG...` to overlay loss curves, and
 * `f8_train export CHECKPOINT OUT.onnx` (export.h), `f8_train export-hf` and
 * `f8_train eval-hf` (hf.h: GPT-2 checkpoints of transformers). Exit status:
 * 0 the loss fell, 1 any error (bad option or input: nothing trained), 2 the
 * loss did not fall, 3 fewer than 2 steps trained (too few to tell).
 */
#include <stdio.h>
#include <string.h>

#include "export.h"
#include "hf_cmd.h"
#include "plot.h"
#include "trainer.h"

static int plot_main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: f8_train plot OUT.svg LOG.csv [LOG.csv ...]\n");
        return 1;
    }
    char err[256], names[16][64];
    const char *name_ptrs[16];
    const int n = argc - 3 < 16 ? argc - 3 : 16;
    /* a run is named by its log's file name without directory and ".csv" */
    for (int i = 0; i < n; i++) {
        const char *base = strrchr(argv[3 + i], '/');
        snprintf(names[i], sizeof names[i], "%s", base ? base + 1 : argv[3 + i]);
        char *dot = strstr(names[i], ".csv");
        if (dot && dot[4] == '\0') *dot = '\0';
        name_ptrs[i] = names[i];
    }
    plot_config pc = plot_config_default();
    const char *const *logs = (const char *const *)(argv + 3);
    if (plot_logs_svg(argv[2], &pc, logs, name_ptrs, n, err, sizeof err) != F8_OK) {
        fprintf(stderr, "f8_train plot: %s\n", err);
        return 1;
    }
    printf("plot: %s\n", argv[2]);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "plot") == 0) return plot_main(argc, argv);
    if (argc > 1 && strcmp(argv[1], "export") == 0) return export_main(argc, argv);
    if (argc > 1 && strcmp(argv[1], "export-hf") == 0) return export_hf_main(argc, argv);
    if (argc > 1 && strcmp(argv[1], "eval-hf") == 0) return eval_hf_main(argc, argv);
    train_options o = train_options_default();
    char err[1024] = ""; /* a memory plan refusal names the plan and its fixes */
    int r = train_parse_args(argc, argv, &o, stdout, err, sizeof err);
    if (r > 0) return 0;
    if (r < 0) {
        fprintf(stderr, "f8_train: %s\n", err);
        return 1;
    }
    /* data parallel: --ranks, --gpus, or RANK/WORLD_SIZE from a launcher */
    if (o.ranks > 0 || o.gpus > 0 || train_launch_from_env()) return train_launch(&o);
    trainer *t = NULL;
    f8_status st = trainer_create(&o, &t, err, sizeof err);
    if (st != F8_OK) {
        fprintf(stderr, "f8_train: %s: %s\n", f8_status_string(st), err);
        return 1;
    }
    int rc = trainer_run(t);
    trainer_destroy(t);
    return rc;
}
