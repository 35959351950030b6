#!/usr/bin/env python3
"""Llama checkpoints between transformers and f8_train, checked against transformers itself.

    python3 tools/check_llama_hf.py [--backend auto|cpu|cuda] [--shapes small,1B] [--train-steps 10] [--quick]

From the repository root after `make` (needs torch, transformers, numpy). For each shape:
  small  a random LlamaForCausalLM of 2 layers, 256 wide, 8 heads / 2 KV heads, FFN 512, vocab 1000,
         untied head, theta 10000, no scaling; also saved in BF16;
  1B     the llama-1B preset's shape (16 layers, 2048 wide, 32/8 heads, FFN 8192, vocab 128256, tied,
         theta 500000 with the llama3 scaling, factor 32), saved in shards of 2 GB with their index.
Every parameter is perturbed (norms not 1, larger embeddings) so the loss is far from log(vocab).
  1. transformers' loss (FP32, TF32 off) on random tokens;
  2. `f8_train eval-hf DIR --tokens FILE` (FP8 off, FP32): equal within --tol relative;
  3. `f8_train --init-from DIR --steps 2 --lr 0 --fp8 off --dtype fp32 --checkpoint CK`, then
     `f8_train export-hf CK OUT`: every tensor of OUT equal to the original's, bit for bit, and the same loss;
  4. (small; --train-steps > 0) `f8_train --init-from DIR --steps N` in FP8 (the trainer's defaults),
     exported: f8's eval-hf loss of the export equals transformers' within --tol.
Prints each figure and exits non-zero on any mismatch.
"""
import argparse
import inspect
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import transformers

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
SHAPES = {
    # layers, hidden, heads, kv heads, ffn, vocab, tied, theta, llama3 factor (0: none)
    "small": (2, 256, 8, 2, 512, 1000, False, 10000.0, 0.0),
    "1B": (16, 2048, 32, 8, 8192, 128256, True, 500000.0, 32.0),
}


def make_config(layers, hidden, heads, kv, ffn, vocab, tied, theta, factor, positions):
    kw = dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=layers,
              num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=positions,
              rms_norm_eps=1e-5, hidden_act="silu", tie_word_embeddings=tied, attention_bias=False,
              mlp_bias=False, attention_dropout=0.0)
    scaling = None
    if factor:
        scaling = {"rope_type": "llama3", "factor": factor, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192}
    if "rope_parameters" in inspect.signature(transformers.LlamaConfig.__init__).parameters:  # transformers 5
        kw["rope_parameters"] = dict(scaling or {"rope_type": "default"}, rope_theta=theta)
    else:
        kw["rope_theta"], kw["rope_scaling"] = theta, scaling
    return transformers.LlamaConfig(**kw)


def hf_loss(model_dir, tokens, device):
    model = transformers.LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).to(device).eval()
    ids = torch.tensor(tokens, dtype=torch.long, device=device)[None, :]
    with torch.no_grad():
        loss = float(model(ids, labels=ids).loss)
    del model
    return loss


def state(model_dir):
    model = transformers.LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def run(cmd, ok_codes=(0,)):
    t0 = time.time()
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode not in ok_codes:
        sys.exit("%s failed:\n%s%s" % (" ".join(cmd), out.stdout[-3000:], out.stderr[-3000:]))
    print("    (%s: %.1f s)" % (" ".join(cmd[:2]), time.time() - t0))
    return out.stdout


def f8_loss(f8_train, model_dir, tokens_file, backend):
    out = run([f8_train, "eval-hf", model_dir, "--tokens", tokens_file, "--backend", backend])
    print("   ", out.strip().splitlines()[0])
    return float(re.search(r"^loss (\S+)$", out, re.M).group(1))


