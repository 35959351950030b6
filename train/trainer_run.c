/*
 * trainer_run.c — the whole run as f8_train's command line asks for it
 * (trainer_run; trainer.h): the opening summary, the steps with their
 * progress lines, CSV log and FP8 telemetry, periodic and final checkpoints,
 * the plot, a sample, and the exit code that says whether the loss fell.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fp8_report.h"
#include "plot.h"
#include "trainer.h"

/* ---- the run -------------------------------------------------------------------- */

static void fmt_time(char *b, size_t n, double s)
{
    if (s < 60) snprintf(b, n, "%.1fs", s);
    else if (s < 3600) snprintf(b, n, "%dm%02ds", (int)s / 60, (int)s % 60);
    else snprintf(b, n, "%dh%02dm", (int)s / 3600, ((int)s % 3600) / 60);
}

/* base without its extension (".csv", ".svg") + suffix; "" when base is empty. */
static void sibling_path(char *out, size_t n, const char *base, const char *suffix)
{
    out[0] = '\0';
    if (!base || !base[0]) return;
    size_t len = strlen(base);
    const char *dot = strrchr(base, '.'), *slash = strrchr(base, '/');
    if (dot && (!slash || dot > slash)) len = (size_t)(dot - base);
    snprintf(out, n, "%.*s%s", (int)len, base, suffix);
}

double train_gpu_peak_flops(const char *name)
{
    if (!name || strstr(name, "NVL")) return 0.0;
    if (strstr(name, "H200")) return 989.4e12;
    if (strstr(name, "H100") && strstr(name, "PCIe")) return 756.0e12;
    if (strstr(name, "H100") && (strstr(name, "HBM3") || strstr(name, "SXM"))) return 989.4e12;
    return 0.0;
}

