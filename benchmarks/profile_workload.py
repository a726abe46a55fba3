r"""Where rlpt's time goes on the fixed workload: a per-op profile from XLA.

    python benchmarks/profile_workload.py --part=sampler      # one generate call, 32 x 128
    python benchmarks/profile_workload.py --part=reference    # reference log-probs, 64 x 96
    python benchmarks/profile_workload.py --part=update       # one GRPO update, 64 x 96
    python benchmarks/profile_workload.py --part=update --trace_dir=/tmp/trace   # keep the trace

Runs the part once to compile and warm up, then once under ``jax.profiler``
(a Perfetto trace), and prints the XLA operations that took the most time,
each with its output shape and what it fuses, and the time by kind: matmuls
(alone or with fused element-wise work), element-wise loops, reductions and
copies/transposes. For the sampler, times are per decode step (each decode
op runs once per generated token).

Times are summed per operation; XLA's CPU runtime runs independent operations
concurrently on the cores, so the sum can exceed the wall time and an op's
time includes waiting for a core.
"""

from __future__ import annotations

import collections
import glob
import gzip
import json
import os
import re
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

_PART = flags.DEFINE_enum("part", "sampler", ["sampler", "reference", "update"], "What to profile.")
_TOP = flags.DEFINE_integer("top", 25, "Operations to list.")
_TRACE_DIR = flags.DEFINE_string("trace_dir", None, "Keep the trace here (default: a temp dir).")


def build(part: str):
  """(function of no arguments that runs the part once, its jitted callable and args,
  steps per call)."""
  import workload as W
  from flax import nnx

  from rlpt.config import OptimConfig
  from rlpt.models import Transformer
  from rlpt.rl import LossConfig
  from rlpt.sampling import Sampler, SamplingParams
  from rlpt.steps import (Counts, RLBatch, SharedPrefix, init_train_state, make_optimizer,
                          rl_train_step, sequence_logprobs)

  cfg = W.model_config()
  graphdef, params = nnx.split(Transformer(cfg, nnx.Rngs(0)))
  sampling = SamplingParams(1.0)
  data = W.prompts(0)
  if part == "sampler":
    sampler = Sampler(graphdef, cfg, W.PROMPT, W.SAMPLE_NEW, 0, ())
    fn = jax.jit(lambda p, ids, lens, key: sampler.generate(p, ids, lens, key, sampling))
    args = (params, data["sample"], np.full((W.SAMPLE_ROWS,), W.PROMPT, np.int32),
            jax.random.key(0))
    return fn, args, W.SAMPLE_NEW
  rows, length = W.GRPO_PROMPTS * W.GROUP, W.PROMPT + W.GRPO_NEW
  rng = np.random.default_rng(0)
  tokens = np.concatenate([np.repeat(data["grpo"][0], W.GROUP, axis=0),
                           rng.integers(1, W.VOCAB, size=(rows, W.GRPO_NEW))], axis=1)
  tokens = jnp.asarray(tokens.astype(np.int32))
  shared = SharedPrefix(W.PROMPT, W.GROUP)  # as benchmarks/workload.py runs it
  logprobs = jax.jit(lambda p, t: sequence_logprobs(graphdef, p, t, sampling, shared))
  if part == "reference":
    return logprobs, (params, tokens), 1
  optimizer = make_optimizer(OptimConfig(learning_rate=1e-5, grad_clip=1e9), 100)
  state = init_train_state(params, optimizer)
  loss_cfg = LossConfig(policy_loss="ppo_clip", kl_beta=0.04, kl_estimator="k3",
                        aggregation="token-mean", norm_len=W.GRPO_NEW)
  mask = jnp.asarray(np.arange(1, length)[None, :] >= W.PROMPT, jnp.float32).repeat(rows, 0)
  ref = logprobs(params, tokens)
  adv = jnp.asarray(rng.normal(size=(rows, 1)), jnp.float32) * mask
  batch = RLBatch(tokens, mask, ref, ref, adv)
  counts = Counts(jnp.float32(rows * W.GRPO_NEW), jnp.float32(rows))
  update = jax.jit(lambda s, b, c, k: rl_train_step(s, b, c, k, graphdef=graphdef,
                                                     optimizer=optimizer, loss_cfg=loss_cfg,
                                                     sampling=sampling, shared=shared))
  return update, (state, batch, counts, jnp.float32(0.04)), 1


