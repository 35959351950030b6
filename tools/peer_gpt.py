#!/usr/bin/env python3
"""The peer of f8_train: the same GPT in PyTorch, timed the way tools/bench_gpt.sh times f8.

Usage: tools/peer_gpt.py [--model 124M,1.3B] [--modes bf16,fp8] [--warmup 3] [--steps 10] ...
       tools/peer_gpt.py --device cpu --tiny          (a smoke run, no GPU needed)
       tools/peer_gpt.py --help

Two configurations per model, at f8_train's preset shapes (batch x microbatches x seq):
  bf16  BF16 weights and activations (as f8_train --fp8 off on the GPU), torch.compile
  fp8   the same plus torchao's FP8 training (convert_to_float8_training, dynamic tensorwise
        scaling; the tied LM head stays BF16, as f8's does), torch.compile
Attention is F.scaled_dot_product_attention(is_causal=True); the optimizer is fused AdamW.

The model is f8's (train/gpt.h, train/gpt.c), checked here by its parameter count:
  x = wte[tokens] + wpe[pos]            wte [Vp, C], Vp = vocab rounded up to 128; wpe [S, C]
  per block: x += proj(attn(qkv(LN(x)))); x += fc2(gelu_tanh(fc1(LN(x))))    all Linear with bias
  logits = LN(x) @ wte^T (tied head, no bias); loss = cross-entropy over the real vocab (not Vp)
  LayerNorm eps 1e-5; init N(0, 0.02), proj and fc2 scaled by 1/sqrt(2L), wpe N(0, 0.01), biases 0
  AdamW beta (0.9, 0.95), eps 1e-8, weight decay 0.1 on wte, wpe and the Linear weights (not on
  biases and norms), global grad-norm clipping at 1.0, warmup + cosine learning rate
  parameters = L*(12C^2 + 13C) + Vp*C + S*C + 2C   (124M: 124,475,904; 1.3B: 1,313,722,368)
--bf16 autocast (FP32 parameters, gradients and moments; BF16 compute) is the configuration issue 16's
PyTorch figures were taken in (1.3B: 35.9 / 29.2 GiB measured against its 36.7 / 29.9); f8's state
(BF16 weights, FP32 moments) sits between that and the default --bf16 weights.
What differs, by design of each library: f8 keeps FP32 AdamW moments (torch: BF16, the params'
dtype), casts FP8 weights once per step (torchao: every microbatch), scales by delayed amax
history (torchao: the current amax), and replays the whole step as one CUDA graph.

Output: per configuration one machine-readable line on stdout,
  PEER_RESULT {"model": "124M", "mode": "bf16", "status": "ok", "tokens_per_s": ..., ...}
then a table. status is "ok", "skipped: <why>" (torchao missing, no FP8 on the device) or
"failed: <why>" (an OOM, a compile error, a timeout); the script exits 0 unless its own arguments
are wrong. Each configuration runs in a child process (--isolate, the default), so an OOM or a crash
in one leaves the others running and each peak memory is its own.
tokens/s = tokens per step / mean step time over the timed steps (warmup steps, which include
torch.compile's compilation, are left out); peak memory = torch.cuda.max_memory_allocated().

torchao on the GPU machine (torch 2.11.0+cu130, Python 3.12, no network there): carry it as a
wheel. torchao 0.17.0 is the release built against torch 2.11 (its __init__ wants torch >= 2.11.0
for its C++ extensions; the float8 training path is pure Python over torch._scaled_mm, and this
script sets TORCHAO_FORCE_SKIP_LOADING_SO_FILES=1 so no compiled extension is loaded). The wheel
has no required dependencies. In the repository root, on a machine with PyPI (.whl/ is in .gitignore, so
nothing of it is tracked; the device call carries it when named in carry):
  python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \\
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \\
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \\
      --platform manylinux1_x86_64 -d .whl torchao==0.17.0
  # -> .whl/torchao-0.17.0-cp310-abi3-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl (3.4 MB)
and on the GPU machine (the device call carries .whl), before this script:
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \\
      --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
tools/bench_peers.sh does the install step itself when .whl/ holds a torchao wheel.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

# name: layers, heads, channels, seq, batch (per microbatch), microbatches, lr (train/options.c)
PRESETS = {
    "tiny": (4, 4, 128, 64, 4, 2, 3e-3),
    "small": (6, 6, 384, 256, 16, 1, 1e-3),
    "50M": (10, 10, 640, 512, 16, 1, 6e-4),
    "124M": (12, 12, 768, 1024, 64, 1, 6e-4),
    "350M": (24, 16, 1024, 1024, 8, 1, 3e-4),
    "1.3B": (24, 16, 2048, 1024, 8, 8, 2e-4),
}
GPT2_VOCAB = 50257  # llm.c shards (tools/llmc_shard.py); byte data has 256
MODES = ("bf16", "fp8", "fp8_rowwise")  # fp8: torchao's tensorwise recipe; fp8_rowwise: its rowwise one
# What tools/peer_llama.py replaces to time its Llama through this driver: the script its children run,
# the default --model, and the model functions below (PRESETS, shape_of, param_count_of, build_model).
SCRIPT = os.path.abspath(__file__)
DEFAULT_MODEL = "124M,1.3B"


def padded(vocab):
    return (vocab + 127) // 128 * 128


def f8_param_count(layers, channels, seq, vocab):
    """gpt_param_count of train/gpt.c: wte counted once (it is the head's weight)."""
    C = channels
    return layers * (12 * C * C + 13 * C) + padded(vocab) * C + seq * C + 2 * C


def param_count_of(s):
    return f8_param_count(s["layers"], s["channels"], s["seq"], s["vocab"])


def flops_per_token(params, layers, channels, seq):
    """gpt_flops_per_token of train/gpt.c (6 per parameter + attention's 12*L*C*S)."""
    return 6.0 * params + 12.0 * layers * channels * seq


def shape_of(args, name):
    L, H, C, S, B, M, lr = PRESETS[name]
    if args.tiny:  # smoke shapes: the preset's structure, a few seconds on a CPU
        L, H, C, S, B, M = 2, 2, 64, 32, 2, 2
    over = lambda v, d: d if v is None else v
    return dict(layers=over(args.layers, L), heads=over(args.heads, H), channels=over(args.channels, C),
                seq=over(args.seq, S), batch=over(args.batch, B), accum=over(args.grad_accum, M), lr=lr,
                vocab=args.vocab)


def emit(result):
    print("PEER_RESULT " + json.dumps(result, sort_keys=True), flush=True)


# ---- one configuration, in this process ---------------------------------------------------------


def run_one(args, name, mode):
    s = shape_of(args, name)
    res = dict(impl="torch", model=name, mode=mode, status="ok", device=args.device, compile=args.compile,
               layers=s["layers"], heads=s["heads"], channels=s["channels"], seq=s["seq"], batch=s["batch"],
               accum=s["accum"], vocab=s["vocab"], tokens_per_step=s["batch"] * s["seq"] * s["accum"],
               warmup=args.warmup, steps=args.steps)
    try:
        import torch
    except ImportError as e:
        return dict(res, status="skipped: PyTorch not importable (%s)" % e)
    res["torch"] = torch.__version__
    if args.device == "cuda" and not torch.cuda.is_available():
        return dict(res, status="skipped: no CUDA device visible to PyTorch")
    if mode.startswith("fp8"):
        os.environ.setdefault("TORCHAO_FORCE_SKIP_LOADING_SO_FILES", "1")  # float8 training needs none
        try:
            import torchao
            from torchao.float8 import Float8LinearConfig, convert_to_float8_training  # noqa: F401
            res["torchao"] = getattr(torchao, "__version__", "?")
        except Exception as e:  # ImportError, or a torchao that does not fit this torch
            return dict(res, status="skipped: torchao not importable (%s: %s); carry the wheel, see "
                        "tools/peer_gpt.py --help" % (type(e).__name__, str(e).splitlines()[0] if str(e) else ""))
        if args.device == "cuda" and torch.cuda.get_device_capability() < (8, 9):
            return dict(res, status="skipped: FP8 needs compute capability 8.9+ (this is %d.%d)"
                        % torch.cuda.get_device_capability())
    try:
        return measure(args, torch, s, mode, res)
    except torch.cuda.OutOfMemoryError as e:
        res = dict(res, status="failed: out of memory (%s)" % str(e).splitlines()[0][:160])
    except Exception as e:  # a compile error, an unsupported shape...
        msg = str(e).strip().splitlines()
        res = dict(res, status="failed: %s: %s" % (type(e).__name__, (msg[0] if msg else "")[:200]))
    if args.device == "cuda":
        res["peak_mem_bytes"] = torch.cuda.max_memory_allocated()
    return res


def build_model(torch, s, dtype, device):
    import torch.nn as nn
    import torch.nn.functional as F

    L, H, C, S, V = s["layers"], s["heads"], s["channels"], s["seq"], s["vocab"]
    Vp = padded(V)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(C, eps=1e-5)
            self.qkv = nn.Linear(C, 3 * C)  # per row [q | k | v], head h in columns h*C/H.. of each
            self.proj = nn.Linear(C, C)
            self.ln2 = nn.LayerNorm(C, eps=1e-5)
            self.fc1 = nn.Linear(C, 4 * C)
            self.fc2 = nn.Linear(4 * C, C)

        def forward(self, x):
            B, T, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(B, T, C))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(Vp, C)  # also the LM head's weight (tied)
            self.wpe = nn.Embedding(S, C)
            self.blocks = nn.ModuleList(Block() for _ in range(L))
            self.ln_f = nn.LayerNorm(C, eps=1e-5)

        def head_loss(self, x, targets):
            logits = F.linear(self.ln_f(x), self.wte.weight)  # [B, T, Vp], no bias
            # over the real vocabulary only: the padding columns get no probability (f8_cross_entropy)
            return F.cross_entropy(logits[..., :V].float().flatten(0, 1), targets.flatten())

        def forward(self, tokens, targets):
            pos = torch.arange(tokens.shape[1], device=tokens.device)
            x = self.wte(tokens) + self.wpe(pos)
            for b in self.blocks:
                x = b(x)
            return self.head_loss(x, targets)

    with torch.device(device):
        m = GPT()
    with torch.no_grad():  # f8's init (train/gpt.c, src/modules/weight.c)
        for name, p in m.named_parameters():
            if name.endswith("bias"):
                p.zero_()
            elif ".ln" in name or name.startswith("ln_f"):
                p.fill_(1.0)
            elif name == "wpe.weight":
                p.normal_(0.0, 0.01)
            else:
                p.normal_(0.0, 0.02)
                if name.endswith("proj.weight") or name.endswith("fc2.weight"):
                    p.mul_(1.0 / math.sqrt(2.0 * L))
    return m.to(dtype)


