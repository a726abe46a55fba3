r"""Sampler fast paths on a small model: each switch alone and all combined.

    python benchmarks/sampler_speed.py [--prompts=2] [--group=16] [--prompt_len=96]
        [--new_tokens=64] [--gamma=4] [--distill_steps=60]

Target: the default model config (d_model 128, 4 layers, 4 heads, 2 kv heads,
head_dim 32, mlp 384, vocab 259), random init. Draft: 1 layer, d_model 64,
distilled from the target (forward KL) on the target's own samples for
``distill_steps`` steps, so the acceptance rate is a trained draft's.

Workload: ``prompts`` random prompts of ``prompt_len`` tokens, ``group``
samples each (a GRPO group), ``new_tokens`` generated per row (no stop
tokens, temperature 1). Columns: decode tokens/s (generated tokens / wall
time of a whole generate call, prefill included, compile excluded; best of
2), prefill time for one group of ``group`` rows, cache bytes (target +
draft, as allocated), sampler weight bytes, acceptance rate.
Runs in about 2-3 minutes on 2 CPU cores (mostly compilation).
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

_PROMPTS = flags.DEFINE_integer("prompts", 2, "Distinct prompts (groups).")
_GROUP = flags.DEFINE_integer("group", 16, "Samples per prompt.")
_PROMPT_LEN = flags.DEFINE_integer("prompt_len", 96, "Prompt tokens (BOS included).")
_NEW = flags.DEFINE_integer("new_tokens", 64, "Tokens generated per row.")
_GAMMA = flags.DEFINE_integer("gamma", 4, "Draft tokens per verification.")
_DISTILL = flags.DEFINE_integer("distill_steps", 60, "Draft distillation steps.")

PAD, BOS = 256, 257


def _time(fn, reps=2):
  jax.block_until_ready(fn())  # compile + warm-up
  best = float("inf")
  for _ in range(reps):
    t = time.perf_counter()
    out = jax.block_until_ready(fn())
    best = min(best, time.perf_counter() - t)
  return best, out


def _bytes_of(shapes) -> int:
  return sum(int(np.prod(x.shape)) * x.dtype.itemsize for x in jax.tree.leaves(shapes))


def main(_):
  from launch.common import quiet_libraries
  quiet_libraries()  # orbax / XLA INFO lines would bury the figures
  from flax import nnx

  from rlpt.config import OptimConfig
  from rlpt.distill import DraftDistiller
  from rlpt.models import ModelConfig, Transformer
  from rlpt.rollout import build_sequences
  from rlpt.sampling import Sampler, SamplingParams
  from rlpt.sampling.fast import FastSampler, FlatLayout
  from rlpt.sampling.sampler import SampleOutput
  from rlpt.sampling.prefix import PrefixLayout
  from rlpt.sampling.quant import quantize_params, tree_bytes
  from rlpt.sampling.speculative import SpeculativeSampler
  from rlpt.steps import make_optimizer

  p, g, plen, n_new, gamma = _PROMPTS.value, _GROUP.value, _PROMPT_LEN.value, _NEW.value, _GAMMA.value
  cfg = ModelConfig()
  dcfg = ModelConfig(d_model=64, num_layers=1, num_heads=2, num_kv_heads=1, head_dim=32,
                     mlp_dim=192)
  graphdef, params = nnx.split(Transformer(cfg, nnx.Rngs(0)))
  dgraph, dparams = nnx.split(Transformer(dcfg, nnx.Rngs(1)))
  sampling = SamplingParams(1.0)
  rng = np.random.default_rng(0)
  prompts = rng.integers(0, 256, size=(p, plen)).astype(np.int32)
  prompts[:, 0] = BOS
  lengths = np.full((p,), plen, np.int32)
  rep_prompts, rep_lengths = np.repeat(prompts, g, 0), np.repeat(lengths, g)

  # Distill the draft on the target's own samples (short prompts, fresh each step).
  t0 = time.perf_counter()
  distiller = DraftDistiller(dgraph, dparams, graphdef,
                             make_optimizer(OptimConfig(learning_rate=3e-3), _DISTILL.value),
                             steps=1)
  teacher = Sampler(graphdef, cfg, 16, 48, PAD, ())
  key = jax.random.key(0)
  metrics = {}
  for step in range(_DISTILL.value):
    if step % 20 == 0:  # new samples every 20 steps
      ids = rng.integers(0, 256, size=(32, 16)).astype(np.int32)
      ids[:, 0] = BOS
      lens = rng.integers(2, 17, size=32).astype(np.int32)
      key, sub = jax.random.split(key)
      out = teacher.generate(params, ids, lens, sub, sampling)
      toks, logp, n = map(np.asarray, out)
      seq = build_sequences(ids, lens, toks, n, logp, PAD)
    metrics = distiller.update(params, seq.tokens, seq.loss_mask)
  dparams = distiller.params
  print(f"draft distilled in {time.perf_counter() - t0:.0f}s: kl {metrics['distill/kl']:.3f}, "
        f"expected acceptance {metrics['distill/acceptance']:.3f}, "
        f"top-1 agreement {metrics['distill/top1_agreement']:.3f}")

  qparams, qdparams = quantize_params(params), quantize_params(dparams)
  rows = []

  def add(name, generate, layout, weights, draft_weights=None):
    t, out = _time(generate)
    sample, stats = (out, None) if isinstance(out, SampleOutput) else out
    n_tok = int(np.asarray(sample.lengths).sum())
    group_p, group_l = (prompts[:1], lengths[:1]) if layout.group_size > 1 else (
        rep_prompts[:g], rep_lengths[:g])
    room = n_new + (gamma + 1 if stats is not None else 1)
    models = [(graphdef, cfg, params)] + ([(dgraph, dcfg, dparams)] if stats is not None else [])
    prefill = jax.jit(lambda pr, ln: [layout.prefill(gd, c, w, pr, ln, room)
                                      for gd, c, w in models])
    t_pre, _ = _time(lambda: prefill(jnp.asarray(group_p), jnp.asarray(group_l)))
    all_p = (prompts, lengths) if layout.group_size > 1 else (rep_prompts, rep_lengths)
    cache = _bytes_of(jax.eval_shape(prefill, jnp.asarray(all_p[0]), jnp.asarray(all_p[1])))
    wbytes = tree_bytes(weights) + (tree_bytes(draft_weights) if draft_weights is not None else 0)
    acc = f"{stats.acceptance_rate:.2f}" if stats is not None else "-"
    rows.append((name, n_tok / t, t_pre * 1e3, cache / 2**20, wbytes / 2**20, acc))
    print(f"  {name}: {n_tok / t:.0f} tok/s", flush=True)

  base = Sampler(graphdef, cfg, plen, n_new, PAD, ())
  add("Sampler (reference)", lambda: base.generate(params, rep_prompts, rep_lengths, jax.random.key(1), sampling),
      FlatLayout(), params)
  flat = FastSampler(graphdef, cfg, plen, n_new, PAD, ())
  add("FastSampler fp32", lambda: flat.generate(params, rep_prompts, rep_lengths, jax.random.key(1), sampling),
      FlatLayout(), params)
  add("int8 weights", lambda: flat.generate(qparams, rep_prompts, rep_lengths, jax.random.key(1), sampling),
      FlatLayout(), qparams)
  kv8 = FastSampler(graphdef, cfg, plen, n_new, PAD, (), FlatLayout(kv_int8=True))
  add("int8 KV cache", lambda: kv8.generate(params, rep_prompts, rep_lengths, jax.random.key(1), sampling),
      kv8.layout, params)
  shared = FastSampler(graphdef, cfg, plen, n_new, PAD, (), PrefixLayout(g))
  add(f"prefix-shared (G={g})", lambda: shared.generate(params, prompts, lengths, jax.random.key(1), sampling),
      shared.layout, params)
  spec = SpeculativeSampler(graphdef, cfg, dgraph, dcfg, plen, n_new, PAD, (), gamma)
  add(f"speculative (gamma={gamma})",
      lambda: spec.generate(params, dparams, rep_prompts, rep_lengths, jax.random.key(1), sampling),
      spec.layout, params, dparams)
  combo = SpeculativeSampler(graphdef, cfg, dgraph, dcfg, plen, n_new, PAD, (), gamma,
                             PrefixLayout(g, kv_int8=True))
  add("all combined",
      lambda: combo.generate(qparams, qdparams, prompts, lengths, jax.random.key(1), sampling),
      combo.layout, qparams, qdparams)

  print(f"\n{p} prompts x {g} samples, prompt {plen} tokens, {n_new} new tokens, "
        f"{jax.devices()[0].platform}, {os.cpu_count()} cpus\n")
  print("| path | decode tok/s | prefill of one group (ms) | cache MiB | weights MiB | acceptance |")
  print("|---|---|---|---|---|---|")
  for name, tps, pre, cache, w, acc in rows:
    print(f"| {name} | {tps:.0f} | {pre:.1f} | {cache:.2f} | {w:.2f} | {acc} |")


if __name__ == "__main__":
  app.run(main)
