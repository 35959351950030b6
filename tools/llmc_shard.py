#!/usr/bin/env python3
"""Write a synthetic llm.c token shard for speed measurements.

Usage: tools/llmc_shard.py OUT.bin TOKENS [SEED]

The file is what f8_train --data reads: a 256 x int32 little-endian header
(magic 20240520, version 1, token count), then the tokens as uint16, drawn
uniformly from the GPT-2 vocabulary (50257) by a seeded generator, so the
same arguments give the same file. Only speed is measured on it: random
tokens teach a model nothing. Pure Python (no numpy needed).
"""
import random
import struct
import sys
from array import array

VOCAB = 50257


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__.strip().splitlines()[2])
    path, n = sys.argv[1], int(sys.argv[2])
    rng = random.Random(int(sys.argv[3]) if len(sys.argv) == 4 else 1)
    header = [0] * 256
    header[:3] = [20240520, 1, n]
    tokens = array("H", (rng.randrange(VOCAB) for _ in range(n)))
    if sys.byteorder != "little":
        tokens.byteswap()
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(tokens.tobytes())


if __name__ == "__main__":
    main()