def measure(args, torch, s, mode, res):
    dev = torch.device(args.device)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
        torch.backends.cuda.matmul.allow_tf32 = True
        res["device_name"] = torch.cuda.get_device_name()
    dtype = torch.bfloat16 if args.bf16 == "weights" else torch.float32
    model = build_model(torch, s, dtype, dev)
    n = sum(p.numel() for p in model.parameters())  # parameters() counts the tied weight once
    want = param_count_of(s)
    assert n == want, "parameter count %d is not f8's %d: the model differs from f8_train's" % (n, want)
    res["params"] = n
    if mode.startswith("fp8"):
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training

        cfg = Float8LinearConfig.from_recipe_name("rowwise" if mode == "fp8_rowwise" else "tensorwise")
        if dev.type != "cuda":  # no FP8 GEMM on the CPU: torchao's emulation, for smoke runs only
            cfg = Float8LinearConfig(emulate=True)
        # every Linear of the blocks; the head is F.linear on wte (tied), not a module: stays BF16
        convert_to_float8_training(model, config=cfg, module_filter_fn=lambda mod, fqn: fqn.startswith("blocks."))
        res["fp8_linears"] = sum(type(mm).__name__ == "Float8Linear" for mm in model.modules())
    if args.compile == "regional":  # each block and the head: one compilation, reused by every layer
        for b in model.blocks:
            b.compile(mode=args.compile_mode)
        model.head_loss = torch.compile(model.head_loss, mode=args.compile_mode)
        step_model = model
    elif args.compile == "full":
        step_model = torch.compile(model, mode=args.compile_mode)
    else:
        step_model = model

    decay = [p for nm, p in model.named_parameters() if nm.endswith("weight") and p.dim() == 2]
    no_decay = [p for nm, p in model.named_parameters() if not (nm.endswith("weight") and p.dim() == 2)]
    groups = [dict(params=decay, weight_decay=0.1), dict(params=no_decay, weight_decay=0.0)]
    fused = dev.type == "cuda"
    opt = torch.optim.AdamW(groups, lr=s["lr"], betas=(0.9, 0.95), eps=1e-8, fused=fused, foreach=not fused)
    params = decay + no_decay
    total = args.warmup + args.steps
    warm = max(1, min(20, total // 10))

    def lr_at(step):  # f8_adamw's schedule (warmup + cosine to lr/10)
        if step < warm:
            return s["lr"] * (step + 1) / warm
        p = min(1.0, (step - warm) / max(1, total - warm))
        return s["lr"] / 10 + (s["lr"] - s["lr"] / 10) * (1 + math.cos(math.pi * p)) / 2

    B, S, M, V = s["batch"], s["seq"], s["accum"], s["vocab"]
    gen = torch.Generator(device="cpu").manual_seed(1)
    if args.data:
        data = read_shard(torch, args.data)
        starts = torch.randint(0, data.numel() - S - 1, (M, B), generator=gen)
        win = torch.stack([torch.stack([data[i:i + S + 1] for i in row.tolist()]) for row in starts])
    else:
        win = torch.randint(0, V, (M, B, S + 1), generator=gen, dtype=torch.int32)
    win = win.long().to(dev)
    xs, ys = win[:, :, :-1].contiguous(), win[:, :, 1:].contiguous()
    autocast = torch.autocast(dev.type, dtype=torch.bfloat16, enabled=args.bf16 == "autocast")

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    times, losses, t_start = [], [], time.perf_counter()
    for step in range(total):
        sync()
        t0 = time.perf_counter()
        loss_sum = torch.zeros((), device=dev)
        for mb in range(M):
            with autocast:
                loss = step_model(xs[mb], ys[mb]) / M
            loss.backward()
            loss_sum += loss.detach()
        torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        opt.step()
        opt.zero_grad(set_to_none=True)
        lv = loss_sum.item()  # one read per step, as f8_train's loss download
        dt = time.perf_counter() - t0
        if step == args.warmup - 1 or (args.warmup == 0 and step == 0):
            res["warmup_s"] = round(time.perf_counter() - t_start, 2)  # compile included
        if step >= args.warmup:
            times.append(dt)
        losses.append(lv)
        if not math.isfinite(lv):
            raise RuntimeError("loss is %r at step %d" % (lv, step + 1))
        if args.verbose:
            print("  %s %s step %d: loss %.4f, %.1f ms" % (res["model"], mode, step + 1, lv, dt * 1e3),
                  file=sys.stderr, flush=True)
    ms = 1e3 * sum(times) / len(times)
    res.update(ms_per_step=round(ms, 3), tokens_per_s=round(res["tokens_per_step"] / (ms / 1e3), 1),
               first_loss=round(losses[0], 4), last_loss=round(losses[-1], 4))
    if dev.type == "cuda":
        res["peak_mem_bytes"] = torch.cuda.max_memory_allocated()
        res["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
        res["mfu"] = round(flops_per_token(n, s["layers"], s["channels"], s["seq"]) * res["tokens_per_s"]
                           / args.peak_flops, 4)
    return res


def read_shard(torch, path):
    """An llm.c shard (tools/llmc_shard.py): 256 int32 header, then uint16 tokens (GPT-2, magic 20240520
    version 1) or uint32 tokens (Llama 3, magic 20240801 version 7)."""
    with open(path, "rb") as f:
        head = f.read(1024)
        magic, version, count = (int.from_bytes(head[i:i + 4], "little") for i in (0, 4, 8))
        if (magic, version) not in ((20240520, 1), (20240801, 7)):
            raise ValueError("%s: not an llm.c shard (magic %d, version %d)" % (path, magic, version))
        buf = bytearray(f.read((4 if version == 7 else 2) * count))
    if version == 7:
        return torch.frombuffer(buf, dtype=torch.int32).clone()  # ids < 128256: no sign to lose
    return torch.frombuffer(buf, dtype=torch.int16).to(torch.int32) & 0xFFFF


# ---- the driver --------------------------------------------------------------------------------


def child_cmd(args, name, mode):
    argv = [sys.executable, SCRIPT, "--only", "%s:%s" % (name, mode), "--device", args.device,
            "--warmup", str(args.warmup), "--steps", str(args.steps), "--compile", args.compile,
            "--compile-mode", args.compile_mode, "--bf16", args.bf16, "--vocab", str(args.vocab),
            "--peak-flops", str(args.peak_flops)]
    for flag, v in (("--layers", args.layers), ("--heads", args.heads), ("--channels", args.channels),
                    ("--seq", args.seq), ("--batch", args.batch), ("--grad-accum", args.grad_accum),
                    ("--data", args.data)):
        if v is not None:
            argv += [flag, str(v)]
    return argv + (["--tiny"] if args.tiny else []) + (["--verbose"] if args.verbose else [])


def run_isolated(args, name, mode):
    base = dict(impl="torch", model=name, mode=mode)
    try:
        p = subprocess.run(child_cmd(args, name, mode), stdout=subprocess.PIPE, timeout=args.timeout,
                           universal_newlines=True)  # the child's stderr (compile logs) passes through
    except subprocess.TimeoutExpired:
        return dict(base, status="failed: timed out after %d s (--timeout)" % args.timeout)
    for line in p.stdout.splitlines():
        if line.startswith("PEER_RESULT "):
            return json.loads(line[len("PEER_RESULT "):])
    why = "killed by signal %d" % -p.returncode if p.returncode < 0 else "exit status %d" % p.returncode
    return dict(base, status="failed: the child process died (%s) without a result" % why)


def gib(b):
    return "%.2f" % (b / 2**30) if isinstance(b, (int, float)) else "-"


def print_table(results):
    print("\n%-6s %-5s %12s %10s %8s %12s %10s  %s" % ("model", "mode", "tokens/s", "ms/step", "MFU", "peak GiB",
                                                       "warmup s", "status"))
    for r in results:
        ok = r.get("status") == "ok"
        print("%-6s %-5s %12s %10s %8s %12s %10s  %s" % (
            r["model"], r["mode"], "%.0f" % r["tokens_per_s"] if ok else "-",
            "%.1f" % r["ms_per_step"] if ok else "-", "%.1f%%" % (100 * r["mfu"]) if ok and "mfu" in r else "-",
            gib(r.get("peak_mem_bytes")), r.get("warmup_s", "-"), r.get("status")))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=DEFAULT_MODEL, help="presets, comma-separated: %s (default %s)"
                    % (", ".join(PRESETS), DEFAULT_MODEL))
    ap.add_argument("--modes", default="bf16,fp8", help="bf16, fp8 (torchao tensorwise), fp8_rowwise, comma-separated "
                    "(default bf16,fp8)")
    ap.add_argument("--warmup", type=int, default=3, help="steps run first and not timed (default 3)")
    ap.add_argument("--steps", type=int, default=10, help="timed steps after the warmup (default 10)")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--tiny", action="store_true", help="tiny shapes (2 layers, width 64, seq 32): a smoke run")
    ap.add_argument("--compile", default="regional", choices=("regional", "full", "none"),
                    help="torch.compile each block and the head (regional: one compilation for all layers, the "
                    "quick cold start), the whole model (full), or nothing (default regional)")
    ap.add_argument("--compile-mode", default="default", help="torch.compile mode (default 'default')")
    ap.add_argument("--bf16", default="weights", choices=("weights", "autocast"),
                    help="weights: BF16 parameters, as f8 on the GPU; autocast: FP32 parameters under BF16 "
                    "autocast (default weights)")
    ap.add_argument("--vocab", type=int, default=GPT2_VOCAB, help="real vocabulary (default %d, GPT-2)" % GPT2_VOCAB)
    for flag in ("layers", "heads", "channels", "seq", "batch"):
        ap.add_argument("--" + flag, type=int, help="override the preset's " + flag)
    ap.add_argument("--grad-accum", type=int, help="override the preset's microbatches per step")
    ap.add_argument("--data", help="an llm.c shard to draw batches from (default: random tokens; the data does "
                    "not change the speed)")
    ap.add_argument("--no-isolate", dest="isolate", action="store_false",
                    help="run every configuration in this process (default: one child process each)")
    ap.add_argument("--timeout", type=int, default=420, help="seconds per configuration when isolated (default 420)")
    ap.add_argument("--peak-flops", type=float, default=989.4e12,
                    help="MFU denominator, as f8_train's (default 989.4e12, H200 dense BF16)")
    ap.add_argument("--json", help="also write the results to this file (a JSON list)")
    ap.add_argument("--verbose", action="store_true", help="every step's loss and time on stderr")
    ap.add_argument("--check-params", action="store_true",
                    help="build each --model on the meta device (no memory), check its parameter count against "
                    "f8's formula, print it and exit (1 on a mismatch)")
    ap.add_argument("--compare", metavar="JSONL",
                    help="print the side-by-side table of a file of result lines (f8's and the peers', one JSON "
                    "object a line, as tools/bench_peers.sh collects them) and exit")
    ap.add_argument("--only", help=argparse.SUPPRESS)  # MODEL:MODE, one configuration (the child)
    args = ap.parse_args()
    if args.warmup < 0 or args.steps < 1:
        ap.error("--warmup must be >= 0 and --steps >= 1")
    if args.check_params:
        return check_params(args)
    if args.compare:
        return compare(args.compare)
    if args.only:
        name, mode = args.only.split(":")
        emit(run_one(args, name, mode))
        return 0
    models = [m for m in args.model.split(",") if m]
    modes = [m for m in args.modes.split(",") if m]
    for m in models:
        if m not in PRESETS:
            ap.error("--model %s: unknown preset (%s)" % (m, ", ".join(PRESETS)))
    for m in modes:
        if m not in MODES:
            ap.error("--modes %s: expected bf16, fp8 or fp8_rowwise" % m)
    results = []
    for name in models:
        for mode in modes:
            r = run_isolated(args, name, mode) if args.isolate else run_one(args, name, mode)
            if not args.isolate:
                emit(r)
                cleanup()
            else:
                emit(r)  # the child's line, passed on
            results.append(r)
    print_table(results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


def check_params(args):
    import torch

    bad = 0
    for name in [m for m in args.model.split(",") if m]:
        s = shape_of(args, name)
        m = build_model(torch, s, torch.bfloat16, "meta")
        n = sum(p.numel() for p in m.parameters())
        want = param_count_of(s)
        bad += n != want
        print("%-6s vocab %d: %d parameters (%.2fM), f8's formula %d: %s" % (name, s["vocab"], n, n / 1e6, want,
                                                                            "same" if n == want else "DIFFERENT"))
    return 1 if bad else 0


LABELS = {("f8", "fp8"): "f8 FP8", ("f8", "bf16"): "f8 BF16", ("f8", "fp8_head"): "f8 FP8, FP8 head",
          ("f8", "fp8_recompute"): "f8 FP8, recompute",
          ("torch", "bf16"): "torch BF16+compile", ("torch", "fp8"): "torchao FP8+compile",
          ("torch", "fp8_rowwise"): "torchao FP8 rw+compile"}


def compare(path):
    """The table of tools/bench_peers.sh: every configuration, and f8's speed over each peer's."""
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("PEER_RESULT "):
                line = line[len("PEER_RESULT "):]
            if line.startswith("{"):
                rows.append(json.loads(line))
    models = []
    for r in rows:
        if r["model"] not in models:
            models.append(r["model"])
    speed = lambda impl, mode, m: next((r["tokens_per_s"] for r in rows if r["model"] == m and r["impl"] == impl
                                        and r["mode"] == mode and r.get("status") == "ok"), None)
    ratio = lambda a, b: "%.2fx" % (a / b) if a and b else "-"
    print("%-6s %-20s %12s %10s %7s %9s %10s %10s  %s" % ("model", "configuration", "tokens/s", "ms/step", "MFU",
                                                         "peak GiB", "f8FP8/this", "f8BF16/this", "status"))
    for m in models:
        f8_fp8, f8_bf16 = speed("f8", "fp8", m), speed("f8", "bf16", m)
        f8_tps = next((r.get("tokens_per_step") for r in rows if r["model"] == m and r["impl"] == "f8"
                       and r.get("tokens_per_step")), None)
        for r in [r for r in rows if r["model"] == m]:
            ok = r.get("status") == "ok"
            if ok and f8_tps and r.get("tokens_per_step") != f8_tps:  # not the same work: say so
                r["status"] = "ok, but %s tokens/step against f8's %d" % (r.get("tokens_per_step"), f8_tps)
            t = r.get("tokens_per_s") if ok else None
            print("%-6s %-20s %12s %10s %7s %9s %10s %10s  %s" % (
                m, LABELS.get((r["impl"], r["mode"]), r["impl"] + " " + r["mode"]), "%.0f" % t if t else "-",
                "%.1f" % r["ms_per_step"] if ok else "-",
                "%.1f%%" % (100 * r["mfu"]) if ok and r.get("mfu") is not None else "-",
                gib(r.get("peak_mem_bytes")), ratio(f8_fp8, t), ratio(f8_bf16, t), r.get("status")))
    print()
    for m in models:
        pairs = [("f8 FP8 / torchao FP8", speed("f8", "fp8", m), speed("torch", "fp8", m)),
                 ("f8 FP8 / torchao FP8 rowwise", speed("f8", "fp8", m), speed("torch", "fp8_rowwise", m)),
                 ("f8 BF16 / torch BF16", speed("f8", "bf16", m), speed("torch", "bf16", m)),
                 ("f8 FP8 / torch BF16", speed("f8", "fp8", m), speed("torch", "bf16", m)),
                 ("torchao FP8 / torch BF16", speed("torch", "fp8", m), speed("torch", "bf16", m))]
        if speed("f8", "fp8_head", m):
            pairs.append(("f8 FP8 + FP8 head / f8 FP8", speed("f8", "fp8_head", m), speed("f8", "fp8", m)))
        if speed("f8", "fp8_recompute", m):
            pairs.append(("f8 FP8 recompute / f8 FP8", speed("f8", "fp8_recompute", m), speed("f8", "fp8", m)))
        # bench_peers.sh's F8_CONFIGS: each over f8 FP8 (the preset), and row-wise over current scaling
        extra = [r["mode"] for r in rows if r["model"] == m and r["impl"] == "f8" and r["mode"] not in
                 ("fp8", "bf16", "fp8_head", "fp8_recompute") and r.get("status") == "ok"]
        for x in extra:
            pairs.append(("f8 %s / f8 FP8" % x[4:], speed("f8", x, m), speed("f8", "fp8", m)))
        if "fp8_rowwise" in extra:
            pairs.append(("f8 rowwise / torchao FP8 rowwise", speed("f8", "fp8_rowwise", m),
                          speed("torch", "fp8_rowwise", m)))
            if "fp8_current" in extra:
                pairs.append(("f8 rowwise / f8 current", speed("f8", "fp8_rowwise", m), speed("f8", "fp8_current", m)))
        print("%-6s " % m + "; ".join("%s %s" % (k, ratio(a, b)) for k, a, b in pairs))
        # peak memory, f8 over torch at the same precision (the bound: no higher than PyTorch's)
        mem = lambda impl, mode: next((r.get("peak_mem_bytes") for r in rows if r["model"] == m and r["impl"] == impl
                                       and r["mode"] == mode and r.get("status") == "ok"), None)
        mpairs = [("f8 BF16 / torch BF16", mem("f8", "bf16"), mem("torch", "bf16")),
                  ("f8 FP8 / torchao FP8", mem("f8", "fp8"), mem("torch", "fp8")),
                  ("f8 FP8 / torchao FP8 rowwise", mem("f8", "fp8"), mem("torch", "fp8_rowwise")),
                  ("f8 FP8 recompute / torchao FP8", mem("f8", "fp8_recompute"), mem("torch", "fp8"))]
        mpairs += [("f8 %s / torchao FP8" % x[4:], mem("f8", x), mem("torch", "fp8")) for x in extra]
        print("%-6s peak memory: " % m + "; ".join("%s %s" % (k, ratio(a, b)) for k, a, b in mpairs if a and b))
    return 0


def cleanup():
    """Between in-process configurations: drop compiled code and cached memory."""
    import gc

    gc.collect()
    try:
        import torch

        torch._dynamo.reset()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
    except Exception:
        pass


if __name__ == "__main__":
    sys.exit(main())
