#!/usr/bin/env python3
"""hf_baseline.py: the serving workload of `cbllm-cli bench` run through
HuggingFace transformers on a GPU, as the baseline printed beside cbllm.

The model is LlamaForCausalLM with the Llama-2-7B geometry (or --config
DIR/config.json), built directly on the GPU in bfloat16 with random weights:
the timings do not depend on the values, and nothing is downloaded.

The workload matches cbllm's: at each concurrency C, --requests N requests
with random prompt ids of length uniform in --prompt-len, max new tokens
uniform in --gen-len, sampling at temperature 0.7 / top-p 0.95, EOS never
ending a request.  transformers has no continuous batching, so the requests
run in static batches of C: prompts left-padded under an attention mask, and
each batch generates until its longest request's max; the tokens a shorter
request gets beyond its own max are not counted.

What is measured, per request: time to first token from the start of its
batch (its submission, for a client that waits for the batch); every gap
between its later tokens while it still wanted them (the same samples as
cbllm's inter-token latency); and per level tokens/s = wanted tokens / wall
time.  A stopping-criteria hook, called once per generation step after the
token is appended, synchronises the GPU and stamps the step.  Every step after
a batch's first is a decode step; with --bandwidth its floor is the weights
of one forward pass plus the K and V of every position the still-wanted rows
attend to (prompt + tokens so far), over the bandwidth -- the definition of
cbllm's floor, so that the two engines are held to the same bar.

--time-budget SECONDS stops starting batches at a level once the budget is
spent (a level overruns by at most one batch) and reports the requests that
completed.  --dry-run replaces the model by a fake generator that sleeps,
to test the workload, the statistics and the output without torch.

Exit status: 0, 1 on a failed level, 2 without torch/transformers/CUDA.
"""
import argparse
import json
import os
import random
import sys
import time

BOS = 1
PAD = 0
LLAMA2_7B = dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                 num_key_value_heads=32, intermediate_size=11008, vocab_size=32000,
                 max_position_embeddings=4096, rms_norm_eps=1e-5)


def say(msg, to_stderr=False):
    """Print one line now (the output is read while the script runs)."""
    print(msg, file=sys.stderr if to_stderr else sys.stdout, flush=True)


def parse_range(text):
    """Parse "A..B" or "A" into (lo, hi) with 1 <= lo <= hi."""
    lo, sep, hi = text.partition("..")
    lo = int(lo)
    hi = int(hi) if sep else lo
    if lo < 1 or hi < lo:
        raise argparse.ArgumentTypeError(f"takes N or A..B with 1 <= A <= B, not {text!r}")
    return lo, hi


def parse_levels(text):
    """Parse "1,4,8" into a list of positive concurrencies."""
    levels = [int(s) for s in text.split(",") if s.strip()]
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError(f"concurrency must be positive integers, not {text!r}")
    return levels


def make_requests(n, prompt_range, gen_range, vocab, seed):
    """The level's n requests: (prompt ids, max new tokens), drawn from seed."""
    rng = random.Random(seed)
    reqs = []
    for _ in range(n):
        plen = rng.randint(*prompt_range)
        prompt = [BOS] + [rng.randrange(3, vocab) for _ in range(plen - 1)]
        reqs.append((prompt, rng.randint(*gen_range)))
    return reqs


def nearest_rank(sorted_v, q):
    """The q-quantile of sorted values by nearest rank (as cbllm-cli bench)."""
    return sorted_v[int(q * (len(sorted_v) - 1) + 0.5)]


def summarise(values):
    """(mean, p50, p99) of values, 0s when there are none."""
    if not values:
        return 0.0, 0.0, 0.0
    v = sorted(values)
    return sum(v) / len(v), nearest_rank(v, 0.50), nearest_rank(v, 0.99)


def geometry(cfg):
    """(step weight bytes, KV bytes per position) of a bfloat16 Llama config dict."""
    h = cfg["hidden_size"]
    heads = cfg["num_attention_heads"]
    kvh = cfg.get("num_key_value_heads") or heads
    hd = cfg.get("head_dim") or h // heads
    per_layer = h * heads * hd + 2 * h * kvh * hd + heads * hd * h + 3 * h * cfg["intermediate_size"]
    params = cfg["num_hidden_layers"] * per_layer + cfg["vocab_size"] * h
    return 2 * params, 2 * 2 * cfg["num_hidden_layers"] * kvh * hd


