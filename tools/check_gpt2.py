#!/usr/bin/env python3
"""GPT-2 checkpoints between transformers and f8_train, checked against transformers itself.

    python3 tools/check_gpt2.py [--backend auto|cpu|cuda] [--layers 2 --embd 128 --heads 4 --vocab 50257]

From the repository root after `make` (needs torch, transformers, numpy):
  1. a random transformers GPT2LMHeadModel (every parameter perturbed, so biases and LayerNorms are
     not trivial) is saved with save_pretrained;
  2. `f8_train eval-hf DIR --tokens FILE` (FP8 off, FP32) gives the loss on random tokens, which must
     equal transformers' loss within --tol (relative; FP32 on both sides, the differences are the
     order of sums in GEMMs, softmax and the tanh GELU: ~1e-6 relative on the CPU);
  3. `f8_train --init-from DIR --steps 2 --lr 0 --checkpoint CK` then `f8_train export-hf CK OUT`: the export
     loads in transformers (GPT2LMHeadModel.from_pretrained) and gives the same loss as the original,
     bit for bit (the weights go through FP32 unchanged);
  4. `f8_train --init-from DIR --steps N` trains (FP8 as the trainer defaults), exports, and f8's
     eval-hf loss of the export equals transformers' loss of it within --tol.
Prints each figure and exits non-zero on any mismatch.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import torch
import transformers

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def hf_loss(model_dir, tokens):
    model = transformers.GPT2LMHeadModel.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    ids = torch.tensor(tokens, dtype=torch.long)[None, :]
    with torch.no_grad():
        return float(model(ids, labels=ids).loss)


def f8_loss(f8_train, model_dir, tokens_file, backend):
    out = subprocess.run([f8_train, "eval-hf", model_dir, "--tokens", tokens_file, "--backend", backend],
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("f8_train eval-hf failed:\n%s%s" % (out.stdout, out.stderr))
    print("   ", out.stdout.strip().splitlines()[0])
    return float(re.search(r"^loss (\S+)$", out.stdout, re.M).group(1))


def run(cmd, ok_codes=(0,)):
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode not in ok_codes:
        sys.exit("%s failed:\n%s%s" % (" ".join(cmd), out.stdout[-3000:], out.stderr[-3000:]))
    return out.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--f8-train", default=os.path.join(ROOT, "build", "f8_train"))
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--embd", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--positions", type=int, default=64)
    ap.add_argument("--train-steps", type=int, default=10)
    ap.add_argument("--tol", type=float, default=1e-4, help="relative loss tolerance (FP32 both sides)")
    a = ap.parse_args()
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=a.layers, n_head=a.heads, n_embd=a.embd, n_positions=a.positions,
                                  vocab_size=a.vocab, activation_function="gelu_new", resid_pdrop=0.0,
                                  embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():  # non-trivial biases and norms; larger weights so the loss is far from log(V)
        for name, p in model.named_parameters():
            p.add_(torch.randn_like(p) * (0.1 if "ln" in name or "bias" in name else 0.2))
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, a.vocab, size=a.positions).tolist()
    fails = 0
    with tempfile.TemporaryDirectory() as tmp:
        hf_dir, tok_file = os.path.join(tmp, "hf"), os.path.join(tmp, "tokens.txt")
        model.save_pretrained(hf_dir)
        with open(tok_file, "w") as f:
            f.write(" ".join(map(str, tokens)) + "\n")
        print("1. transformers GPT-2 (%d layers, %d wide, %d heads, vocab %d), %d tokens" % (
            a.layers, a.embd, a.heads, a.vocab, len(tokens)))
        ref = hf_loss(hf_dir, tokens)
        if abs(ref - np.log(a.vocab)) < 0.5:  # a loss near uniform would not notice a wrong mapping
            sys.exit("the random model's loss %.4f is too close to log(vocab) %.4f" % (ref, np.log(a.vocab)))
        got = f8_loss(a.f8_train, hf_dir, tok_file, a.backend)
        rel = abs(got - ref) / abs(ref)
        ok = rel <= a.tol
        fails += not ok
        print("2. import: transformers loss %.9g, f8 loss %.9g, relative difference %.2e (tolerance %.0e): %s" % (
            ref, got, rel, a.tol, "OK" if ok else "FAILED"))

        ck, out_dir = os.path.join(tmp, "ck.safetensors"), os.path.join(tmp, "export")
        common = ["--init-from", hf_dir, "--seq", str(a.positions), "--batch", "2", "--grad-accum", "1",
                  "--backend", a.backend, "--log", "", "--plot", "", "--sample", "0", "--quiet", "--val-every", "0"]
        # two steps at learning rate 0 (f8_train trains at least one step): the weights as imported;
        # exit status 2 (the loss did not fall) is expected then
        run([a.f8_train, "--steps", "2", "--lr", "0", "--lr-min", "0", "--weight-decay", "0", "--checkpoint", ck,
             "--fp8", "off", "--dtype", "fp32"] + common, ok_codes=(0, 2))
        run([a.f8_train, "export-hf", ck, out_dir])
        back = hf_loss(out_dir, tokens)
        ok = back == ref
        fails += not ok
        print("3. round trip: transformers loss of f8's export %.9g vs the original %.9g: %s" % (
            back, ref, "OK (bit for bit)" if ok else "FAILED"))

        ck2, out2 = os.path.join(tmp, "trained.safetensors"), os.path.join(tmp, "trained")
        run([a.f8_train, "--steps", str(a.train_steps), "--checkpoint", ck2, "--lr", "1e-3"] + common)
        run([a.f8_train, "export-hf", ck2, out2])
        ref2 = hf_loss(out2, tokens)
        got2 = f8_loss(a.f8_train, out2, tok_file, a.backend)
        rel2 = abs(got2 - ref2) / abs(ref2)
        ok = rel2 <= a.tol and ref2 != ref
        fails += not ok
        print("4. trained %d steps with f8_train, exported: transformers %.9g, f8 %.9g, relative %.2e: %s" % (
            a.train_steps, ref2, got2, rel2, "OK" if ok else "FAILED"))
    print("check_gpt2: %s" % ("all OK" if not fails else "%d FAILED" % fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