int trainer_run(trainer *t)
{
    const train_options *o = &t->o;
    const int cuda = f8_ctx_backend(t->ctx) == F8_BACKEND_CUDA;
    char device[128] = "";
    if (cuda) (void)f8_ctx_device_name(t->ctx, device, sizeof device); /* once, before any step */
    const double peak = train_gpu_peak_flops(device); /* 0 on the CPU or an unknown GPU: no MFU */
    const double fpt = gpt_flops_per_token(&t->m);
    const int64_t tokens_per_step = t->M * t->T;
    char line[256], err[256];
    if (!o->quiet) {
        const f8_recipe_kind kind = f8_ctx_recipe(t->ctx)->kind;
        printf("f8_train: %s backend, %s%s%s, %s, graph %s\n", cuda ? "CUDA" : "CPU", o->fp8 ? "FP8" : "no FP8",
               o->fp8 && kind != F8_RECIPE_DELAYED ? " " : "",
               o->fp8 && kind != F8_RECIPE_DELAYED ? (kind == F8_RECIPE_CURRENT ? "current scaling"
                                                      : kind == F8_RECIPE_BLOCK   ? "block scaling"
                                                      : kind == F8_RECIPE_ROWWISE ? "row-wise scaling"
                                                                                  : "row-wise scaling, wgrad in high precision")
                                                   : "",
               f8_dtype_name(t->m.c.dtype), t->use_graph ? "on" : "off");
        if (t->m.c.fp8_attention) /* the option's cost, before anyone waits on it */
            printf("FP8 attention: forward in FP8%s\n",
                   cuda ? " on cuDNN's FP8 flash attention where cuDNN >= 9.19 is loaded (else f8's own FP8 kernel, about "
                          "35x slower than BF16 attention); backward BF16"
                        : "");
        if (cuda && peak <= 0) printf("MFU: unknown GPU (%s): no peak to measure against\n", device[0] ? device : "?");
        printf("model: %lld layers, %lld heads, %lld channels, seq %lld, vocab %lld: %.2fM parameters\n",
               (long long)t->m.c.layers, (long long)t->m.c.heads, (long long)t->m.c.channels, (long long)t->m.c.seq,
               (long long)t->m.c.vocab, (double)gpt_param_count(&t->m) / 1e6);
        if (t->m.c.llama) /* the family's own shape (llama.h) */
            printf("Llama: %lld key/value heads, SwiGLU %lld, RoPE theta %g%s, %s LM head\n", (long long)t->m.c.kv_heads,
                   (long long)t->m.c.ffn, t->m.c.rope_theta > 0 ? t->m.c.rope_theta : 500000.0,
                   t->m.c.rope_factor > 0 ? " (llama3 scaling)" : "", t->m.c.untied ? "untied" : "tied");
        printf("data: %s\n", data_describe(t->data));
        double h;
        if (data_unigram_entropy(t->data, DATA_SPLIT_TRAIN, 1 << 22, &h) == F8_OK)
            printf("unigram entropy of the training data: %.3f nats/token\n", h);
        printf("batch: %lld microbatches x %lld sequences x %lld tokens = %lld tokens/step\n", (long long)t->M,
               (long long)t->m.c.batch, (long long)t->m.c.seq, (long long)tokens_per_step);
        if (t->comm)
            printf("data parallel: %d ranks (%s), %lld microbatches each, ZeRO-1 sharded AdamW\n",
                   t->o.world / t->m.tp_size, cuda ? "NCCL" : "CPU threads", (long long)t->Ml);
        if (t->m.tp)
            printf("tensor parallel: %d ranks per replica, %lld heads and %lld MLP columns each%s\n", t->m.tp_size,
                   (long long)(t->m.c.heads / t->m.tp_size), (long long)t->m.Fl,
                   t->m.sp ? "; sequence parallel: the residual stream split by tokens" : "");
        char plan[512];
        mem_plan_format(&t->plan, plan, sizeof plan);
        printf("memory plan: %s\n", plan);
        printf("startup: device %.1f s, data %.1f s, model %.1f s, optimizer and state %.1f s\n", t->t_ctx, t->t_data,
               t->t_model, t->t_opt);
        fflush(stdout);
    }
    tlog *log = NULL;
    if (o->log && o->log[0] && tlog_create(o->log, t->step > 0, &log, err, sizeof err) != F8_OK) {
        fprintf(stderr, "f8_train: %s\n", err);
        return 1;
    }
    fp8_report *rep = NULL;
    char path[512];
    if (o->fp8_report && f8_ctx_telemetry_enabled(t->ctx)) {
        sibling_path(path, sizeof path, o->log, "_fp8.csv");
        if (fp8_report_create(t->ctx, &t->m, path, t->step > 0, &rep, err, sizeof err) != F8_OK) {
            fprintf(stderr, "f8_train: %s\n", err);
            tlog_destroy(log);
            return 1;
        }
    }
    double first = 0, last = 0, start = tlog_now_s(), t0 = start;
    int64_t n_first = 0, n_last = 0, first_step = t->step;
    const int64_t window = (o->steps - first_step) / 10 > 0 ? (o->steps - first_step) / 10 : 1;
    int rc = 0;
    while (t->step < o->steps) {
        double loss;
        double ts = tlog_now_s();
        f8_status st = trainer_step(t, &loss);
        if (st != F8_OK) {
            fprintf(stderr, "f8_train: step %lld failed: %s: %s\n", (long long)t->step, f8_status_string(st),
                    trainer_error(t));
            rc = 1;
            break;
        }
        double dt = tlog_now_s() - ts;
        if (t->step - first_step <= window) first += loss, n_first++;
        if (t->step > o->steps - window) last += loss, n_last++;
        tlog_row r = tlog_row_empty();
        r.step = t->step;
        r.tokens = t->step * tokens_per_step;
        r.train_loss = loss;
        r.ms_per_step = dt * 1e3;
        r.tokens_per_s = (double)tokens_per_step / dt;
        if (peak > 0) r.mfu = fpt * r.tokens_per_s / peak;
        r.peak_mem_mib = (double)trainer_peak_memory(t) / 1048576.0;
        int64_t done;
        float lr, gn;
        if (f8_adamw_read(t->opt, &done, &lr, &gn) == F8_OK) {
            r.lr = lr;
            r.grad_norm = gn;
        }
        if (o->val_every > 0 && (t->step % o->val_every == 0 || t->step == o->steps)) {
            double vl;
            if (trainer_eval(t, &vl) == F8_OK) r.val_loss = vl;
        }
        if (log) tlog_write(log, &r);
        if (rep && (st = fp8_report_step(rep, t->step)) != F8_OK)
            fprintf(stderr, "f8_train: FP8 telemetry: %s\n", f8_ctx_last_error(t->ctx));
        if (!o->quiet && (t->step % 10 == 0 || t->step == o->steps || t->step == first_step + 1 || !isnan(r.val_loss))) {
            double el = tlog_now_s() - t0, eta = el / (double)(t->step - first_step) * (double)(o->steps - t->step);
            tlog_progress(line, sizeof line, &r, o->steps, eta);
            printf("%s\n", line);
            fflush(stdout);
        }
        if (o->checkpoint && o->checkpoint[0] && o->checkpoint_every > 0 && t->step % o->checkpoint_every == 0 &&
            trainer_save(t, o->checkpoint) != F8_OK)
            fprintf(stderr, "f8_train: checkpoint '%s': %s\n", o->checkpoint, f8_ctx_last_error(t->ctx));
    }
    tlog_destroy(log);
    if (rep) {
        if (!rc) fp8_report_print(rep, stdout, 8);
        char csv[512];
        sibling_path(csv, sizeof csv, o->log, "_fp8.csv");
        sibling_path(path, sizeof path, o->plot, "_fp8.svg");
        if (!rc && path[0] && fp8_report_plot(rep, path, err, sizeof err) != F8_OK)
            fprintf(stderr, "f8_train: FP8 telemetry plot: %s\n", err);
        else if (!rc && !o->quiet && (csv[0] || path[0]))
            printf("FP8 telemetry: %s%s%s\n", csv, csv[0] && path[0] ? ", " : "", path);
        fp8_report_destroy(rep);
    }
    if (rc) return rc;
    char el[48];
    fmt_time(el, 32, tlog_now_s() - start);
    /* the run's memory joins its time in the final line: "done in 1m02s, peak memory 2.41 GiB" */
    const double peak_mib = (double)trainer_peak_memory(t) / 1048576.0;
    snprintf(el + strlen(el), sizeof el - strlen(el), ", peak memory %.*f %s", peak_mib < 1024 ? 1 : 2,
             peak_mib < 1024 ? peak_mib : peak_mib / 1024, peak_mib < 1024 ? "MiB" : "GiB");
    if (o->checkpoint && o->checkpoint[0]) {
        if (trainer_save(t, o->checkpoint) != F8_OK) {
            fprintf(stderr, "f8_train: checkpoint '%s': %s\n", o->checkpoint, f8_ctx_last_error(t->ctx));
            return 1;
        }
        if (!o->quiet) printf("checkpoint: %s (step %lld)\n", o->checkpoint, (long long)t->step);
    }
    /* rank 0 reports the run; with TP every rank samples (the forward's collectives), rank 0 prints */
    if (t->o.rank > 0 && !t->m.tp) return 0;
    const int say = t->o.rank == 0;
    if (say && o->plot && o->plot[0] && o->log && o->log[0]) {
        const char *paths[5], *names[5];
        paths[0] = o->log;
        names[0] = o->fp8 ? "FP8" : "BF16";
        for (int i = 0; i < o->n_compare; i++) paths[i + 1] = names[i + 1] = o->compare[i];
        plot_config pc = plot_config_default();
        if (plot_logs_svg(o->plot, &pc, paths, names, 1 + o->n_compare, err, sizeof err) != F8_OK)
            fprintf(stderr, "f8_train: plot: %s\n", err);
        else if (!o->quiet) printf("plot: %s\n", o->plot);
    }
    if (o->sample > 0 && t->m.c.vocab > 256 && o->tokenizer && o->tokenizer[0]) {
        char *text = NULL;
        if (trainer_sample_text(t, o->tokenizer, o->sample, o->temperature, o->seed, &text) == F8_OK) {
            if (say) {
                printf("sample:\n");
                tlog_print_text(stdout, text);
                printf("\n");
            }
        } else {
            fprintf(stderr, "f8_train: sample: %s\n", trainer_error(t));
        }
        free(text);
    } else if (o->sample > 0 && t->m.c.vocab <= 256) {
        char *text = (char *)malloc((size_t)o->sample + 1);
        if (text && trainer_sample(t, o->prompt, o->sample, o->temperature, o->seed, text) == F8_OK && say) {
            printf("sample:\n");
            tlog_print_text(stdout, o->prompt ? o->prompt : "");
            tlog_print_text(stdout, text);
            printf("\n");
        }
        free(text);
    }
    if (!say) return 0;
    if (o->steps - first_step < 2) {
        /* one step has nothing to compare its loss with: not a success */
        printf("done in %s: trained %lld step%s: too few to tell whether the loss fell (2 are needed; exit status 3)\n",
               el, (long long)(o->steps - first_step), o->steps - first_step == 1 ? "" : "s");
        return 3;
    }
    if (n_first && n_last) {
        first /= (double)n_first;
        last /= (double)n_last;
        printf("done in %s: mean loss %.4f over the first %lld steps, %.4f over the last %lld: %s\n", el, first,
               (long long)n_first, last, (long long)n_last, last < first ? "loss fell: OK" : "loss did NOT fall");
        if (!(last < first)) return 2;
    }
    return 0;
}
