#!/usr/bin/env python3
"""Write a synthetic llm.c token shard for speed measurements.

Usage: tools/llmc_shard.py [--llama3] OUT.bin TOKENS [SEED]

The file is what f8_train --data reads: a 256 x int32 little-endian header
(magic 20240520, version 1, token count), then the tokens as uint16, drawn
uniformly from the GPT-2 vocabulary (50257) by a seeded generator, so the
same arguments give the same file. With --llama3, llm.c's Llama 3 shard
instead (magic 20240801, version 7, uint32 tokens of the 128256-token
vocabulary), what the llama-* presets read. Only speed is measured on it:
random tokens teach a model nothing. Pure Python (no numpy needed).
"""
import random
import struct
import sys
from array import array

VOCAB = 50257
LLAMA3_VOCAB = 128256


def main():
    argv = [a for a in sys.argv[1:] if a != "--llama3"]
    llama3 = len(argv) != len(sys.argv) - 1
    if len(argv) not in (2, 3):
        sys.exit(__doc__.strip().splitlines()[2])
    path, n = argv[0], int(argv[1])
    rng = random.Random(int(argv[2]) if len(argv) == 3 else 1)
    header = [0] * 256
    header[:3] = [20240801, 7, n] if llama3 else [20240520, 1, n]
    tokens = array("I" if llama3 else "H", (rng.randrange(LLAMA3_VOCAB if llama3 else VOCAB) for _ in range(n)))
    if sys.byteorder != "little":
        tokens.byteswap()
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(tokens.tobytes())


if __name__ == "__main__":
    main()
