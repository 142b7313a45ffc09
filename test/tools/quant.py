#!/usr/bin/python3
"""GGUF block quantization in numpy, from the format's definition: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1.

    quant.py --out DIR [--seed N] [--blocks N]

The reference half of cbllm's dequantization test, sharing nothing with the C engine.  For
each type it writes DIR/NAME.blocks (the packed 32-element blocks, little-endian) and
DIR/NAME.f32 (their dequantized values as little-endian float32), for the unit test
test_dtype_quant, which requires the engine's dequantizer to give the same bits.

Blocks (all 32 elements):
    Q8_0  d:f16 qs:int8[32]                    x = qs * d
    Q4_0  d:f16 qs:u8[16]                      x = (q - 8) * d
    Q4_1  d:f16 m:f16 qs:u8[16]                x = q * d + m
    Q5_0  d:f16 qh:u8[4] qs:u8[16]             x = (q - 16) * d
    Q5_1  d:f16 m:f16 qh:u8[4] qs:u8[16]       x = q * d + m
Element j < 16 is the low nibble of qs[j], element j + 16 its high nibble; qh is a
little-endian 32-bit word whose bit j is element j's fifth bit.  Dequantization is float32
with each operation rounded alone: q * d, then + m.

The quantizer rounds to nearest as the format's reference quantizer does: Q8_0 d = amax / 127
and q = round(x / d); Q4_0 d = max / -8 with max the element of largest magnitude (its sign
kept), q = min(15, trunc(x / d + 8.5)); Q5_0 likewise with -16, 31 and 16.5; Q4_1 and Q5_1
d = (max - min) / 15 (31), m = min, q = min(15 (31), trunc((x - min) / d + 0.5)).

Besides quantized random data, each file holds edge blocks: zero scale, negative scale,
subnormal f16 scales and offsets, the extreme values of q, and raw random blocks whose
scale and offset are any finite f16 bit pattern.  Before writing, the script exits with an
error unless its own round trip on random data stays within one step d of every value.
"""

import argparse
import os

import numpy as np

QK = 32
F32 = np.float32


def f16_bytes(v):
    """The f16 (round to nearest) of float v as 2 little-endian bytes."""
    return np.array([v], dtype="<f2").tobytes()


def f16_of(raw):
    """The f32 value of little-endian f16 bytes (exact)."""
    return np.frombuffer(raw, dtype="<f2").astype(F32)[0]


def pack_nibbles(q):
    """16 bytes: low nibbles elements 0..15, high nibbles 16..31."""
    q = np.asarray(q, dtype=np.uint8)
    return ((q[:16] & 0xF) | ((q[16:] & 0xF) << 4)).astype(np.uint8).tobytes()


def pack_high(q):
    """4 bytes: the little-endian word whose bit j is q[j]'s bit 4."""
    word = 0
    for j in range(QK):
        word |= ((int(q[j]) >> 4) & 1) << j
    return word.to_bytes(4, "little")


def round_away(v):
    """roundf: to nearest, halves away from zero."""
    return np.trunc(v + np.copysign(F32(0.5), v)).astype(F32)


def quant_q8_0(x):
    """One Q8_0 block from 32 float32 values."""
    amax = F32(np.max(np.abs(x)))
    d = F32(amax / F32(127))
    inv = F32(1) / d if d != 0 else F32(0)
    q = np.clip(round_away(x * inv), -128, 127).astype(np.int8)
    return f16_bytes(d) + q.tobytes()


def signed_max(x):
    """The element of largest magnitude, with its sign (the first such)."""
    return F32(x[int(np.argmax(np.abs(x)))])


def quant_sym(x, levels):
    """Q4_0 (levels 16) or Q5_0 (levels 32): d = max / -(levels / 2)."""
    half = levels // 2
    d = F32(signed_max(x) / F32(-half))
    inv = F32(1) / d if d != 0 else F32(0)
    q = np.minimum(levels - 1, np.trunc(x * inv + F32(half + 0.5))).astype(np.int64)
    q = np.maximum(q, 0)
    return d, q


def quant_affine(x, levels):
    """Q4_1 (levels 16) or Q5_1 (levels 32): d = (max - min) / (levels - 1), m = min."""
    lo, hi = F32(np.min(x)), F32(np.max(x))
    d = F32((hi - lo) / F32(levels - 1))
    inv = F32(1) / d if d != 0 else F32(0)
    q = np.minimum(levels - 1, np.trunc((x - lo) * inv + F32(0.5))).astype(np.int64)
    q = np.maximum(q, 0)
    return d, lo, q


def quant_q4_0(x):
    """One Q4_0 block."""
    d, q = quant_sym(x, 16)
    return f16_bytes(d) + pack_nibbles(q)


def quant_q4_1(x):
    """One Q4_1 block."""
    d, m, q = quant_affine(x, 16)
    return f16_bytes(d) + f16_bytes(m) + pack_nibbles(q)


def quant_q5_0(x):
    """One Q5_0 block."""
    d, q = quant_sym(x, 32)
    return f16_bytes(d) + pack_high(q) + pack_nibbles(q)


def quant_q5_1(x):
    """One Q5_1 block."""
    d, m, q = quant_affine(x, 32)
    return f16_bytes(d) + f16_bytes(m) + pack_high(q) + pack_nibbles(q)


