#!/usr/bin/env python3
"""Tokenize text into llm.c's Llama 3 token shards for f8_train --data.

A shard is 256 little-endian int32 (magic 20240801, version 7, the token
count, zeros) and then that many little-endian uint32 token ids: the format
train/data.c reads (and llm.c's dev/data scripts write for Llama 3). The text
is tokenized with a Hugging Face tokenizer (a tokenizer.json, through the
`tokenizers` package); each document (a file, or each part between blank-line
runs with --split-paragraphs) starts with the tokenizer's begin-of-text token
when it has one (<|begin_of_text|> for Llama 3), as llm.c does. The last
--val-fraction of the tokens go to PREFIX_val_000000.bin, the rest to
PREFIX_train_NNNNNN.bin shards of at most --shard-tokens tokens.

  python3 tools/llama3_shards.py --tokenizer tokenizer.json --out data/tiny text.txt
  ./build/f8_train --model llama-tiny --data "data/tiny_train_*.bin" --val-data data/tiny_val_000000.bin
"""
import argparse
import struct
import sys

MAGIC, VERSION, HEADER_INTS = 20240801, 7, 256


def write_shard(path, tokens):
    header = struct.pack("<3i", MAGIC, VERSION, len(tokens)) + bytes(4 * (HEADER_INTS - 3))
    with open(path, "wb") as f:
        f.write(header)
        f.write(struct.pack("<%dI" % len(tokens), *tokens))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", required=True, help="a Hugging Face tokenizer.json")
    ap.add_argument("--out", required=True, help="output prefix (PREFIX_train_000000.bin, PREFIX_val_000000.bin)")
    ap.add_argument("--shard-tokens", type=int, default=100_000_000)
    ap.add_argument("--val-fraction", type=float, default=0.1)
    ap.add_argument("--split-paragraphs", action="store_true", help="blank lines separate documents")
    ap.add_argument("text", nargs="+")
    a = ap.parse_args()
    if not 0 <= a.val_fraction < 1 or a.shard_tokens < 1:
        sys.exit("--val-fraction must be in [0, 1) and --shard-tokens >= 1")
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(a.tokenizer)
    bos = tok.token_to_id("<|begin_of_text|>")
    docs = []
    for path in a.text:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        docs += [d for d in text.split("\n\n") if d.strip()] if a.split_paragraphs else [text]
    ids = []
    for d in docs:
        if bos is not None:
            ids.append(bos)
        ids += tok.encode(d, add_special_tokens=False).ids
    if ids and max(ids) >= 2**32:
        sys.exit("a token id does not fit uint32")
    n_val = int(len(ids) * a.val_fraction)
    train, val = ids[: len(ids) - n_val], ids[len(ids) - n_val:]
    for k, i in enumerate(range(0, len(train), a.shard_tokens)):
        write_shard("%s_train_%06d.bin" % (a.out, k), train[i: i + a.shard_tokens])
    if val:
        write_shard("%s_val_000000.bin" % a.out, val)
    print("%d documents, %d tokens (vocabulary %d): %d train, %d val" % (len(docs), len(ids), tok.get_vocab_size(),
                                                                          len(train), len(val)))


if __name__ == "__main__":
    main()