def kind_of(ops: set[str]) -> str:
  if "dot" in ops or "convolution" in ops:
    return "matmul" if ops <= {"dot", "convolution", "parameter", "bitcast"} else "matmul+fused"
  if "reduce" in ops or "reduce-window" in ops:
    return "reduction"
  if ops & {"transpose", "copy", "concatenate"} and not ops & {"add", "multiply", "exponential"}:
    return "copy/transpose"
  return "element-wise"


def main(_):
  fn, args, steps = build(_PART.value)
  jax.block_until_ready(fn(*args))
  t = time.perf_counter()
  jax.block_until_ready(fn(*args))
  wall = time.perf_counter() - t
  trace_dir = _TRACE_DIR.value or tempfile.mkdtemp(prefix="rlpt_profile_")
  with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
    jax.block_until_ready(fn(*args))
  files = sorted(glob.glob(os.path.join(trace_dir, "**", "*.trace.json.gz"), recursive=True))
  if not files:
    raise SystemExit(f"the profiler wrote no Perfetto trace under {trace_dir}.")
  with gzip.open(files[-1]) as f:
    events = json.load(f)["traceEvents"]
  total, count = collections.Counter(), collections.Counter()
  for e in events:
    name = e.get("name", "")
    if e.get("ph") == "X" and not name.startswith(("$", "ThunkExecutor", "SlinkyThreadPool")):
      total[name] += e.get("dur", 0)
      count[name] += 1
  hlo = fn.lower(*args).compile().as_text()

  def describe(name: str) -> tuple[str, set[str]]:
    m = re.search(r"^\s*%?" + re.escape(name) + r" = (\S+) (\w+)\((.*)$", hlo, re.M)
    if not m:
      return "", set()
    shape, op = m.group(1), m.group(2)
    ops = {op}
    calls = re.search(r"calls=%([\w.\-]+)", m.group(3))
    if calls:
      body = re.search(r"^%" + re.escape(calls.group(1)) + r" .*?\n}", hlo, re.M | re.S)
      if body:
        ops = set(re.findall(r"= \S+ ([\w\-]+)\(", body.group(0))) - {"parameter", "constant"}
    return shape, ops

  per = "per decode step" if steps > 1 else "per call"
  print(f"{_PART.value}: {wall * 1e3:.1f} ms wall per call"
        + (f" ({wall / steps * 1e3:.2f} ms per decode step)" if steps > 1 else ""))
  by_kind = collections.Counter()
  rows = []
  for name, us in total.items():
    shape, ops = describe(name)
    by_kind[kind_of(ops) if ops else "runtime"] += us
    rows.append((us, name, shape, ops))
  scale = 1e3 * (steps if steps > 1 else 1)
  print(f"\ntime by kind ({per}, ms; summed over concurrently running ops):")
  for kind, us in by_kind.most_common():
    print(f"  {kind:15s} {us / scale:9.3f}")
  print(f"\ntop {_TOP.value} operations ({per}, ms):")
  for us, name, shape, ops in sorted(rows, reverse=True)[:_TOP.value]:
    fused = ",".join(sorted(ops - {"bitcast"}))[:48]
    print(f"  {us / scale:9.3f}  {name[:28]:28s} {shape[:34]:34s} {fused}")
  if _TRACE_DIR.value:
    print(f"\ntrace: {files[-1]} (open in https://ui.perfetto.dev)")


if __name__ == "__main__":
  app.run(main)
