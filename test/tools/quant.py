#!/usr/bin/python3
"""GGUF block quantization in numpy, from the format's definition: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K-Q6_K, MXFP4.

    quant.py --out DIR [--seed N] [--blocks N]
    import quant; quant.quantize("Q4_K", x) -> bytes; quant.dequantize("Q4_K", raw) -> float32

The reference half of cbllm's dequantization test, sharing nothing with the C engine.  For
each type it writes DIR/NAME.blocks (the packed blocks, little-endian) and
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

The quantizers search (below, the K-quant quantizer's steps 1-3 on the block as one
sub-block): Q8_0, Q4_0 and Q5_0 take the symmetric search's scale (codes in [-128, 127],
[-8, 7], [-16, 15]), Q4_1 and Q5_1 the affine one's scale and offset (of either sign), each
rounded to f16, and every element then the nearest code.

K-quant blocks (256 elements in sub-blocks of 16 or 32; src/dtype/dtype_kquant.c's header draws
the bit positions, KTYPES and PLANES below state them again):
    Q2_K  scales:u8[16] qs:u8[64] d:f16 dmin:f16       x = (d * sc) * q - dmin * m
    Q3_K  hmask:u8[32] qs:u8[64] scales:u8[12] d:f16   x = (d * sc) * (q - 4), sc 6-bit - 32
    Q4_K  d:f16 dmin:f16 scales:u8[12] qs:u8[128]      x = (d * sc) * q - dmin * m, 6-bit sc, m
    Q5_K  d:f16 dmin:f16 scales:u8[12] qh:u8[32] qs:u8[128]   as Q4_K with a fifth bit
    Q6_K  ql:u8[128] qh:u8[64] scales:i8[16] d:f16     x = (d * sc) * (q - 32)
Every product there is exact in float32; only the affine types' subtraction rounds.

The K-quant quantizer (k_quant; src/dtype/quantize.c follows the same steps in the same float32
operations and order for every type, so both write the same bytes): each sub-block first gets a float
scale (and an offset <= 0 in the affine types) by a search over 25 trial grids, codes
q = rint(x * N' / range) (affine, from the sub-block's min clamped to <= 0) or
q = rint(-x * N' / signed max) (symmetric) for N' = N + j / 8, j in [-16, 8] and N the code
count above (affine) or below (symmetric) zero; for each trial's codes the least-squares
scale (and offset) follows in closed form, and the trial of least squared error wins (the
first on ties).  Then the super-block scale d is the largest sub-block scale over the
largest scale code (the signed largest over the most negative code in Q3_K and Q6_K),
rounded to f16, each sub-block's scale code is rint(scale / d) clipped to its range (the
mins likewise with dmin), and each element takes the nearest code of its sub-block's
final scale and offset.  Sums run element by element from the first.

MXFP4 blocks (32 elements, 17 bytes: ggml's type 39, gpt-oss's experts):
    e:u8 qs:u8[16]                             x = K[q] * 2^(e - 128)
e is an exponent alone (E8M0); q is a 4-bit float (E2M1: sign, 2 exponent bits, 1 mantissa bit),
nibbles placed as Q4_0's, and K[q] twice its value, so that K is integer: 0, 1, 2, 3, 4, 6, 8, 12
for q = 0..7, the same negated for q = 8..15.  2^(e - 128) is exact for every e (subnormal for e < 2,
and 2^127 for e = 255, no NaN), and so is each product.  Its quantizer (mx_quant) tries two exponents,
k + 125 and k + 126 for 2^k <= amax < 2^(k + 1) (the first clips what lies beyond 12 times its
factor, the second holds every value; k + 126 only up to 252, where 12 times the factor is still
finite), gives each value its nearest code (ties to the smaller magnitude, zero magnitude as code 0)
under each, and keeps the one of smaller sum of squared errors (the first on ties), those errors
measured in units of the first factor; the exponent is at least 0, and 0 for an all-zero block.

For the engine's quantizers (test_quantize) it also writes NAME.x, rows of 256 float32
values (random ones of varied scale and shape, a zero row, constant rows, rows with one
outlier), and NAME.xq, their blocks as this script's quantizer makes them.

Besides quantized random data, each file holds edge blocks: zero scale, negative scale,
subnormal f16 scales and offsets, the extreme values of q, and raw random blocks whose
scale and offset are any finite f16 bit pattern.  Before writing, the script exits with an
error unless its own round trip on Gaussian rows stays within RMS_BOUND.
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
    """(blocks, 16) bytes of codes q (blocks, 32): low nibbles elements 0..15, high nibbles 16..31."""
    return ((q[:, :16] & 0xF) | ((q[:, 16:] & 0xF) << 4)).astype(np.uint8)


def pack_high(q):
    """(blocks, 4) bytes: the little-endian word whose bit j is q[:, j]'s bit 4."""
    word = np.zeros(q.shape[0], dtype=np.uint32)
    for j in range(QK):
        word |= (((q[:, j] >> 4) & 1) << j).astype(np.uint32)
    return word.astype("<u4")[:, None].view(np.uint8)