class LevelStats:
    """What one concurrency level measured (seconds)."""

    def __init__(self):
        self.ttft = []
        self.itl = []
        self.steps = []       # decode step durations
        self.floors = []      # their floors, with a bandwidth
        self.tokens = 0       # wanted tokens generated
        self.done = 0         # requests completed

    def add_batch(self, batch, t0, stamps, weight_bytes, kv_per_pos, bandwidth):
        """Account a batch of (prompt, max_new) given its start and step stamps."""
        for _, want in batch:
            self.ttft.append(stamps[0] - t0)
            self.itl.extend(stamps[k] - stamps[k - 1] for k in range(1, want))
            self.tokens += want
            self.done += 1
        for k in range(1, len(stamps)):
            self.steps.append(stamps[k] - stamps[k - 1])
            if bandwidth:
                ctx = sum(len(p) + k for p, want in batch if k < want)
                self.floors.append((weight_bytes + ctx * kv_per_pos) / (bandwidth * 1e9))


class FakeGenerator:
    """--dry-run: sleeps like a model would, so that the timing path runs."""

    vocab = 32000

    def __init__(self, step_s):
        self.step_s = step_s

    def describe(self):
        """One line about the generator."""
        return f"fake generator, {self.step_s * 1e3:.2f} ms per step (dry run)"

    def generate(self, prompts, max_new):
        """Fake static-batch generation: (start time, one stamp per step)."""
        t0 = time.perf_counter()
        stamps = []
        time.sleep(self.step_s * (1 + sum(len(p) for p in prompts) / 2000))
        stamps.append(time.perf_counter())
        for _ in range(max_new - 1):
            time.sleep(self.step_s * (1 + 0.02 * len(prompts)))
            stamps.append(time.perf_counter())
        return t0, stamps


class HFGenerator:
    """LlamaForCausalLM on the GPU in bfloat16, driven by generate()."""

    def __init__(self, args):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            import torch
            import transformers
            from transformers import (GenerationConfig, LlamaConfig, LlamaForCausalLM,
                                      StoppingCriteria, StoppingCriteriaList)
        except ImportError as e:
            say(f"hf_baseline.py: needs torch and transformers ({e}); try --dry-run", True)
            sys.exit(2)
        if not torch.cuda.is_available():
            say("hf_baseline.py: torch sees no CUDA device", True)
            sys.exit(2)
        self.torch, self.transformers = torch, transformers
        self.GenerationConfig, self.StoppingCriteriaList = GenerationConfig, StoppingCriteriaList
        if args.config:
            cfg = LlamaConfig.from_pretrained(args.config)
        else:
            cfg = LlamaConfig(**LLAMA2_7B, bos_token_id=BOS, eos_token_id=2)
        self.geometry = {k: getattr(cfg, k, None) for k in
                         ("hidden_size", "num_hidden_layers", "num_attention_heads",
                          "num_key_value_heads", "intermediate_size", "vocab_size", "head_dim")}
        self.vocab = cfg.vocab_size
        self.model = self._build(LlamaForCausalLM, cfg, args.seed)
        self.StepClock = self._step_clock_class(StoppingCriteria)

    def _build(self, cls, cfg, seed):
        """The model, constructed on the GPU in bfloat16, with random weights."""
        torch = self.torch
        torch.manual_seed(seed)
        old = torch.get_default_dtype()
        torch.set_default_dtype(torch.bfloat16)
        try:
            with torch.device("cuda"):
                model = cls(cfg)
        finally:
            torch.set_default_dtype(old)
        if next(model.parameters()).dtype != torch.bfloat16:
            model = model.to(torch.bfloat16)
        # fill every weight, whatever the constructor left in it: norms 1, matrices N(0, 0.02)
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() == 1:
                    p.fill_(1.0)
                else:
                    p.normal_(0.0, 0.02)
        # EOS must never end a request: no EOS for generate (and min_new_tokens below)
        for c in (model.config, model.generation_config):
            try:
                c.eos_token_id = None
            except (AttributeError, ValueError):
                pass
        model.eval()
        torch.cuda.synchronize()
        return model

    def _step_clock_class(self, base):
        """A stopping criterion that never stops and stamps every step."""
        torch = self.torch

        class StepClock(base):
            """Called once per step after the token is appended: sync and stamp."""

            def __init__(self):
                self.stamps = []

            def __call__(self, input_ids, scores, **kwargs):
                torch.cuda.synchronize()
                self.stamps.append(time.perf_counter())
                return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

        return StepClock

    def describe(self):
        """One line about the model and the software."""
        torch = self.torch
        n = sum(p.numel() for p in self.model.parameters())
        return (f"transformers {self.transformers.__version__}, torch {torch.__version__}, "
                f"{torch.cuda.get_device_name(0)}, {n / 1e9:.2f}B parameters in bfloat16 (random), "
                f"attention {getattr(self.model.config, '_attn_implementation', '?')}")

    def generate(self, prompts, max_new):
        """One static batch, left-padded: (start time, one stamp per step)."""
        torch = self.torch
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), PAD, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
            mask[i, width - len(p):] = 1
        gc = self.GenerationConfig(do_sample=True, temperature=0.7, top_p=0.95, top_k=0,
                                   max_new_tokens=max_new, min_new_tokens=max_new,
                                   pad_token_id=PAD, bos_token_id=BOS, eos_token_id=None,
                                   use_cache=True)
        clock = self.StepClock()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = self.model.generate(input_ids=ids.cuda(), attention_mask=mask.cuda(),
                                      generation_config=gc,
                                      stopping_criteria=self.StoppingCriteriaList([clock]))
        torch.cuda.synchronize()
        if out.shape[1] != width + max_new or len(clock.stamps) != max_new:
            raise RuntimeError(f"generate stopped early: {out.shape[1] - width} tokens, "
                               f"{len(clock.stamps)} steps, wanted {max_new}")
        return t0, clock.stamps


