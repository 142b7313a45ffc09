#!/usr/bin/python3
"""Write float arrays as one F32 safetensors file, for the tools that rewrite a generated
checkpoint's weights (decisive_model.py, realistic_model.py); reference.py reads them back."""

import json
import os

import numpy as np


def write(path, tensors):
    """Write tensors (name -> array, in order) to path as F32, replacing it in one rename."""
    header, offset = {}, 0
    for name, t in tensors.items():
        size = t.size * 4
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(len(raw).to_bytes(8, "little"))
        f.write(raw)
        for t in tensors.values():
            f.write(np.ascontiguousarray(t, dtype="<f4").tobytes())
    os.replace(tmp, path)