def halves(v):
    """(blocks, 2) little-endian f16 bytes of float32 values v (blocks,), and their float32 values."""
    bits, val = f16_round(v)
    return bits.astype("<u2")[:, None].view(np.uint8), val


def quant_sym(x, bias, qmax):
    """Q8_0, Q4_0, Q5_0 blocks' scale bytes and codes less the bias: the search's scale, rounded to f16."""
    dbytes, d = halves(fit_sym(x, bias, qmax))
    with np.errstate(divide="ignore", invalid="ignore"):
        q = code_of(x / d[:, None], -bias, qmax - bias)
    return dbytes, q


def quant_affine(x, qmax):
    """Q4_1, Q5_1 blocks' scale and offset bytes and codes: the search's (offset of either sign)."""
    a, mm = fit_affine(x, qmax, False)
    dbytes, d = halves(a)
    mbytes, m = halves(mm)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = code_of(np.where(d[:, None] > 0, (x - m[:, None]) / d[:, None], F32(0)), 0, qmax)
    return dbytes, mbytes, q


def quant_q8_0(x):
    """Q8_0 blocks (blocks, 34) from float32 values x (blocks, 32)."""
    d, q = quant_sym(x, 128, 255)
    return np.concatenate([d, q.astype(np.int8).view(np.uint8)], axis=1)


def quant_q4_0(x):
    """Q4_0 blocks (blocks, 18)."""
    d, q = quant_sym(x, 8, 15)
    return np.concatenate([d, pack_nibbles(q + 8)], axis=1)


def quant_q4_1(x):
    """Q4_1 blocks (blocks, 20)."""
    d, m, q = quant_affine(x, 15)
    return np.concatenate([d, m, pack_nibbles(q)], axis=1)


def quant_q5_0(x):
    """Q5_0 blocks (blocks, 22)."""
    d, q = quant_sym(x, 16, 31)
    return np.concatenate([d, pack_high(q + 16), pack_nibbles(q + 16)], axis=1)


def quant_q5_1(x):
    """Q5_1 blocks (blocks, 24)."""
    d, m, q = quant_affine(x, 31)
    return np.concatenate([d, m, pack_high(q), pack_nibbles(q)], axis=1)


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


# MXFP4: twice the E2M1 value of each code, and the magnitudes halfway between consecutive codes 0..7
MX_VALUES = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.int64)
MX_MIDS = np.array([0.5, 1.5, 2.5, 3.5, 5.0, 7.0, 10.0], dtype=F32)
MX_BYTES = 17


def mx_factor(e):
    """2^(e - 128) as float32, exactly, for exponent bytes e (any integer array)."""
    return np.ldexp(np.ones(np.shape(e), dtype=np.float64), np.asarray(e, dtype=np.int64) - 128).astype(F32)


def mx_dequant(blk):
    """The float32 values (blocks, 32) of MXFP4 blocks blk (blocks, 17) uint8."""
    q = np.concatenate([blk[:, 1:] & 0xF, blk[:, 1:] >> 4], axis=1).astype(np.int64)
    return (MX_VALUES[q].astype(F32) * mx_factor(blk[:, 0])[:, None]).astype(F32)


def mx_codes(w):
    """The MXFP4 code nearest each float32 value w (in units of the factor): ties to the smaller magnitude."""
    mag = np.searchsorted(MX_MIDS, np.abs(w), side="left")  # how many midpoints lie below |w|
    return np.where((w < 0) & (mag > 0), mag | 8, mag).astype(np.int64)


