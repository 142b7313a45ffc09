#!/usr/bin/python3
"""Check reference.py's mixture-of-experts MLP by two computations written apart from it.

    moe_check.py [--workdir DIR]

Prints TAP lines; the exit status is 1 when a check failed.

  routing   For random router and expert weights and random rows h (several expert
            counts, k, renormalised or not, logits scaled from flat to sharp), and for
            rows whose probabilities tie exactly, reference.moe_mlp against a dense
            computation: every expert's output for every row, and a weight matrix that
            is p_e where e ranks below k (its rank: the number of experts with a larger
            p, or an equal p and a lower index) and 0 elsewhere, divided by its row sums
            when renormalised; out = sum over e of weight_e * expert_e(h).
  wiring    gen_model.py's qwen3_moe and mixtral checkpoints (qwen3_moe with a dense
            layer among sparse ones) whose experts are all made copies of one: renormalised
            weights sum to 1, so each sparse layer is that one MLP, and reference.py's
            logits must equal those of the dense checkpoint (qwen3, llama) that holds it
            as its MLP and the same other weights.  That checks the tensor names, which
            layers are sparse, and that the attention and norms are the family's.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import reference  # noqa: E402
import safetensors_f32  # noqa: E402

PROMPT = "1 15 267 42 300 7 99 180 3 250 61 128"


def silu(x):
    return x * (1.0 / (1.0 + np.exp(-x)))


def dense_moe(router, gate, up, down, k, renorm, h):
    """The MoE MLP of rows h computed densely: all experts on all rows, then masked."""
    logits = np.einsum("eh,th->te", router, h)
    p = np.exp(logits - logits.max(axis=1)[:, None])
    p = p / p.sum(axis=1)[:, None]
    n = p.shape[1]
    idx = np.arange(n)
    # rank[t, e]: experts j with p_j > p_e, or p_j == p_e and j < e
    above = (p[:, None, :] > p[:, :, None]) | (
        (p[:, None, :] == p[:, :, None]) & (idx[None, None, :] < idx[None, :, None]))
    rank = above.sum(axis=2)
    wts = np.where(rank < k, p, 0.0)
    if renorm:
        wts = wts / wts.sum(axis=1)[:, None]
    g = np.einsum("eih,th->eti", np.stack(gate), h)
    u = np.einsum("eih,th->eti", np.stack(up), h)
    y = np.einsum("ehi,eti->eth", np.stack(down), silu(g) * u)
    return np.einsum("te,eth->th", wts, y), rank


def routing_checks(tap):
    rng = np.random.default_rng(11)
    cases = [(8, 2, True, 2.0), (8, 2, False, 2.0), (8, 1, True, 1.0), (4, 4, False, 1.0),
             (16, 4, True, 6.0), (3, 2, True, 0.1), (8, 7, False, 3.0)]
    hidden, width, rows = 24, 10, 40
    for n, k, renorm, scale in cases:
        router = rng.standard_normal((n, hidden)) * scale / np.sqrt(hidden)
        gate = [rng.standard_normal((width, hidden)) / np.sqrt(hidden) for _ in range(n)]
        up = [rng.standard_normal((width, hidden)) / np.sqrt(hidden) for _ in range(n)]
        down = [rng.standard_normal((hidden, width)) / np.sqrt(width) for _ in range(n)]
        h = rng.standard_normal((rows, hidden))
        ex = reference.Experts(router, gate, up, down, k, renorm)
        got = reference.moe_mlp(ex, h, reference.silu, 0, np.arange(rows))
        want, _ = dense_moe(router, gate, up, down, k, renorm, h)
        err = np.abs(got - want).max() / np.abs(want).max()
        tap.check(err < 1e-12, "routing: %d experts, k %d, %s, scale %g (rel err %.2g)"
                  % (n, k, "renormalised" if renorm else "raw", scale, err))
    # exact ties: router rows repeated, so their logits are bit-identical and p ties
    n, k = 6, 2
    base = rng.standard_normal((3, hidden)) / np.sqrt(hidden)
    router = base[[0, 1, 0, 2, 1, 0]]  # experts 0, 2 and 5 tie, 1 and 4 tie
    gate = [rng.standard_normal((width, hidden)) for _ in range(n)]
    up = [rng.standard_normal((width, hidden)) for _ in range(n)]
    down = [rng.standard_normal((hidden, width)) for _ in range(n)]
    h = rng.standard_normal((rows, hidden))
    ex = reference.Experts(router, gate, up, down, k, True)
    chosen = reference.route(ex, h)[0]
    _, rank = dense_moe(router, gate, up, down, k, True, h)
    want = np.argsort(rank, axis=1)[:, :k]
    tap.check(np.array_equal(chosen, want),
              "routing: exact ties choose the lower expert index first")
    got = reference.moe_mlp(ex, h, reference.silu, 0, np.arange(rows))
    want, _ = dense_moe(router, gate, up, down, k, True, h)
    err = np.abs(got - want).max() / np.abs(want).max()
    tap.check(err < 1e-12, "routing: exact ties, outputs (rel err %.2g)" % err)


def run(*args):
    subprocess.run([sys.executable] + [str(a) for a in args], check=True,
                   stdout=subprocess.DEVNULL)


def logits(model_dir):
    out = subprocess.run([sys.executable, os.path.join(HERE, "reference.py"), model_dir,
                          "--logits", "--prompt-ids", PROMPT], check=True,
                         capture_output=True, text=True).stdout
    return np.array([[float(v) for v in line.split()] for line in out.splitlines()])


def flatten_experts(src, dense, family, sparse_layers):
    """Make src's experts copies of expert 0 (written back to src) and write dense: src
    as a dense checkpoint with expert 0 as every layer's MLP."""
    cfg = json.load(open(os.path.join(src, "config.json")))
    w = {k: v.astype(np.float32) for k, v in reference.read_safetensors(
        os.path.join(src, "model.safetensors")).items()}
    if family == "mixtral":
        block, names = "block_sparse_moe", (("w1", "gate_proj"), ("w3", "up_proj"),
                                            ("w2", "down_proj"))
        n, width = cfg["num_local_experts"], cfg["intermediate_size"]
        dense_cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                     "intermediate_size": width}
    else:
        block, names = "mlp", (("gate_proj", "gate_proj"), ("up_proj", "up_proj"),
                               ("down_proj", "down_proj"))
        n, width = cfg["num_experts"], cfg["moe_intermediate_size"]
        dense_cfg = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
                     "intermediate_size": width}
    out = dict(w)
    dense_w = {name: t for name, t in w.items()
               if ".experts." not in name and not name.endswith(block + ".gate.weight")}
    for i in sparse_layers:
        p = "model.layers.%d.%s." % (i, block)
        for e in range(n):
            for moe_name, _ in names:
                out["%sexperts.%d.%s.weight" % (p, e, moe_name)] = \
                    w["%sexperts.0.%s.weight" % (p, moe_name)]
        for moe_name, mlp_name in names:
            dense_w["model.layers.%d.mlp.%s.weight" % (i, mlp_name)] = \
                w["%sexperts.0.%s.weight" % (p, moe_name)]
    safetensors_f32.write(os.path.join(src, "model.safetensors"), out)
    os.makedirs(dense, exist_ok=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(src, f), os.path.join(dense, f))
    drop = ("num_experts", "num_local_experts", "num_experts_per_tok", "moe_intermediate_size",
            "norm_topk_prob", "decoder_sparse_step", "mlp_only_layers", "output_router_logits",
            "router_aux_loss_coef")
    cfg = {k: v for k, v in cfg.items() if k not in drop}
    cfg.update(dense_cfg)
    with open(os.path.join(dense, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    safetensors_f32.write(os.path.join(dense, "model.safetensors"), dense_w)


def wiring_checks(tap, work):
    geo = ["--hidden", "64", "--layers", "3", "--heads", "4", "--kv-heads", "2", "--vocab", "400"]
    cases = [
        # the dense layer 1 is as wide as the experts, so the dense model has one width
        ("qwen3_moe", ["--family", "qwen3_moe", "--head-dim", "16", "--moe-intermediate", "32",
                       "--intermediate", "32", "--mlp-only-layers", "1", "--seed", "3"], [0, 2]),
        ("qwen3_moe-step2", ["--family", "qwen3_moe", "--head-dim", "16", "--intermediate",
                             "32", "--decoder-sparse-step", "2", "--seed", "4"], [1]),
        ("mixtral", ["--family", "mixtral", "--intermediate", "32", "--seed", "5"], [0, 1, 2]),
    ]
    for name, args, sparse in cases:
        moe_dir, dense_dir = os.path.join(work, name), os.path.join(work, name + "-dense")
        run(os.path.join(HERE, "gen_model.py"), moe_dir, *(geo + args))
        cfg = json.load(open(os.path.join(moe_dir, "config.json")))
        flatten_experts(moe_dir, dense_dir, cfg["model_type"], sparse)
        a, b = logits(moe_dir), logits(dense_dir)
        err = np.abs(a - b).max() / np.abs(b).max()
        tap.check(err < 1e-12, "wiring: %s with equal experts is its dense model (rel err %.2g)"
                  % (name, err))


class Tap:
    def __init__(self):
        self.n, self.failed = 0, 0

    def check(self, ok, desc):
        self.n += 1
        self.failed += not ok
        print("%s %d - %s" % ("ok" if ok else "not ok", self.n, desc))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workdir", help="where the wiring checks' checkpoints go (default: a "
                   "temporary directory, removed)")
    a = p.parse_args(argv)
    tap = Tap()
    routing_checks(tap)
    if a.workdir:
        os.makedirs(a.workdir, exist_ok=True)
        wiring_checks(tap, a.workdir)
    else:
        with tempfile.TemporaryDirectory() as work:
            wiring_checks(tap, work)
    print("1..%d" % tap.n)
    return 1 if tap.failed else 0


if __name__ == "__main__":
    sys.exit(main())
