#!/usr/bin/python3
"""What a sequence costs in cache memory, from a GGUF file's metadata, and how many fit.

    bench/hybrid_memory.py [--context 4096] [--budget-gib 4] [--kv-bytes 2] FILE.gguf ...

For each file (a qwen35 hybrid or any attention-only architecture), computed from its keys, not
measured:
  - the linear-attention state of one sequence, as cbllm's state cache holds it (float32; the
    same sum as its state_cache_slot_bytes): 4 bytes x linear layers x ((conv_kernel - 1) x
    conv channels + value heads x (key dim x value dim + 32 x (key dim + value dim + 1))),
    the conv channels 2 x key heads x key dim + value heads x value dim, and the 32 rows the
    rows of the chunked delta rule's chunk under way (STATE_CHUNK_ROWS) (ssm.conv_kernel, ssm.group_count, ssm.state_size,
    ssm.time_step_rank, ssm.inner_size);
  - K and V of one position: attention layers x KV heads x (key_length + value_length) x
    --kv-bytes (2: cbllm's default f16 cache on the CPU);
  - one sequence of --context tokens (its state and its context's K and V) and how many such
    sequences a cache of --budget-gib GiB holds (weights and activations aside).
A qwen35 file's linear layers are attention.recurrent_layers where it has them, else every
layer i with (i + 1) % full_attention_interval != 0, as llama.cpp reads them; any
nextn_predict_layers at the end of block_count are not decoder layers.  Prints a Markdown table.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "tools"))
from gguf_meta import read_meta  # noqa: E402

CHUNK_ROWS = 32  # src/kv/state_cache.h's STATE_CHUNK_ROWS: the rows kept of a delta-rule chunk


def geometry(meta):
    """(name, attention layers, linear layers, state bytes per sequence at 4 bytes an element,
    K and V elements per position) of a file's metadata."""
    arch = meta["general.architecture"]

    def key(k, default=None):
        v = meta.get("%s.%s" % (arch, k), default)
        if v is None:
            raise SystemExit("hybrid_memory.py: %s.%s is missing" % (arch, k))
        return v
    n_layers = key("block_count") - key("nextn_predict_layers", 0)
    kv_heads = key("attention.head_count_kv")
    if isinstance(kv_heads, list):  # per layer
        kv_heads = max(kv_heads)
    head_dim = key("attention.key_length", key("embedding_length") // key("attention.head_count"))
    kv_elems = kv_heads * (head_dim + key("attention.value_length", head_dim))
    n_linear, state = 0, 0
    if arch == "qwen35":
        rec = meta.get("qwen35.attention.recurrent_layers")
        if rec is None:
            every = key("full_attention_interval")
            rec = [(i + 1) % every != 0 for i in range(n_layers)]
        n_linear = sum(1 for r in rec[:n_layers] if r)
        kern, dk = key("ssm.conv_kernel"), key("ssm.state_size")
        nk, nv = key("ssm.group_count"), key("ssm.time_step_rank")
        dv = key("ssm.inner_size") // nv
        state = 4 * n_linear * ((kern - 1) * (2 * nk * dk + nv * dv) +
                                nv * (dk * dv + CHUNK_ROWS * (dk + dv + 1)))
    return arch, n_layers - n_linear, n_linear, state, kv_elems


def mb(n):
    return "%.2f MB" % (n / 1e6)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--context", type=int, default=4096)
    ap.add_argument("--budget-gib", type=float, default=4.0)
    ap.add_argument("--kv-bytes", type=int, default=2, help="bytes of a cached K or V element")
    a = ap.parse_args()
    budget = int(a.budget_gib * (1 << 30))
    print("| file (architecture) | attention layers | linear layers | state per sequence | "
          "K and V per token (%d-byte cache) | a %d-token sequence | sequences in %g GiB |"
          % (a.kv_bytes, a.context, a.budget_gib))
    print("|---|---|---|---|---|---|---|")
    fits = []
    for path in a.files:
        arch, n_attn, n_lin, state, kv_elems = geometry(read_meta(path))
        kv_tok = n_attn * kv_elems * a.kv_bytes
        seq = state + a.context * kv_tok
        fits.append(budget // seq)
        print("| %s (%s) | %d | %d | %s (%d bytes) | %.1f KB (%d bytes) | %s | %d |"
              % (os.path.basename(path), arch, n_attn, n_lin, mb(state), state, kv_tok / 1e3,
                 kv_tok, mb(seq), budget // seq))
    if len(fits) == 2 and min(fits) > 0:
        print("\n%s holds %.1fx the sequences of %s at %d tokens each."
              % (os.path.basename(a.files[0]), fits[0] / fits[1], os.path.basename(a.files[1]),
                 a.context))


if __name__ == "__main__":
    main()
