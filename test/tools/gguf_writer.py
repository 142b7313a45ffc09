#!/usr/bin/python3
"""A small GGUF writer (versions 2 and 3, little-endian), written from the format's spec.

    test/tools/gguf_writer.py --fixtures DIR

writes the fixtures of test/unit/test_gguf.c into DIR: well-formed files holding
metadata of every value type (arrays of each, an array of arrays) and tensors
(F32 and F16 from numpy, raw bytes of quantized type ids), and malformed files,
one per way of being wrong.  DIR/expect.json describes them: for each good file
every key's type and value and every tensor's type, dims, offset, size and bytes;
for each bad file the message the parser must give.

As a module: GGUFWriter builds one file; fields can be overridden (magic, version,
counts, raw values, tensor offsets) to make malformed ones.
"""

import argparse
import json
import os
import struct
import sys

import numpy as np

VTYPES = {"uint8": (0, "<B"), "int8": (1, "<b"), "uint16": (2, "<H"), "int16": (3, "<h"),
          "uint32": (4, "<I"), "int32": (5, "<i"), "float32": (6, "<f"), "bool": (7, "<?"),
          "string": (8, None), "array": (9, None), "uint64": (10, "<Q"), "int64": (11, "<q"),
          "float64": (12, "<d")}
# ggml type id: (name, elements per block, bytes per block)
GGML_TYPES = {0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
              6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 36),
              10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144),
              13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
              30: ("BF16", 1, 2), 39: ("MXFP4", 32, 17)}


