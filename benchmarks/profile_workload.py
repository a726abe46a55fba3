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

The profile runs on one core with single-threaded operations (one XLA device,
pinned), the per-device program of benchmarks/workload.py's layout at twice
its rows, so each operation's time is its own. It ends with the ceiling
analysis: the matmuls' FLOPs (from the compiled HLO) and their rate, the time
outside matmuls, and the share of the matmul roofline (a 1024^3 matmul on this
core, measured in the same run) reached now and if everything outside the
matmuls took no time. ``--all_cores`` profiles one device on every core
instead (operations then overlap and their times include waiting for a core).
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

# One core, one thread per op: set before JAX starts (workload.py leaves an
# XLA_FLAGS that is already set alone).
if "--all_cores" not in sys.argv:
  os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
  os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")
  os.environ.setdefault("RLPT_CPU_DEVICES", "1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

_PART = flags.DEFINE_enum("part", "sampler", ["sampler", "reference", "update"], "What to profile.")
_TOP = flags.DEFINE_integer("top", 25, "Operations to list.")
_TRACE_DIR = flags.DEFINE_string("trace_dir", None, "Keep the trace here (default: a temp dir).")
flags.DEFINE_bool("all_cores", False, "One device on every core instead of one pinned core.")


def build(part: str):
  """(function of no arguments that runs the part once, its jitted callable and args,
  steps per call)."""
  import workload as W
  from flax import nnx

  from rlpt.config import OptimConfig
  from rlpt.models import Transformer
  from rlpt.rl import LossConfig
  from rlpt.sampling import Sampler, SamplingParams
  from rlpt.steps import (LossCounts, RLBatch, SharedPrefix, init_train_state, make_optimizer,
                          rl_train_step, sequence_logprobs)

  cfg = W.model_config()
  graphdef, params = nnx.split(Transformer(cfg, nnx.Rngs(0)))
  sampling = SamplingParams(1.0)
  data = W.prompts(0)
  if part == "sampler":
    sampler = Sampler(graphdef, cfg, W.PROMPT, W.SAMPLE_NEW, 0, (), decode_phases=W.SAMPLE_PHASES)
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
  counts = LossCounts(jnp.float32(rows * W.GRPO_NEW), jnp.float32(rows))
  update = jax.jit(lambda s, b, c, k: rl_train_step(s, b, c, k, graphdef=graphdef,
                                                     optimizer=optimizer, loss_cfg=loss_cfg,
                                                     sampling=sampling, shared=shared))
  return update, (state, batch, counts, jnp.float32(0.04)), 1


_DEF = re.compile(r"^\s*(?:ROOT )?%([\w.\-]+) = (\w+)\[([\d,]*)\]")
_DOT = re.compile(r"^\s*(?:ROOT )?%([\w.\-]+) = \w+\[([\d,]*)\]\S* dot\(%([\w.\-]+), "
                  r"%[\w.\-]+\).*?lhs_contracting_dims=\{([\d,]*)\}")


def dot_flops(hlo: str) -> dict[str, float]:
  """FLOPs of every dot in the compiled HLO by instruction name, and of every
  fusion by the name of the instruction that calls it (sum of its dots):
  2 * output elements * contracted size."""
  dims = lambda text: [int(d) for d in text.split(",") if d]
  shapes = {m.group(1): dims(m.group(3)) for m in map(_DEF.match, hlo.splitlines()) if m}
  flops, computation = {}, None
  per_computation = collections.Counter()
  for line in hlo.splitlines():
    head = re.match(r"^(?:ENTRY )?%([\w.\-]+) ", line)
    if head and line.rstrip().endswith("{"):
      computation = head.group(1)
    m = _DOT.match(line)
    if m:
      out, lhs, contracting = dims(m.group(2)), shapes.get(m.group(3), []), dims(m.group(4))
      f = 2.0 * float(np.prod(out)) * float(np.prod([lhs[i] for i in contracting if i < len(lhs)]))
      flops[m.group(1)] = f
      per_computation[computation] += f
  for line in hlo.splitlines():
    m = re.match(r"^\s*(?:ROOT )?%([\w.\-]+) = .* fusion\(.*calls=%([\w.\-]+)", line)
    if m and per_computation[m.group(2)]:
      flops[m.group(1)] = per_computation[m.group(2)]
  return flops


def kind_of(ops: set[str]) -> str:
  if "dot" in ops or "convolution" in ops:
    return "matmul" if ops <= {"dot", "convolution", "parameter", "bitcast"} else "matmul+fused"
  if "reduce" in ops or "reduce-window" in ops:
    return "reduction"
  if ops & {"transpose", "copy", "concatenate"} and not ops & {"add", "multiply", "exponential"}:
    return "copy/transpose"
  return "element-wise"


def main(_):
  from launch.common import quiet_libraries
  quiet_libraries()  # orbax / XLA INFO lines would bury the figures
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
  overlap = "; summed over concurrently running ops" if flags.FLAGS.all_cores else ""
  print(f"\ntime by kind ({per}, ms{overlap}):")
  for kind, us in by_kind.most_common():
    print(f"  {kind:15s} {us / scale:9.3f}")
  print(f"\ntop {_TOP.value} operations ({per}, ms):")
  for us, name, shape, ops in sorted(rows, reverse=True)[:_TOP.value]:
    fused = ",".join(sorted(ops - {"bitcast"}))[:48]
    print(f"  {us / scale:9.3f}  {name[:28]:28s} {shape[:34]:34s} {fused}")
  # Ceiling analysis: the matmuls at their measured rate, everything else at 0 s.
  flops = dot_flops(hlo)
  mm_us = sum(us for us, name, _, ops in rows if flops.get(name))
  # Each traced op ran count[name] times (decode ops once per step).
  mm_flops = sum(flops[name] * count[name] for _, name, _, _ in rows if flops.get(name))
  all_us = sum(total.values())
  import workload as W
  roof = W.matmul_roofline()  # one device here: this core's rate
  print(f"\nceiling ({per}): matmuls {mm_flops / scale / 1e6:.3f} GFLOP in {mm_us / scale:.3f} ms "
        f"= {mm_flops / mm_us / 1e3:.1f} GFLOP/s; outside matmuls {(all_us - mm_us) / scale:.3f} ms "
        f"({(all_us - mm_us) / all_us:.0%} of op time)")
  print(f"  matmul roofline on this device {roof:.1f} GFLOP/s: reached {mm_flops / all_us / 1e3 / roof:.1%}"
        f" of it over all ops; {mm_flops / mm_us / 1e3 / roof:.1%} if everything outside the "
        "matmuls took no time")
  if _TRACE_DIR.value:
    print(f"\ntrace: {files[-1]} (open in https://ui.perfetto.dev)")



if __name__ == "__main__":
  app.run(main)
