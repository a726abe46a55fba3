r"""The continuous-batching engine against the static sampler, on the same sequences.

    python benchmarks/engine.py [--sequences=256] [--slots=64] [--new_tokens=384]
        [--mean_len=80] [--chunk_steps=16] [--width=4] [--temperature=10]
        [--prefill_len=64] [--prefill_rows=0] [--repeats=3]

Model: the default config at ``width`` times its width (d_model 128 * width,
heads 4 * width, kv heads 2 * width, mlp 384 * width; 4 layers, head_dim 32,
vocab 259), random init, sampled at ``temperature`` 10: at 1 a random-init
model is near-deterministic (its top token has p ~ 1: it copies its context),
at 10 its next-token distribution is near-uniform (entropy 5.52 of ln 259 =
5.56 nats at width 4), so a fixed stop set gives geometric lengths.

Long tail: ``sequences`` prompts of 8-64 random tokens. Stop tokens are picked
from the model's own token frequencies (a probe decode of the first 64
prompts without stops) so that
a sequence stops at each step with probability about 1 / ``mean_len``:
geometric lengths, capped at ``new_tokens``. Printed: length mean and
max/mean, then for each path useful tokens/s (sampled tokens, stop tokens
included, over the wall time of the whole workload, prefill and host work
included, compilation excluded: each path compiles first, then the paths
are timed ``repeats`` times alternately, so that the machine's drift over
the run falls on each; median [min-max], and the engine's ratios run by
run), the share of decode row-steps that were useful, compiled programs,
and the KV bytes each path holds. The static path is ``rlpt.sampling.Sampler``
(the default plain sampler, decode phases as the trainer picks them) in
batches of ``slots`` rows, each waiting for its slowest row. Never-idle: the
engine decoding ``slots`` sequences of 128 tokens with no stop token, every
decode row-step counted as useful over its whole wall time (prefill and host
included): the rate the long tail would reach if no slot ever idled.
Host overhead: the engine's wall time outside waits for the device, as a
share of its step time.
"""

import collections
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

from benchmarks.engine_model import BOS, PAD, random_model, stop_ids, turn_keys  # noqa: E402

_SEQS = flags.DEFINE_integer("sequences", 256, "Long-tail sequences.")
_SLOTS = flags.DEFINE_integer("slots", 64, "Engine slots (and the static sampler's batch).")
_NEW = flags.DEFINE_integer("new_tokens", 384, "Most tokens a sequence may sample.")
_MEAN = flags.DEFINE_integer("mean_len", 80, "Target mean length (sets the stop tokens).")
_CHUNK = flags.DEFINE_integer("chunk_steps", 16, "Engine decode steps per chunk.")
_WIDTH = flags.DEFINE_integer("width", 4, "Multiple of the default model's width.")
_TEMP = flags.DEFINE_float("temperature", 10.0, "Sampling temperature of both paths.")
_PREFILL_LEN = flags.DEFINE_integer("prefill_len", 64, "Engine tokens per prefill row.")
_PREFILL_ROWS = flags.DEFINE_integer("prefill_rows", 0, "Engine rows per prefill call (0: slots // 4).")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed runs of each path, taken alternately.")

def _prompts(n, seed=0):
  rng = np.random.default_rng(seed)
  return [[BOS] + rng.integers(0, 256, size=k - 1).tolist() for k in rng.integers(8, 65, size=n)]