def run_level(gen, args, C, weight_bytes, kv_per_pos):
    """Run one concurrency level; returns (LevelStats, wall seconds, cut short)."""
    reqs = make_requests(args.requests, args.prompt_len, args.gen_len, gen.vocab,
                         args.seed * 7919 + C)
    if args.warmup:
        gen.generate([[BOS] + [3] * (args.prompt_len[0] - 1)] * min(C, len(reqs)), 4)
    st = LevelStats()
    cut = False
    start = time.perf_counter()
    for b in range(0, len(reqs), C):
        if args.time_budget and b > 0 and time.perf_counter() - start >= args.time_budget:
            cut = True
            break
        batch = reqs[b:b + C]
        t0, stamps = gen.generate([p for p, _ in batch], max(w for _, w in batch))
        st.add_batch(batch, t0, stamps, weight_bytes, kv_per_pos, args.bandwidth)
    return st, time.perf_counter() - start, cut


def level_record(args, C, st, wall, cut):
    """The level as a dict with the keys of `cbllm-cli bench --json`."""
    ms = lambda v: round(v * 1e3, 3)
    ttft, itl = summarise(st.ttft), summarise(st.itl)
    step = summarise(st.steps)[1] if st.steps else None
    floor = summarise(st.floors)[1] if st.floors else None
    return {
        "mode": "transformers", "concurrency": C, "requests": st.done,
        "ttft_ms": {"mean": ms(ttft[0]), "p50": ms(ttft[1]), "p99": ms(ttft[2])},
        "itl_ms": {"mean": ms(itl[0]), "p50": ms(itl[1]), "p99": ms(itl[2])},
        "tokens_per_s": round(st.tokens / wall, 2) if wall > 0 else 0.0,
        "generated_tokens": st.tokens, "wall_s": round(wall, 3),
        "mean_batch": round(st.done / max(1, -(-st.done // C)), 2),
        "decode_step_ms": {"p50": ms(step) if step is not None else None},
        "decode_steps": len(st.steps),
        "floor_ms": {"p50": ms(floor) if floor else None},
        "x_floor": round(step / floor, 3) if step and floor else None,
        "requests_planned": args.requests, "cut_short": cut,
    }


HEADER = ("%-11s %8s %8s %8s %8s %8s %8s %10s %8s %8s %9s %9s %8s" %
          ("concurrency", "ttft_ms", "ttft_p50", "ttft_p99", "itl_ms", "itl_p50", "itl_p99",
           "tokens/s", "batch", "requests", "decode_ms", "floor_ms", "x_floor"))


def table_row(rec):
    """One line of the text table for a level record."""
    fmt = lambda v, spec: "-" if v is None else format(v, spec)
    t, i = rec["ttft_ms"], rec["itl_ms"]
    req = f"{rec['requests']}" + ("*" if rec["cut_short"] else "")
    return ("%-11d %8.1f %8.1f %8.1f %8.2f %8.2f %8.2f %10.1f %8.2f %8s %9s %9s %8s" %
            (rec["concurrency"], t["mean"], t["p50"], t["p99"], i["mean"], i["p50"], i["p99"],
             rec["tokens_per_s"], rec["mean_batch"], req, fmt(rec["decode_step_ms"]["p50"], ".3f"),
             fmt(rec["floor_ms"]["p50"], ".3f"), fmt(rec["x_floor"], ".2f")))


def parse_args(argv):
    """Command-line options."""
    ap = argparse.ArgumentParser(description="The cbllm serving workload through HuggingFace "
                                 "transformers (static batches), as a baseline.")
    ap.add_argument("--config", help="a Llama config.json (or its directory); default: Llama-2-7B geometry")
    ap.add_argument("--concurrency", type=parse_levels, default=parse_levels("1,4,8,16,32"))
    ap.add_argument("--requests", type=int, default=50, help="requests per level (default 50)")
    ap.add_argument("--prompt-len", type=parse_range, default=(50, 200), metavar="A..B")
    ap.add_argument("--gen-len", type=parse_range, default=(100, 500), metavar="A..B")
    ap.add_argument("--time-budget", type=float, default=0, metavar="SECONDS",
                    help="stop starting batches at a level after this many seconds")
    ap.add_argument("--bandwidth", type=float, default=0, metavar="GBPS",
                    help="memory bandwidth in GB/s for each decode step's floor")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-warmup", dest="warmup", action="store_false",
                    help="skip the short untimed batch before each level")
    ap.add_argument("--json", action="store_true", help="one JSON object per level")
    ap.add_argument("--dry-run", action="store_true", help="fake generator, no torch needed")
    ap.add_argument("--fake-step-ms", type=float, default=0.2, help="--dry-run step time")
    args = ap.parse_args(argv)
    if args.requests < 1:
        ap.error("--requests must be at least 1")
    if args.time_budget < 0 or args.bandwidth < 0:
        ap.error("--time-budget and --bandwidth must not be negative")
    return args


def main(argv):
    """Run every level and print the table or the JSON lines."""
    args = parse_args(argv)
    if args.dry_run:
        gen = FakeGenerator(args.fake_step_ms / 1e3)
        cfg = dict(LLAMA2_7B)
        if args.config:
            with open(args.config if args.config.endswith(".json")
                      else os.path.join(args.config, "config.json")) as f:
                cfg.update(json.load(f))
        gen.vocab = cfg["vocab_size"]
    else:
        gen = HFGenerator(args)
        cfg = gen.geometry
    weight_bytes, kv_per_pos = geometry(cfg)
    say(f"# {gen.describe()}", args.json)
    say(f"# {args.requests} requests per level, prompts {args.prompt_len[0]}..{args.prompt_len[1]}, "
        f"gen {args.gen_len[0]}..{args.gen_len[1]}, static batches of C, "
        f"{weight_bytes / 1e6:.1f} MB of weights per step, {kv_per_pos / 1024:.1f} KiB of KV per position",
        args.json)
    if not args.json:
        say(HEADER)
    status = 0
    for C in args.concurrency:
        try:
            st, wall, cut = run_level(gen, args, C, weight_bytes, kv_per_pos)
        except Exception as e:  # an out-of-memory level must not hide the others
            say(f"# concurrency {C} failed: {type(e).__name__}: {e}", True)
            status = 1
            continue
        rec = level_record(args, C, st, wall, cut)
        say(json.dumps(rec) if args.json else table_row(rec))
    if not args.json and args.time_budget:
        say("# requests marked * were cut short by --time-budget")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
