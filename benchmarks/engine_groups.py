r"""GRPO groups on the engine: private cache rows against shared prompt rows.

    python benchmarks/engine_groups.py [--prompts=32] [--rows=16] [--group=8] [--prompt_len=512]
        [--new_tokens=128] [--mean_len=48] [--slots=64] [--width=4]

``prompts`` random prompts of ``prompt_len`` tokens, each sampled ``group``
times (a GRPO group), at most ``new_tokens`` new tokens with geometric lengths
(the model and the stop-token choice of benchmarks/engine.py). Three engines
on the same sequences and keys:

* private: ``slots`` slots, each caching its whole sequence (max_len
  prompt_len + new_tokens);
* shared: the same slots and ``rows`` shared prompt rows (engine.prompts); a
  slot holds only the positions after its prompt;
* shared, same memory: as many slots as fit in the private store's bytes
  (rounded down to a multiple of 8).

Printed per engine: KV store MiB, useful tokens/s (sampled tokens over the
wall time of the whole workload, compilation excluded), prefill tokens
computed, and whether every sequence sampled the same tokens as on private
rows (log-probs: the largest difference).
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

from benchmarks.engine_model import BOS, random_model, stop_ids, turn_keys  # noqa: E402

_PROMPTS = flags.DEFINE_integer("prompts", 32, "Distinct prompts (groups).")
_ROWS = flags.DEFINE_integer("rows", 16, "Shared prompt rows (engine.prompts).")
_GROUP = flags.DEFINE_integer("group", 8, "Samples per prompt.")
_PROMPT_LEN = flags.DEFINE_integer("prompt_len", 512, "Tokens per prompt.")
_NEW = flags.DEFINE_integer("new_tokens", 128, "Most tokens a sequence may sample.")
_MEAN = flags.DEFINE_integer("mean_len", 48, "Target mean length (sets the stop tokens).")
_SLOTS = flags.DEFINE_integer("slots", 64, "Slots of the private and shared engines.")
_WIDTH = flags.DEFINE_integer("width", 4, "Multiple of the default model's width.")
_TEMP = flags.DEFINE_float("temperature", 10.0, "Sampling temperature.")


def main(_):
  from launch.common import quiet_libraries
  quiet_libraries()
  from rlpt.engine import Engine, EngineConfig
  from rlpt.sampling import SamplingParams
  cfg, _, params, model, make_ctx = random_model(_WIDTH.value)
  n, g, plen, new = _PROMPTS.value, _GROUP.value, _PROMPT_LEN.value, _NEW.value
  rng = np.random.default_rng(0)
  distinct = [[BOS] + rng.integers(0, 256, size=plen - 1).tolist() for _ in range(n)]
  prompts = [p for p in distinct for _ in range(g)]
  keys = turn_keys(len(prompts))
  sampling = SamplingParams(_TEMP.value)
  private = EngineConfig(slots=_SLOTS.value, max_len=plen + new)

  def make(ecfg, stops):
    ctx = make_ctx()
    return Engine(ecfg, ctx, model, stops), ctx

  def probe(stops):
    engine, _ = make(private, stops)
    generate = engine.generate
    engine.generate = lambda p, *a: generate(p, sampling, *a)
    return engine

  short = [p[:64] for p in distinct]
  stops, mass = stop_ids(probe, params, (short * 64)[:64], turn_keys(64, 1), _MEAN.value)
  rows = _ROWS.value
  shared = EngineConfig(slots=_SLOTS.value, max_len=plen + new, prompts=rows, prompt_len=plen - 1)
  same_memory = ((_SLOTS.value * private.cache_len - rows * shared.prompt_cache_len)
                 // shared.cache_len) // 8 * 8
  wide = EngineConfig(slots=same_memory, max_len=plen + new, prompts=rows, prompt_len=plen - 1)
  print(f"model d_model {cfg.d_model}, {cfg.num_layers} layers; {n} prompts of {plen} tokens x "
        f"{g} samples, at most {new} new tokens, {len(stops)} stop tokens (probe mass {mass:.4f})")
  print(f"{'engine':<28}{'slots':>6}{'KV MiB':>9}{'tokens/s':>10}{'mean len':>10}"
        f"{'prefilled':>11}{'same tokens':>13}{'max |dlogp|':>13}")
  want = None
  for name, ecfg in (("private", private), ("shared", shared), ("shared, same memory", wide)):
    engine, ctx = make(ecfg, stops)
    engine.warm_up(params, sampling)
    kv = engine.store_bytes
    t = time.perf_counter()
    turns = engine.generate(params, sampling, prompts, keys, new)
    wall = time.perf_counter() - t
    lengths = np.array([len(x.tokens) for x in turns])
    if want is None:
      want = turns
    same = all(np.array_equal(a.tokens, b.tokens) for a, b in zip(turns, want))
    dlogp = max(float(np.abs(a.logprobs - b.logprobs).max(initial=0)) for a, b in zip(turns, want)
                if len(a.tokens) == len(b.tokens))
    print(f"{name:<28}{ecfg.slots:>6}{kv / 2**20:>9.1f}{lengths.sum() / wall:>10.0f}"
          f"{lengths.mean():>10.1f}{engine.stats['prefill_tokens']:>11}{str(same):>13}"
          f"{dlogp:>13.2e}")


if __name__ == "__main__":
  app.run(main)