def check_shape(a, name, tmp, device):
    layers, hidden, heads, kv, ffn, vocab, tied, theta, factor = SHAPES[name]
    torch.manual_seed(0)
    cfg = make_config(layers, hidden, heads, kv, ffn, vocab, tied, theta, factor, a.positions)
    model = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # norms not 1, embeddings large enough that the logits are far from uniform
        for pname, p in model.named_parameters():
            if "norm" in pname:
                p.add_(torch.randn_like(p) * 0.1)
            elif "embed" in pname or "lm_head" in pname:
                p.normal_(0.0, 0.5 if hidden < 1024 else 0.1)
            else:
                p.add_(torch.randn_like(p) * 0.02)
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, vocab, size=a.positions).tolist()
    fails = 0
    hf_dir, tok_file = os.path.join(tmp, name), os.path.join(tmp, name + "_tokens.txt")
    model.save_pretrained(hf_dir, max_shard_size="2GB")
    if name == "small":
        model.to(torch.bfloat16).save_pretrained(hf_dir + "_bf16")
    del model
    with open(tok_file, "w") as f:
        f.write(" ".join(map(str, tokens)) + "\n")
    print("%s: transformers %s Llama (%d layers, %d wide, %d/%d heads, FFN %d, vocab %d, %s, theta %g%s), "
          "%d tokens, files %s" % (name, transformers.__version__, layers, hidden, heads, kv, ffn, vocab,
                                   "tied" if tied else "untied", theta, ", llama3 x%g" % factor if factor else "",
                                   len(tokens), sorted(os.listdir(hf_dir))))
    ref = hf_loss(hf_dir, tokens, device)
    if abs(ref - np.log(vocab)) < 0.5:
        sys.exit("the random model's loss %.4f is too close to log(vocab) %.4f" % (ref, np.log(vocab)))
    dirs = [(hf_dir, ref, "FP32")]
    if name == "small":
        dirs.append((hf_dir + "_bf16", hf_loss(hf_dir + "_bf16", tokens, device), "BF16 file"))
    for d, r, what in dirs:
        got = f8_loss(a.f8_train, d, tok_file, a.backend)
        rel = abs(got - r) / abs(r)
        ok = rel <= a.tol
        fails += not ok
        print("  2. import (%s): transformers %.9g, f8 %.9g, relative %.2e (tolerance %.0e): %s" % (
            what, r, got, rel, a.tol, "OK" if ok else "FAILED"))
    if name != "small" and a.quick:  # the 1B round trip writes a 15 GB checkpoint: --quick leaves it out
        return fails

    ck, out_dir = os.path.join(tmp, name + "_ck.safetensors"), os.path.join(tmp, name + "_export")
    common = ["--init-from", hf_dir, "--seq", str(a.positions), "--batch", "1", "--grad-accum", "1",
              "--backend", a.backend, "--log", "", "--plot", "", "--sample", "0", "--quiet", "--val-every", "0"]
    run([a.f8_train, "--steps", "2", "--lr", "0", "--lr-min", "0", "--weight-decay", "0", "--checkpoint", ck,
         "--fp8", "off", "--dtype", "fp32"] + common, ok_codes=(0, 2))
    run([a.f8_train, "export-hf", ck, out_dir])
    os.remove(ck)
    want, have = state(hf_dir), state(out_dir)
    same = want.keys() == have.keys() and all(torch.equal(want[k], have[k]) for k in want)
    back = hf_loss(out_dir, tokens, device)
    ok = same and back == ref
    fails += not ok
    print("  3. round trip: %d tensors %s; transformers loss of the export %.9g vs %.9g: %s" % (
        len(have), "bit for bit" if same else "DIFFER", back, ref, "OK" if ok else "FAILED"))
    del want, have

    if name == "small" and a.train_steps > 0:
        ck2, out2 = os.path.join(tmp, "trained.safetensors"), os.path.join(tmp, "trained")
        run([a.f8_train, "--steps", str(a.train_steps), "--checkpoint", ck2, "--lr", "1e-3"] + common)
        run([a.f8_train, "export-hf", ck2, out2])
        ref2 = hf_loss(out2, tokens, device)
        got2 = f8_loss(a.f8_train, out2, tok_file, a.backend)
        rel2 = abs(got2 - ref2) / abs(ref2)
        ok = rel2 <= a.tol and ref2 != ref
        fails += not ok
        print("  4. fine-tuned %d steps by f8_train (FP8, its defaults), exported: transformers %.9g, f8 %.9g, "
              "relative %.2e: %s" % (a.train_steps, ref2, got2, rel2, "OK" if ok else "FAILED"))
    return fails


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--f8-train", default=os.path.join(ROOT, "build", "f8_train"))
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--shapes", default="small,1B")
    ap.add_argument("--positions", type=int, default=64)
    ap.add_argument("--train-steps", type=int, default=10)
    ap.add_argument("--tol", type=float, default=1e-4, help="relative loss tolerance (FP32 both sides)")
    ap.add_argument("--quick", action="store_true", help="the 1B shape's import only (no round trip)")
    ap.add_argument("--tmp", default=None, help="where the checkpoints go (the 1B shape needs ~25 GB)")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = "cuda" if torch.cuda.is_available() else "cpu"
    fails = 0
    with tempfile.TemporaryDirectory(dir=a.tmp) as tmp:
        for name in a.shapes.split(","):
            fails += check_shape(a, name, tmp, device)
    print("check_llama_hf: %s" % ("all OK" if not fails else "%d FAILED" % fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