def _static(graphdef, cfg, params, prompts, keys, stops, slots, new_tokens):
  """(run: a timed pass over the prompts -> (lengths, wall), programs, KV bytes)."""
  from rlpt.device import ProgramPool
  from rlpt.device.programs import jit_sampler
  from rlpt.sampling import Sampler, SamplingParams
  from rlpt.sampling.sampler import auto_decode_phases
  from rlpt.sharding import SAMPLE_RULES, make_mesh, state_shardings
  mesh = make_mesh({"data": -1})
  width = -(-max(map(len, prompts)) // 16) * 16
  sampler = Sampler(graphdef, cfg, width, new_tokens, PAD, stops,
                    decode_phases=auto_decode_phases(new_tokens))
  pool = ProgramPool()
  fn = jit_sampler(pool, sampler, SamplingParams(_TEMP.value), state_shardings(params, mesh, SAMPLE_RULES),
                   mesh, SAMPLE_RULES)

  def run():
    t, lengths = time.perf_counter(), []
    for b in range(0, len(prompts), slots):
      batch = prompts[b:b + slots]
      ids = np.full((slots, width), PAD, np.int32)
      n = np.ones(slots, np.int32)
      ids[:, 0] = BOS
      for i, p in enumerate(batch):
        ids[i, :len(p)], n[i] = p, len(p)
      out = fn(params, ids, n, keys[b])
      lengths += np.asarray(out.lengths)[:len(batch)].tolist()
    return np.asarray(lengths), time.perf_counter() - t

  run()                         # compiles
  kv = slots * (width + new_tokens) * cfg.num_layers * 2 * cfg.num_kv_heads * cfg.head_dim * 4
  return run, len(pool), kv


def _timed(engine, params, prompts, keys, new_tokens):
  t = time.perf_counter()
  turns = engine.generate(params, prompts, keys, new_tokens)
  return turns, time.perf_counter() - t


def _spread(x, digits=0):
  return f"{np.median(x):.{digits}f} [{min(x):.{digits}f}-{max(x):.{digits}f}]"


def main(_):
  from launch.common import quiet_libraries
  quiet_libraries()
  from rlpt.engine import Engine, EngineConfig
  from rlpt.sampling import SamplingParams
  cfg, graphdef, params, model, make_ctx = random_model(_WIDTH.value)
  slots, new = _SLOTS.value, _NEW.value
  ecfg = EngineConfig(slots=slots, max_len=64 + new, chunk_steps=_CHUNK.value,
                      prefill_len=_PREFILL_LEN.value, prefill_rows=_PREFILL_ROWS.value)
  ctxs, sampling = [], SamplingParams(_TEMP.value)

  def make(stops):
    ctxs.append(make_ctx())
    engine = Engine(ecfg, ctxs[-1], model, stops if stops is not None else chosen)
    generate, warm_up = engine.generate, engine.warm_up
    engine.generate = lambda params, *args: generate(params, sampling, *args)
    engine.warm_up = lambda params: warm_up(params, sampling)
    engine.warm_up(params)       # compiles every program
    return engine

  prompts, keys = _prompts(_SEQS.value), turn_keys(_SEQS.value)
  chosen, mass = stop_ids(make, params, prompts, turn_keys(64, 1), _MEAN.value)
  engine, e_programs = make(None), len(ctxs[-1].programs)
  static, s_programs, s_kv = _static(graphdef, cfg, params, prompts, keys, chosen, slots, new)
  busy = make(())
  rates = {"engine": [], "static": [], "never-idle": []}
  for _ in range(_REPEATS.value):   # alternately, so that the machine's drift hits each path
    before = collections.Counter(engine.stats)
    turns, e_wall = _timed(engine, params, prompts, keys, new)
    st = collections.Counter(engine.stats)
    st.subtract(before)
    lengths = np.array([len(t.tokens) for t in turns])
    rates["engine"].append(lengths.sum() / e_wall)
    s_len, s_wall = static()
    rates["static"].append(s_len.sum() / s_wall)
    # Every slot-step as if useful: the rate of an engine whose slots never idle.
    steps = busy.stats["slot_steps"]
    _, b_wall = _timed(busy, params, prompts[:slots], keys[:slots], 128)
    rates["never-idle"].append((busy.stats["slot_steps"] - steps) / b_wall)
  print(f"model d_model {cfg.d_model}, {cfg.num_layers} layers, {cfg.num_heads} heads; "
        f"{len(prompts)} sequences, {len(chosen)} stop tokens (probe mass {mass:.4f}); "
        f"{_REPEATS.value} runs of each path, alternately")
  for name, x in (("engine", lengths), ("static", s_len)):
    print(f"{name} lengths: mean {x.mean():.1f}, max {x.max()}, max/mean {x.max() / x.mean():.2f}")
  e_kv = slots * ecfg.cache_len * cfg.num_layers * 2 * cfg.num_kv_heads * cfg.head_dim * 4
  print(f"{'path':<12}{'tokens/s: median [min-max]':>28}{'useful steps':>14}{'programs':>10}"
        f"{'KV MiB':>8}")
  print(f"{'static':<12}{_spread(rates['static']):>28}"
        f"{s_len.sum() / (-(-len(prompts) // slots) * slots * new):>14.2f}{s_programs:>10}"
        f"{s_kv / 2**20:>8.1f}")
  print(f"{'engine':<12}{_spread(rates['engine']):>28}{lengths.sum() / st['slot_steps']:>14.2f}"
        f"{e_programs:>10}{e_kv / 2**20:>8.1f}")
  print(f"{'never-idle':<12}{_spread(rates['never-idle']):>28}{1.0:>14.2f}")
  ratio = lambda a, b: np.asarray(rates[a]) / np.asarray(rates[b])
  print(f"engine / static, run by run: {_spread(ratio('engine', 'static'), 2)}x; engine / "
        f"never-idle: {_spread(ratio('engine', 'never-idle'), 2)}; host overhead "
        f"{1 - st['device_s'] / st['step_s']:.3f} of step time "
        f"({st['decode_chunks']} chunks, {st['prefill_calls']} prefill calls)")


if __name__ == "__main__":
  app.run(main)