def mx_quant(x):
    """MXFP4 blocks (blocks, 17) uint8 from float32 values x (blocks, 32)."""
    amax = np.abs(x).max(axis=1)
    _, k2 = np.frexp(amax)  # amax = m 2^k2, m in [0.5, 1)
    e = np.where(amax > 0, np.maximum(k2.astype(np.int64) + 124, 0), 0)
    v = (x / mx_factor(e)[:, None]).astype(F32)
    qa, qb = mx_codes(v), mx_codes((v / F32(2)).astype(F32))
    ra = (MX_VALUES[qa].astype(F32) - v).astype(F32)
    rb = ((F32(2) * MX_VALUES[qb].astype(F32)) - v).astype(F32)
    second = (e + 1 <= 252) & (osum(rb * rb) < osum(ra * ra))
    q = np.where(second[:, None], qb, qa)
    blk = np.zeros((x.shape[0], MX_BYTES), dtype=np.uint8)
    blk[:, 0] = (e + second).astype(np.uint8)
    blk[:, 1:] = pack_nibbles(q)
    return blk


def mx_data_rows(rng):
    """k_data_rows' rows, then Gaussian rows of scales across f32's range (subnormal to 1e38, exactly max)."""
    rows = [k_data_rows(64, rng, 3)]
    for scale in (1e-44, 1e-41, 1e-39, 1e-30, 1e20, 1e37, 1e38):
        rows.append((rng.standard_normal((2, QK_K)) * scale).astype(F32))
    top = rng.standard_normal(QK_K).astype(F32)
    top[::32] = np.finfo(F32).max
    rows.append(top[None, :])
    return np.concatenate(rows).astype(F32)


def mx_edge_blocks(rng):
    """Every exponent byte 0..255 with byte fills of the codes, then raw random blocks."""
    out = []
    for e in range(256):
        for fill in (0x00, 0x88, 0xFF, 0x77, 0x0F, 0xF0, 0x19, 0x2A, 0x3B, 0x4C, 0x5D, 0x6E):
            out.append(bytes([e]) + bytes([fill]) * 16)
        out.append(bytes([e]) + rng.integers(0, 256, 16, dtype=np.uint8).tobytes())
    for _ in range(2000):
        out.append(rng.integers(0, 256, MX_BYTES, dtype=np.uint8).tobytes())
    return out


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


def random_values(i, n, rng, top=4):
    """n float32 values of random scale (1e-6 to 10^top) and of shape i % 4: Gaussian, uniform, one-signed."""
    scale = F32(10.0 ** rng.uniform(-6, top))
    kind = i % 4
    if kind == 0:
        x = rng.standard_normal(n)
    elif kind == 1:
        x = rng.uniform(-1, 1, n)
    elif kind == 2:
        x = rng.uniform(0, 1, n)  # one-signed: positive offsets, the signed max positive
    else:
        x = -rng.exponential(1.0, n)
    return (x * scale).astype(F32)


def random_data_blocks(quant, n, rng):
    """n blocks quantized from random data of varied scale and shape."""
    return [bytes(b) for b in quant(np.stack([random_values(i, QK, rng) for i in range(n)]))]


QK_K = 256

# name: (bytes, elements per sub-block, d offset, dmin offset or None, scales offset, scale packing,
#        smallest and largest scale code, code planes [(plane, offset, bits)] low bits first, bias, largest code)
KTYPES = {
    "Q2_K": (84, 16, 80, 82, 0, "nibbles", 0, 15, [("crumbs", 16, 2)], 0, 3),
    "Q3_K": (110, 16, 108, None, 96, "six3", -32, 31, [("crumbs", 32, 2), ("bits", 0, 1)], 4, 7),
    "Q4_K": (144, 32, 0, 2, 4, "sixmin", 0, 63, [("nibbles", 16, 4)], 0, 15),
    "Q5_K": (176, 32, 0, 2, 4, "sixmin", 0, 63, [("nibbles", 48, 4), ("bits", 16, 1)], 0, 31),
    "Q6_K": (210, 16, 208, None, 192, "int8", -128, 127, [("nibbles6", 0, 4), ("crumbs", 128, 2)], 32, 63),
}

