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

import os
import sys
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


def main(_):
  from launch.common import quiet_libraries
  quiet_libraries()  # orbax / XLA INFO lines would bury the figures
  fn, args, steps = build(_PART.value)
  jax.block_until_ready(fn(*args))
  t = time.perf_counter()
  jax.block_until_ready(fn(*args))
  wall = time.perf_counter() - t
  import workload as W
  import xla_profile
  events, trace_file = xla_profile.trace(lambda: jax.block_until_ready(fn(*args)), _TRACE_DIR.value)
  hlo = fn.lower(*args).compile().as_text()
  total, count = next(v for m, v in xla_profile.op_times(events).items() if m)  # the one program
  print(f"{_PART.value}: {wall * 1e3:.1f} ms wall per call"
        + (f" ({wall / steps * 1e3:.2f} ms per decode step)" if steps > 1 else "") + "\n")
  # The matmul rate of one device here: this core's.
  xla_profile.report(total, count, hlo, W.matmul_roofline(), steps=steps, top=_TOP.value,
                     overlap=flags.FLAGS.all_cores)
  if _TRACE_DIR.value:
    print(f"\ntrace: {trace_file} (open in https://ui.perfetto.dev)")


if __name__ == "__main__":
  app.run(main)
