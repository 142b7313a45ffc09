#!/usr/bin/python3
"""Make a gen_model.py checkpoint decide its next token the way a trained model does.

    decisive_model.py MODEL_DIR [--signal 0.5] [--seed 1]

A random model's logits are nearly flat: the gap between its two best tokens is often a few
percent of the largest logit, so two correct implementations whose roundings differ by that
much (8-bit activations, say) choose different tokens within a few steps and then part ways.
Trained models are decisive almost everywhere.  This rewrites MODEL_DIR/model.safetensors
(an untied F32 checkpoint from gen_model.py) so that it is too, while every layer still
shapes the output: the LM head becomes

    lm_head = signal * sqrt(hidden) * (embed rows of a random permutation) + (1 - signal) * lm_head

so each token has a strong successor pi(token) that the residual stream's copy of the current
embedding points at, and the layers' contributions (attention over the context, the MLP) move
the logits of everything else.  Greedy decoding then follows pi most of the time, and the
margins exceed quantization noise by a wide factor.  Only the LM head changes.
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402
import safetensors_f32  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model_dir")
    p.add_argument("--signal", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args(argv)
    path = os.path.join(a.model_dir, "model.safetensors")
    t = reference.read_safetensors(path)
    if "lm_head.weight" not in t or any(v != "F32" for v in reference.DTYPES.values()):
        raise SystemExit("decisive_model.py: needs an untied F32 checkpoint (gen_model.py --dtype f32)")
    emb = t["model.embed_tokens.weight"]
    vocab, hidden = emb.shape
    perm = np.random.default_rng(a.seed).permutation(vocab)
    # row j of the head is the embedding of the token whose successor is j, scaled to unit rows
    succ = emb[np.argsort(perm)] / np.sqrt((emb ** 2).mean(axis=1, keepdims=True))[np.argsort(perm)]
    head = a.signal * succ + (1 - a.signal) * t["lm_head.weight"] * np.sqrt(hidden)
    t["lm_head.weight"] = head / np.sqrt(hidden)
    safetensors_f32.write(path, t)


if __name__ == "__main__":
    main()