def unpack_nibbles(qs):
    """The 32 4-bit values of 16 packed bytes."""
    b = np.frombuffer(qs, dtype=np.uint8).astype(np.int64)
    return np.concatenate([b & 0xF, b >> 4])


def unpack_high(qh):
    """Bit 4 of each of the 32 values from the little-endian word."""
    word = int.from_bytes(qh, "little")
    return np.array([((word >> j) & 1) << 4 for j in range(QK)], dtype=np.int64)


def dequant(name, blk):
    """The 32 float32 values of one block of type name."""
    d = f16_of(blk[0:2])
    if name == "Q8_0":
        q = np.frombuffer(blk[2:34], dtype=np.int8).astype(F32)
        return q * d
    if name == "Q4_0":
        return (unpack_nibbles(blk[2:18]) - 8).astype(F32) * d
    if name == "Q5_0":
        q = unpack_nibbles(blk[6:22]) | unpack_high(blk[2:6])
        return (q - 16).astype(F32) * d
    m = f16_of(blk[2:4])
    if name == "Q4_1":
        q = unpack_nibbles(blk[4:20])
    else:
        q = unpack_nibbles(blk[8:24]) | unpack_high(blk[4:8])
    prod = q.astype(F32) * d  # rounded to f32 on its own
    return (prod + m).astype(F32)


TYPES = {
    "Q8_0": (34, quant_q8_0),
    "Q4_0": (18, quant_q4_0),
    "Q4_1": (20, quant_q4_1),
    "Q5_0": (22, quant_q5_0),
    "Q5_1": (24, quant_q5_1),
}


def random_finite_f16(rng):
    """2 bytes of a random f16 bit pattern that is finite (exponent < 31)."""
    while True:
        h = int(rng.integers(0, 1 << 16))
        if (h >> 10) & 0x1F != 0x1F:
            return h.to_bytes(2, "little")


def edge_blocks(name, nbytes, rng):
    """Hand-shaped blocks: scales zero, negative and subnormal; q at its extremes; raw random."""
    scales = [0x0000, 0x8000, 0x3C00, 0xBC00, 0x0001, 0x8001, 0x03FF, 0x83FF, 0x0200, 0x7BFF, 0xFBFF,
              0x0400, 0x3555]
    has_m = name in ("Q4_1", "Q5_1")
    body = nbytes - 2 - (2 if has_m else 0)
    fills = [b"\x00" * body, b"\xff" * body, b"\x80" * body, b"\x7f" * body, b"\x0f" * body,
             b"\xf0" * body, b"\x55" * body, b"\xaa" * body]
    out = []
    for s in scales:
        for f in fills:
            m = f16_bytes(0.0) if has_m else b""
            out.append(s.to_bytes(2, "little") + m + f)
            if has_m:
                for mm in (0x8001, 0x03FF, 0xFBFF, 0x3C00, 0xC000):
                    out.append(s.to_bytes(2, "little") + mm.to_bytes(2, "little") + f)
    for _ in range(2000):
        m = random_finite_f16(rng) if has_m else b""
        out.append(random_finite_f16(rng) + m + rng.integers(0, 256, body, dtype=np.uint8).tobytes())
    return out


def random_data_blocks(quant, n, rng):
    """n blocks quantized from random data of varied scale and shape."""
    out = []
    for i in range(n):
        scale = F32(10.0 ** rng.uniform(-6, 4))
        kind = i % 4
        if kind == 0:
            x = rng.standard_normal(QK)
        elif kind == 1:
            x = rng.uniform(-1, 1, QK)
        elif kind == 2:
            x = rng.uniform(0, 1, QK)  # one-signed: positive offsets, the signed max positive
        else:
            x = -rng.exponential(1.0, QK)
        out.append(quant((x * scale).astype(F32)))
    return out


def check_quantizer(name, quant, rng):
    """Exit unless quantizing then dequantizing moves no value by more than one step d (plus m's rounding)."""
    for _ in range(200):
        x = (rng.standard_normal(QK) * F32(10.0 ** rng.uniform(-2, 2))).astype(F32)
        blk = quant(x)
        d = abs(float(f16_of(blk[0:2])))
        m = abs(float(f16_of(blk[2:4]))) if name in ("Q4_1", "Q5_1") else 0.0
        err = float(np.max(np.abs(dequant(name, blk).astype(np.float64) - x)))
        if err > d * 1.01 + m * 2.0 ** -10:
            raise SystemExit("quant.py: %s moves a value by %g with d %g" % (name, err, d))


def main():
    """Write every type's blocks and expected floats into --out."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--blocks", type=int, default=3000, help="blocks of quantized random data per type")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    for name, (nbytes, quant) in TYPES.items():
        check_quantizer(name, quant, rng)
        blocks = edge_blocks(name, nbytes, rng) + random_data_blocks(quant, a.blocks, rng)
        vals = []
        for b in blocks:
            assert len(b) == nbytes, (name, len(b))
            vals.append(dequant(name, b))
        with open(os.path.join(a.out, name + ".blocks"), "wb") as f:
            f.write(b"".join(blocks))
        with open(os.path.join(a.out, name + ".f32"), "wb") as f:
            f.write(np.concatenate(vals).astype("<f4").tobytes())


if __name__ == "__main__":
    main()