def enc_str(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def enc_value(vtype, value):
    """The bytes of one value; an array's value is (element type, list)."""
    if vtype == "string":
        return enc_str(value)
    if vtype == "array":
        et, items = value
        out = struct.pack("<IQ", VTYPES[et][0], len(items))
        return out + b"".join(enc_value(et, v) for v in items)
    return struct.pack(VTYPES[vtype][1], value)


def tensor_nbytes(type_id, dims):
    _, blck, size = GGML_TYPES[type_id]
    n = 1
    for d in dims:
        n *= d
    return n // blck * size


class GGUFWriter:
    """Collects metadata and tensors, then serialises them with to_bytes()."""

    def __init__(self, version=3, alignment=32):
        self.version = version
        self.alignment = alignment      # what the data section is padded to
        self.magic = b"GGUF"
        self.kvs = []                   # (key bytes, encoded type and value)
        self.tensors = []               # dicts: name, type, dims, data, offset
        self.n_kvs = None               # overrides of the counts
        self.n_tensors = None

    def add(self, key, vtype, value):
        self.kvs.append((key, struct.pack("<I", VTYPES[vtype][0]) + enc_value(vtype, value)))

    def add_raw(self, key, type_id, raw):
        self.kvs.append((key, struct.pack("<I", type_id) + raw))

    def add_tensor(self, name, type_id, dims, data, offset=None, place=True):
        """dims innermost first (ne[0] first); data bytes or a numpy array; place=False
        writes the tensor's info but not its data (a tensor past the end of the file)."""
        if isinstance(data, np.ndarray):
            data = data.tobytes()
        self.tensors.append({"name": name, "type": type_id, "dims": list(dims), "data": data,
                             "offset": offset, "place": place})

    def layout(self):
        """Give each tensor without one the next aligned offset; return the data size."""
        end = 0
        for t in self.tensors:
            if t["offset"] is None:
                t["offset"] = (end + self.alignment - 1) // self.alignment * self.alignment
            if t["place"]:
                end = max(end, t["offset"] + len(t["data"]))
        return end

    def to_bytes(self):
        size = self.layout()
        out = bytearray(self.magic + struct.pack("<I", self.version))
        out += struct.pack("<QQ", len(self.tensors) if self.n_tensors is None else self.n_tensors,
                           len(self.kvs) if self.n_kvs is None else self.n_kvs)
        for key, body in self.kvs:
            out += enc_str(key) + body
        for t in self.tensors:
            out += enc_str(t["name"]) + struct.pack("<I", len(t["dims"]))
            out += b"".join(struct.pack("<Q", d) for d in t["dims"])
            out += struct.pack("<IQ", t["type"], t["offset"])
        self.data_start = (len(out) + self.alignment - 1) // self.alignment * self.alignment
        out += bytes(self.data_start - len(out))
        data = bytearray(size)
        for t in self.tensors:
            if t["place"]:
                data[t["offset"]:t["offset"] + len(t["data"])] = t["data"]
        return bytes(out + data)


def json_value(vtype, value):
    """A value as expect.json states it: integers as decimal strings (exact for 64 bits)."""
    if vtype == "array":
        et, items = value
        return {"elem": et, "values": [json_value(et, v) for v in items]}
    if vtype in ("float32", "float64", "bool", "string"):
        return value
    return str(value)


def every_type_metadata():
    """(key, type, value) of every value type, arrays of each, and an array of arrays."""
    kv = [("general.architecture", "string", "llama"),
          ("test.u8", "uint8", 255), ("test.i8", "int8", -128),
          ("test.u16", "uint16", 65535), ("test.i16", "int16", -32768),
          ("test.u32", "uint32", 4294967295), ("test.i32", "int32", -2147483648),
          ("test.f32", "float32", -1.25), ("test.bool_true", "bool", True),
          ("test.bool_false", "bool", False), ("test.str", "string", "h\u00e9llo, w\u00f6rld"),
          ("test.empty_str", "string", ""),
          ("test.u64", "uint64", 18446744073709551615), ("test.i64", "int64", -9223372036854775808),
          ("test.f64", "float64", 3.141592653589793),
          ("llama.block_count", "uint32", 2)]
    arrays = {"uint8": [0, 1, 255], "int8": [-1, 7], "uint16": [1, 65535], "int16": [-2, 3],
              "uint32": [10, 20, 30], "int32": [-5, 5], "float32": [0.5, -2.0, 1024.0],
              "bool": [True, False, True], "string": ["a", "", "tok\u2581en"],
              "uint64": [2**63, 1], "int64": [-(2**63), 42], "float64": [1e-300, -0.0]}
    for et, vals in arrays.items():
        kv.append(("test.arr_" + et, "array", (et, vals)))
    kv.append(("test.arr_empty", "array", ("int32", [])))
    kv.append(("test.arr_nested", "array", ("array", [("uint32", [1, 2]), ("uint32", []),
                                                      ("string", ["x", "yz"])])))
    return kv


def good_file(version, alignment):
    """A well-formed writer and its description for expect.json."""
    w = GGUFWriter(version=version, alignment=alignment or 32)
    kvs = every_type_metadata()
    if alignment is not None:
        kvs.append(("general.alignment", "uint32", alignment))
    for k, t, v in kvs:
        w.add(k, t, v)
    rng = np.random.default_rng(7)
    w.add_tensor("token_embd.weight", 0, [3, 2], rng.standard_normal((2, 3)).astype("<f4"))
    w.add_tensor("blk.0.attn_norm.weight", 1, [5], rng.standard_normal(5).astype("<f2"))
    w.add_tensor("blk.0.ffn_up.weight", 8, [64, 2], bytes(rng.integers(0, 256, 2 * 2 * 34, dtype=np.uint8)))
    w.add_tensor("blk.0.ffn_down.weight", 12, [256, 1, 1, 1], bytes(range(144)))
    w.add_tensor("output.weight", 30, [4, 1, 2], bytes(rng.integers(0, 256, 16, dtype=np.uint8)))
    data = w.to_bytes()
    desc = {"version": version, "alignment": alignment or 32, "data_start": w.data_start,
            "kvs": [{"key": k, "type": t, "value": json_value(t, v)} for k, t, v in kvs],
            "tensors": [{"name": t["name"], "type": t["type"], "dims": t["dims"],
                         "offset": t["offset"], "nbytes": len(t["data"]), "data": t["data"].hex()}
                        for t in w.tensors]}
    return data, desc


def small(**kw):
    """A small valid writer: two keys, two F32 tensors."""
    w = GGUFWriter(**kw)
    w.add("general.architecture", "string", "llama")
    w.add("a.b", "uint32", 1)
    w.add_tensor("t0", 0, [4], np.arange(4, dtype="<f4"))
    w.add_tensor("t1", 0, [2, 2], np.ones(4, dtype="<f4"))
    return w


def key_pos(data, key):
    """Where key's length field starts in data."""
    return data.index(enc_str(key))


def bad_files():
    """(name, file bytes, the message's expected substring) of every malformed case."""
    cases = []
    good = small().to_bytes()
    cases.append(("bad_magic", b"GGUX" + good[4:], "bad magic"))
    cases.append(("version1", good[:4] + struct.pack("<I", 1) + good[8:], "GGUF version 1 is not supported"))
    cases.append(("version4", good[:4] + struct.pack("<I", 4) + good[8:], "GGUF version 4 is not supported"))
    cases.append(("empty", b"", "truncated reading the magic"))
    cases.append(("cut_magic", good[:2], "truncated reading the magic"))
    cases.append(("cut_version", good[:6], "truncated reading the version"))
    cases.append(("cut_tensor_count", good[:12], "truncated reading the tensor count"))
    cases.append(("cut_metadata_count", good[:20], "truncated reading the metadata count"))
    p = key_pos(good, "a.b")
    cases.append(("cut_key", good[:p + 9], "a metadata key at byte %d has length 3, past the end" % p))
    cases.append(("cut_value_type", good[:p + 8 + 3 + 2], "truncated reading a metadata value type"))
    cases.append(("cut_value", good[:p + 8 + 3 + 4 + 1], "truncated reading a metadata value"))
    q = key_pos(good, "t1")
    cases.append(("cut_tensor_offset", good[:q + 8 + 2 + 4 + 16 + 4 + 3], "truncated reading a tensor's offset"))
    cases.append(("cut_data", good[:-1], 'tensor "t1": data (offset 32, 16 bytes) runs past the end'))
    w = small(); w.n_kvs = 2**62
    cases.append(("absurd_kv_count", w.to_bytes(), "metadata count 4611686018427387904 is more than the file could hold"))
    w = small(); w.n_tensors = 2**40
    cases.append(("absurd_tensor_count", w.to_bytes(), "tensor count 1099511627776 is more than the file could hold"))
    w = small(); w.add_raw("arr", 9, struct.pack("<IQ", 4, 2**61))
    cases.append(("absurd_array_count", w.to_bytes(), 'key "arr": array count 2305843009213693952 of uint32 is past the end'))
    w = small(); w.add_raw("arr", 9, struct.pack("<IQ", 8, 2**50))
    cases.append(("absurd_string_array", w.to_bytes(), 'key "arr": array count 1125899906842624 of string is more than the file could hold'))
    w = small(); w.add_raw("s", 8, struct.pack("<Q", 2**63) + b"abc")
    cases.append(("string_past_end", w.to_bytes(), "a string value at byte"))
    w = small(); w.add("a.b", "int8", 3)
    cases.append(("duplicate_key", w.to_bytes(), 'duplicate metadata key "a.b"'))
    w = small(); w.add_tensor("t0", 0, [1], np.zeros(1, dtype="<f4"))
    cases.append(("duplicate_tensor", w.to_bytes(), 'duplicate tensor name "t0"'))
    w = small(); w.add_tensor("far", 0, [8], np.zeros(8, dtype="<f4"), offset=1 << 20, place=False)
    cases.append(("tensor_past_end", w.to_bytes(), 'tensor "far": data (offset 1048576, 32 bytes) runs past the end'))
    w = small(); w.tensors[1]["offset"] = 0
    cases.append(("tensor_overlap", w.to_bytes(), 'tensors "t0" and "t1" overlap'))
    w = GGUFWriter()
    w.add_tensor("wide", 0, [32], np.zeros(32, dtype="<f4"), offset=0)
    w.add_tensor("empty", 0, [0], b"", offset=32)
    w.add_tensor("inner", 0, [4], np.ones(4, dtype="<f4"), offset=64)
    cases.append(("tensor_overlap_across_empty", w.to_bytes(), 'tensors "wide" and "inner" overlap'))
    w = small(); w.add_tensor("huge", 0, [2**32, 2**32], b"")
    cases.append(("dims_overflow", w.to_bytes(), 'tensor "huge": the dimensions\' product overflows'))
    w = small(); w.add_tensor("big", 15, [2**62], b"")
    cases.append(("size_past_end", w.to_bytes(), 'tensor "big": data'))
    w = small(); w.tensors[1]["offset"] = 20
    cases.append(("misaligned", w.to_bytes(), 'tensor "t1": offset 20 is not a multiple of the alignment 32'))
    for name, a in (("alignment_48", 48), ("alignment_0", 0)):
        w = small(); w.add("general.alignment", "uint32", a)
        cases.append((name, w.to_bytes(), "general.alignment %d is not a power of two" % a))
    w = small(); w.add("general.alignment", "uint64", 32)
    cases.append(("alignment_u64", w.to_bytes(), "general.alignment is a uint64, not a uint32"))
    w = small(); w.add_tensor("odd", 99, [4], bytes(16))
    cases.append(("unknown_ggml_type", w.to_bytes(), 'tensor "odd": ggml type id 99 is unknown'))
    w = small(); w.add_tensor("q", 2, [33], bytes(18))
    cases.append(("partial_block", w.to_bytes(), 'tensor "q": row length 33 is not a multiple of Q4_0\'s block of 32'))
    w = small(); w.add_tensor("five", 0, [1, 1, 1, 1, 1], bytes(4))
    cases.append(("five_dims", w.to_bytes(), 'tensor "five": n_dims 5 is not 1 to 4'))
    w = small(); w.add_tensor("zero", 0, [], b"")
    cases.append(("zero_dims", w.to_bytes(), 'tensor "zero": n_dims 0 is not 1 to 4'))
    w = small(); w.add("deep", "array", ("array", [("array", [("uint8", [1])])]))
    cases.append(("nested_too_deep", w.to_bytes(), 'key "deep": arrays nested deeper than 2'))
    w = small(); w.add_raw("odd", 13, bytes(8))
    cases.append(("unknown_value_type", w.to_bytes(), 'key "odd": value type 13 is unknown'))
    w = small(); w.add_raw("arr", 9, struct.pack("<IQ", 77, 1) + bytes(8))
    cases.append(("unknown_element_type", w.to_bytes(), 'key "arr": array element type 77 is unknown'))
    w = small(); w.add_raw("flag", 7, b"\x02")
    cases.append(("bad_bool", w.to_bytes(), 'key "flag": bool value is 2, not 0 or 1'))
    return cases


def write_fixtures(out):
    os.makedirs(out, exist_ok=True)
    expect = {"good": [], "bad": []}
    for name, version, alignment in (("every_type_v3", 3, 64), ("every_type_v2", 2, None)):
        data, desc = good_file(version, alignment)
        with open(os.path.join(out, name + ".gguf"), "wb") as f:
            f.write(data)
        desc["file"] = name + ".gguf"
        expect["good"].append(desc)
    for name, data, msg in bad_files():
        with open(os.path.join(out, name + ".gguf"), "wb") as f:
            f.write(data)
        expect["bad"].append({"file": name + ".gguf", "error": msg})
    with open(os.path.join(out, "expect.json"), "w") as f:
        json.dump(expect, f, ensure_ascii=False, indent=1)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fixtures", required=True, metavar="DIR")
    write_fixtures(p.parse_args().fixtures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