_E = np.arange(QK_K)
# each plane's byte (from the plane's start) and shift of element e
PLANES = {
    "crumbs": (32 * (_E // 128) + _E % 32, 2 * ((_E // 32) % 4)),
    "bits": (_E % 32, _E // 32),
    "nibbles": (32 * (_E // 64) + _E % 32, 4 * ((_E // 32) % 2)),
    "nibbles6": (64 * (_E // 128) + _E % 64, 4 * ((_E % 128) // 64)),
}


def six_places(kind, s, is_min):
    """[(byte, shift, bits)] of the low then high bits of 6-bit scale (or min) s in 12 bytes."""
    if kind == "six3":
        return [(s % 8, 4 * (s // 8), 4), (8 + s % 4, 2 * (s // 4), 2)]
    if s < 4:
        return [(s + (4 if is_min else 0), 0, 6)]
    return [(s + 4, 4 if is_min else 0, 4), (s if is_min else s - 4, 6, 2)]


def k_scales(name, blk):
    """The scale and min codes, (blocks, sub-blocks) int64 each, of blocks blk (blocks, bytes) uint8."""
    _, sub, _, _, so, kind, smin, _, _, _, _ = KTYPES[name]
    ns = QK_K // sub
    sb = blk[:, so:so + (ns if kind in ("nibbles", "int8") else 12)].astype(np.int64)
    if kind == "nibbles":
        return sb & 15, sb >> 4
    if kind == "int8":
        return np.where(sb >= 128, sb - 256, sb), np.zeros_like(sb)
    out = []
    for is_min in (False, True) if kind == "sixmin" else (False,):
        cols = []
        for s in range(ns):
            v, low = 0, 0
            for byte, shift, bits in six_places(kind, s, is_min):
                v = v | ((sb[:, byte] >> shift) & ((1 << bits) - 1)) << low
                low += bits
            cols.append(v)
        out.append(np.stack(cols, axis=1))
    if kind == "six3":
        return out[0] - 32, np.zeros_like(out[0])
    return out[0], out[1]


def k_codes(name, blk):
    """The codes (before the bias), (blocks, 256) int64, of blocks blk."""
    q, low = 0, 0
    for plane, off, bits in KTYPES[name][8]:
        byte, shift = PLANES[plane]
        q = q | ((blk[:, off + byte].astype(np.int64) >> shift) & ((1 << bits) - 1)) << low
        low += bits
    return q


def k_dequant(name, blk):
    """The float32 values (blocks, 256) of K-quant blocks blk (blocks, bytes) uint8."""
    _, sub, do, mo, _, _, _, _, _, bias, _ = KTYPES[name]
    d = blk[:, do:do + 2].copy().view("<f2").astype(F32)  # (blocks, 1)
    sc, m = k_scales(name, blk)
    dl = (d * sc.astype(F32))[:, _E // sub]  # exact products, rounded nowhere
    x = dl * (k_codes(name, blk) - bias).astype(F32)
    if mo is None:
        return x
    dmin = blk[:, mo:mo + 2].copy().view("<f2").astype(F32)
    return (x - (dmin * m.astype(F32))[:, _E // sub]).astype(F32)


# the search's trial numerators: N + j / 8 for j in [-16, 8], N the code count below or above zero
TRIALS = np.arange(-16, 9).astype(F32) * F32(0.125)


def osum(a):
    """The sum over the last axis, element by element from the first (the C quantizer's order)."""
    acc = np.zeros(a.shape[:-1], dtype=F32)
    for e in range(a.shape[-1]):
        acc = (acc + a[..., e]).astype(F32)
    return acc


def first_absmax(x):
    """Along the last axis, the element of largest magnitude with its sign (the first such)."""
    idx = np.argmax(np.abs(x), axis=-1)
    return np.take_along_axis(x, idx[..., None], axis=-1)[..., 0]


def pick(err, *vals):
    """Of each row's trials (last axis), the values of the one of least error (the first such)."""
    best = np.argmin(err, axis=-1)[..., None]
    return [np.take_along_axis(v, best, axis=-1)[..., 0] for v in vals]


def fit_affine(x, qmax, clamp):
    """Each sub-block's (rows of x) scale a >= 0 and offset mm of least squared error; mm <= 0 if clamp."""
    n = F32(x.shape[1])
    lo = np.minimum(x.min(axis=1), F32(0)) if clamp else x.min(axis=1)
    span = (x.max(axis=1) - lo).astype(F32)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        iscale = np.where(span[:, None] > 0, (F32(qmax) + TRIALS)[None, :] / span[:, None], F32(0)).astype(F32)
        xs = x[:, None, :]
        q = np.clip(np.rint((xs - lo[:, None, None]) * iscale[:, :, None]), F32(0), F32(qmax)).astype(F32)
        sq, sqq = osum(q), osum(q * q)
        sx, sqx = osum(np.broadcast_to(xs, q.shape)), osum(q * xs)
        det = (n * sqq - sq * sq).astype(F32)
        a_ls = ((n * sqx - sq * sx) / det).astype(F32)
        m_ls = ((sqq * sx - sq * sqx) / det).astype(F32)
        a_0 = (sqx / sqq).astype(F32)
    full = (det > 0) & (m_ls <= 0) if clamp else det > 0
    a = np.where(sqq == 0, F32(0), np.where(full, a_ls, a_0)).astype(F32)
    mm = np.where(sqq == 0, lo[:, None], np.where(full, m_ls, F32(0))).astype(F32)
    a = np.maximum(a, F32(0))
    with np.errstate(over="ignore", invalid="ignore"):
        r = (a[:, :, None] * q + mm[:, :, None]) - xs
        return pick(osum(r * r), a, mm)


def fit_sym(x, bias, qmax):
    """Each sub-block's (rows of x) signed scale a of least squared error, codes in [-bias, qmax - bias]."""
    vmax = first_absmax(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        iscale = np.where(vmax[:, None] != 0, -(F32(bias) + TRIALS)[None, :] / vmax[:, None], F32(0)).astype(F32)
        xs = x[:, None, :]
        q = np.clip(np.rint(xs * iscale[:, :, None]), F32(-bias), F32(qmax - bias)).astype(F32)
        sqq, sqx = osum(q * q), osum(q * xs)
        a = np.where(sqq > 0, sqx / sqq, F32(0)).astype(F32)
    r = a[:, :, None] * q - xs
    return pick(osum(r * r), a)[0]


def f16_round(v):
    """v (float32 array) rounded to f16: (its f16 bits as uint16, its value as float32)."""
    with np.errstate(over="ignore"):  # beyond f16's range: infinity, which quantize() refuses
        h = v.astype("<f2")
    return h.view("<u2"), h.astype(F32)


def code_of(v, lo, hi):
    """Where v is finite, rint(v) clipped to [lo, hi], else 0, as int64."""
    with np.errstate(invalid="ignore"):
        return np.where(np.isfinite(v), np.clip(np.rint(v), F32(lo), F32(hi)), F32(0)).astype(np.int64)


def k_quant(name, x):
    """K-quant blocks (blocks, bytes) uint8 from float32 values x (blocks, 256)."""
    nbytes, sub, do, mo, so, kind, smin, smax, planes, bias, qmax = KTYPES[name]
    nb, ns = x.shape[0], QK_K // sub
    xsub = x.reshape(nb * ns, sub).astype(F32)
    blk = np.zeros((nb, nbytes), dtype=np.uint8)
    with np.errstate(divide="ignore", invalid="ignore"):
        if mo is None:
            a = fit_sym(xsub, bias, qmax).reshape(nb, ns)
            dbits, d = f16_round((first_absmax(a) / F32(smin)).astype(F32))
            sc = code_of(np.where(d[:, None] != 0, a / d[:, None], F32(0)), smin, smax)
            m = np.zeros_like(sc)
            dl = (d[:, None] * sc.astype(F32))[:, _E // sub]
            q = code_of(x / dl, -bias, qmax - bias) + bias
        else:
            a, mm = fit_affine(xsub, qmax, True)
            a, b = a.reshape(nb, ns), (F32(0) - mm).reshape(nb, ns)
            dbits, d = f16_round((a.max(axis=1) / F32(smax)).astype(F32))
            mbits, dmin = f16_round((b.max(axis=1) / F32(smax)).astype(F32))
            sc = code_of(np.where(d[:, None] > 0, a / d[:, None], F32(0)), 0, smax)
            m = code_of(np.where(dmin[:, None] > 0, b / dmin[:, None], F32(0)), 0, smax)
            dl = (d[:, None] * sc.astype(F32))[:, _E // sub]
            ml = (dmin[:, None] * m.astype(F32))[:, _E // sub]
            q = code_of(np.where(dl > 0, (x + ml) / dl, F32(0)), 0, qmax)
            blk[:, mo:mo + 2] = mbits[:, None].view(np.uint8)
    blk[:, do:do + 2] = dbits[:, None].view(np.uint8)
    k_put_scales(name, blk, sc, m)
    low = 0
    for plane, off, bits in planes:
        byte, shift = PLANES[plane]
        part = ((q >> low) & ((1 << bits) - 1)) << shift
        for e in range(QK_K):
            blk[:, off + byte[e]] |= part[:, e].astype(np.uint8)
        low += bits
    return blk


def k_put_scales(name, blk, sc, m):
    """Packs scale codes sc and min codes m (blocks, sub-blocks) into blk's scale bytes."""
    _, sub, _, _, so, kind, _, _, _, _, _ = KTYPES[name]
    if kind == "nibbles":
        blk[:, so:so + 16] = ((sc & 15) | (m & 15) << 4).astype(np.uint8)
        return
    if kind == "int8":
        blk[:, so:so + 16] = (sc & 0xFF).astype(np.uint8)
        return
    for is_min, vals in ((False, sc + 32 if kind == "six3" else sc), (True, m)):
        if is_min and kind == "six3":
            break
        for s in range(vals.shape[1]):
            low = 0
            for byte, shift, bits in six_places(kind, s, is_min):
                blk[:, so + byte] |= (((vals[:, s] >> low) & ((1 << bits) - 1)) << shift).astype(np.uint8)
                low += bits


def k_edge_blocks(name, rng):
    """Hand-shaped K-quant blocks: d (and dmin) zero, negative, subnormal; byte fills; raw random."""
    nbytes, _, do, mo, _, _, _, _, _, _, _ = KTYPES[name]
    scales = [0x0000, 0x8000, 0x3C00, 0xBC00, 0x0001, 0x8001, 0x03FF, 0x83FF, 0x0200, 0x7BFF, 0xFBFF,
              0x0400, 0x3555]
    mins = [0x0000, 0x8001, 0x03FF, 0xFBFF, 0x3C00, 0xC000] if mo is not None else [None]
    out = []
    for fill in (0x00, 0xFF, 0x80, 0x7F, 0x0F, 0xF0, 0x55, 0xAA):
        for s in scales:
            for mm in mins:
                b = np.full(nbytes, fill, dtype=np.uint8)
                b[do:do + 2] = np.frombuffer(s.to_bytes(2, "little"), dtype=np.uint8)
                if mm is not None:
                    b[mo:mo + 2] = np.frombuffer(mm.to_bytes(2, "little"), dtype=np.uint8)
                out.append(b)
    for _ in range(2000):
        b = rng.integers(0, 256, nbytes, dtype=np.uint8)
        b[do:do + 2] = np.frombuffer(random_finite_f16(rng), dtype=np.uint8)
        if mo is not None:
            b[mo:mo + 2] = np.frombuffer(random_finite_f16(rng), dtype=np.uint8)
        out.append(b)
    return np.stack(out)


def k_data_rows(n, rng, top=4):
    """n rows of 256 float32 values of varied scale (up to 10^top) and shape, then zero, constant and outlier rows."""
    rows = [random_values(i, QK_K, rng, top) for i in range(n)]
    rows.append(np.zeros(QK_K, dtype=F32))
    for c in (1.0, -1.0, 3.0e-5, -250.0):
        rows.append(np.full(QK_K, c, dtype=F32))
    for big in (1.0e3, -1.0e3, 6.0e4):
        x = rng.standard_normal(QK_K).astype(F32)
        x[int(rng.integers(0, QK_K))] = F32(big)
        rows.append(x)
    return np.stack(rows).astype(F32)


def quantize(name, x):
    """The GGUF bytes of float values x (any shape, a whole number of blocks of type name).

    ValueError, as the engine's quantizer refuses them, when a value is not finite or a block's
    values are too large for the type's f16 scales (or, in Q4_1 and Q5_1, its f16 offset)."""
    x = np.asarray(x, dtype=F32).reshape(-1)
    if not np.all(np.isfinite(x)):
        raise ValueError("quantize: a value is NaN or infinite")
    with np.errstate(over="ignore"):
        if name in KTYPES:
            raw = k_quant(name, x.reshape(-1, QK_K)).tobytes()
        elif name == "MXFP4":
            raw = mx_quant(x.reshape(-1, QK)).tobytes()
        else:
            raw = TYPES[name][1](x.reshape(-1, QK)).tobytes()
    if not np.all(np.isfinite(dequantize(name, raw))):
        raise ValueError("quantize: values too large for %s's f16 scales" % name)
    return raw


def dequantize(name, raw):
    """The float32 values of the GGUF bytes raw of type name (whole blocks), flat."""
    blk = np.frombuffer(raw, dtype=np.uint8)
    if name in KTYPES:
        return k_dequant(name, blk.reshape(-1, KTYPES[name][0])).reshape(-1)
    if name == "MXFP4":
        return mx_dequant(blk.reshape(-1, MX_BYTES)).reshape(-1)
    nbytes = TYPES[name][0]
    return np.concatenate([dequant(name, blk[i:i + nbytes].tobytes()) for i in range(0, len(blk), nbytes)])


def check_rms(name, rng):
    """Exit unless quantizing Gaussian rows then dequantizing leaves a relative RMS error below RMS_BOUND[name]."""
    x = rng.standard_normal(64 * QK_K).astype(F32)
    y = dequantize(name, quantize(name, x)).astype(np.float64)
    rel = float(np.sqrt(np.mean((y - x) ** 2) / np.mean(x.astype(np.float64) ** 2)))
    if not rel < RMS_BOUND[name]:
        raise SystemExit("quant.py: %s leaves a relative RMS error of %.4f on Gaussian rows" % (name, rel))


# the relative RMS error each type may leave on Gaussian rows: test_quantize.c's quality_rows bounds,
# about 10% above what it measures (its comment gives the figures)
RMS_BOUND = {"Q8_0": 0.0053, "Q4_0": 0.089, "Q4_1": 0.0765, "Q5_0": 0.044, "Q5_1": 0.0367,
             "Q2_K": 0.296, "Q3_K": 0.158, "Q4_K": 0.078, "Q5_K": 0.039, "Q6_K": 0.0186, "MXFP4": 0.123}


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
        check_rms(name, rng)
        blocks = edge_blocks(name, nbytes, rng) + random_data_blocks(quant, a.blocks, rng)
        vals = []
        for b in blocks:
            assert len(b) == nbytes, (name, len(b))
            vals.append(dequant(name, b))
        with open(os.path.join(a.out, name + ".blocks"), "wb") as f:
            f.write(b"".join(blocks))
        with open(os.path.join(a.out, name + ".f32"), "wb") as f:
            f.write(np.concatenate(vals).astype("<f4").tobytes())
    for name in list(TYPES) + list(KTYPES):
        x = k_data_rows(64, rng, 3)  # within every type's f16 scales and offsets
        xq = quantize(name, x)
        with open(os.path.join(a.out, name + ".x"), "wb") as f:
            f.write(x.astype("<f4").tobytes())
        with open(os.path.join(a.out, name + ".xq"), "wb") as f:
            f.write(xq)
    for name in KTYPES:
        check_rms(name, rng)
        blocks = np.concatenate([k_edge_blocks(name, rng), k_quant(name, k_data_rows(a.blocks // 8, rng))])
        with open(os.path.join(a.out, name + ".blocks"), "wb") as f:
            f.write(blocks.tobytes())
        with open(os.path.join(a.out, name + ".f32"), "wb") as f:
            f.write(k_dequant(name, blocks).astype("<f4").tobytes())
    # MXFP4 last, so that the other types' data stay as they were
    check_rms("MXFP4", rng)
    blocks = np.concatenate([np.frombuffer(b"".join(mx_edge_blocks(rng)), dtype=np.uint8).reshape(-1, MX_BYTES),
                             mx_quant(np.stack([random_values(i, QK, rng, 30) for i in range(a.blocks)]))])
    with open(os.path.join(a.out, "MXFP4.blocks"), "wb") as f:
        f.write(blocks.tobytes())
    with np.errstate(over="ignore"):
        with open(os.path.join(a.out, "MXFP4.f32"), "wb") as f:
            f.write(mx_dequant(blocks).astype("<f4").tobytes())
    x = mx_data_rows(rng)
    with open(os.path.join(a.out, "MXFP4.x"), "wb") as f:
        f.write(x.astype("<f4").tobytes())
    with open(os.path.join(a.out, "MXFP4.xq"), "wb") as f:
        f.write(quantize("MXFP4", x))


if __name__ == "__main__":
    main()
