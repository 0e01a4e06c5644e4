#!/usr/bin/python3
"""tests/reference/lowp_reference.py - writes the conversion fixture that
tests/nn/test_nn_bf16.c compares mtc's fp32 -> bf16 and fp32 -> fp16
conversions with: PyTorch's own rounding (torch.bfloat16, torch.float16).

Inputs: hand-picked edge values (round-to-nearest-even ties, values just
either side of a tie, fp32 and fp16 subnormals, the largest finite values
and what rounds past them, zeros, infinities, NaNs) and seeded random bit
patterns over every exponent.

Format (text, one value per line): three hex words
    <fp32 input bits> <bf16 bits from torch> <fp16 bits from torch>
NaN results are compared as "is a NaN" only (torch returns one canonical
NaN; mtc keeps the sign and payload).

Run with Debian's python3-torch:  /usr/bin/python3 tests/reference/lowp_reference.py
(writes tests/reference/lowp_convert.txt; the C test does not need PyTorch).
"""
import os
import random
import struct
import sys

import torch


def bits_to_f32(u):
    return struct.unpack("<f", struct.pack("<I", u))[0]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "lowp_convert.txt")
    edge = [
        0x00000000, 0x80000000, 0x3F800000, 0xBF800000,
        # bf16 ties and their neighbours: even below, odd below
        0x3F808000, 0x3F818000, 0x3F807FFF, 0x3F808001, 0xBF818000, 0x3F80FFFF,
        # fp32 subnormals (bf16 keeps them; a tie at 0x8000 goes to even)
        0x00000001, 0x00008000, 0x00018000, 0x00010000, 0x007FFFFF, 0x007F8000, 0x807FFFFF,
        0x80008001, 0x00800000,
        # largest finite and past it
        0x7F7FFFFF, 0x7F7F7FFF, 0x7F7F8000, 0x7F7F0000, 0xFF7FFFFF,
        # infinities and NaNs
        0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FBFFFFF, 0xFFFFFFFF,
        # fp16: 65504 is the largest, 65520 the tie past it, 2^-14 the
        # smallest normal, 2^-24 the smallest subnormal, 2^-25 a tie to 0
        0x477FE000, 0x477FEFFF, 0x477FF000, 0x477FF001, 0x38800000, 0x387FC000, 0x387FE000,
        0x33800000, 0x33000000, 0x33000001, 0x33400000, 0x33C00000, 0x3F801000, 0x3F803000,
        0x3F800FFF, 0x3F801001, 0x38FFE000, 0x38FFF000,
    ]
    rnd = random.Random(20261201)
    vals = list(edge)
    for e in range(256):  # every exponent, random sign and mantissa
        for _ in range(12):
            vals.append((rnd.getrandbits(1) << 31) | (e << 23) | rnd.getrandbits(23))
    x = torch.tensor([bits_to_f32(u) for u in vals], dtype=torch.float32)
    bf = x.to(torch.bfloat16).view(torch.int16).numpy().astype("uint16")
    hf = x.to(torch.float16).view(torch.int16).numpy().astype("uint16")
    with open(out, "w") as f:
        f.write("# fp32 bf16 fp16 (written by tests/reference/lowp_reference.py with torch %s)\n"
                % torch.__version__)
        for u, b, h in zip(vals, bf, hf):
            f.write("%08x %04x %04x\n" % (u, int(b), int(h)))


if __name__ == "__main__":
    main()
