r"""rlpt on the fixed peer-comparison workload: sampler tokens/s, GRPO step time, FLOPs, roofline.

    python benchmarks/workload.py [--runs=3]

The workload (the same one benchmarks/peers/ runs in TRL and Tunix):

* model: Llama architecture, vocab 512, hidden 256, 4 layers, 8 heads, 4 KV
  heads, head_dim 32, MLP 704, RMSNorm eps 1e-6, RoPE theta 10000, untied
  embeddings, float32, random init (seed 0);
* sampling: 32 prompts of 32 random tokens, exactly 128 new tokens each (no
  early stop), temperature 1. Tokens/s = 32 * 128 / wall time of one generate
  call after one warm-up call, median of 3;
* GRPO: 8 prompts of 32 tokens, group 8 (64 completions), exactly 64 new
  tokens, temperature 1, reward = fraction of even token ids, one AdamW update
  (lr 1e-5) per batch, KL beta 0.04 to a frozen reference. Seconds per full
  step (generation + reference log-probs + update) after 2 warm-up steps,
  median of 5. A group's 8 rows share its prompt, and rlpt runs the prompt
  once per group: generation samples each group from one prefilled prompt
  cache (``rollout.share_prefix``), the reference pass and the update score
  it once (``rlpt.steps.SharedPrefix``, ``rl.shared_prefix``); the results
  equal the per-row computation up to fp32 summation order.

Both samplers decode in stages over a KV cache grown between them
(``decode_phases`` chosen from the shape by ``auto_decode_phases``, as a
training run chooses them: 8 for the 128-token sampler, 4 for the 64-token
GRPO generation), so early steps do not read the slots of tokens not yet
generated; the samples are the same (tests/sampling/test_decode_phases.py).

FLOPs: the model FLOPs rlpt executes (each token's matmuls, and attention over
the keys it may see; shared prompts counted once per group), counted
analytically for generation (XLA's cost analysis counts a while-loop body
once) and by XLA's cost analysis for the reference pass and the update.
Bytes: what each part must move at least, counted analytically (XLA's
"bytes accessed" sums every op's operands, cache-resident ones included, so it
is no bound): decoding reads every weight per step, per device, and each row's
cached context so far (a group's shared prompt once); the reference pass reads
the weights once; the update moves 40 bytes a parameter (``update_bytes``).
Each part is reported against the roofline
bound that binds it: its FLOPs at the fp32 matmul rate or its bytes at the
memory bandwidth, whichever takes longer, both measured in the same run (a
1024^3 matmul per device, best of 5; a streaming y = 2x + 1 over 256 MiB per
device, best of 5). Small-batch decoding reads every weight per token step,
so memory bandwidth, not the matmul rate, binds it; a model whose weights fit
in the last-level cache (this one's 13 MB of fp32) can beat that DRAM bound.
``--runs`` repeats the whole measurement and prints median [min-max].

On a CPU host rlpt runs one XLA device per core (single-threaded ops) with
the batch sharded over them; ``RLPT_CPU_DEVICES=1`` measures one device using
every core per op instead.
"""

import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rlpt.sampling.sampler import auto_decode_phases  # noqa: E402  (starts no JAX backend)
from synthetic_grpo import grpo_batch  # noqa: E402
from roofline import (bound_seconds, decode_bytes, generation_flops, kv_bytes_per_token,  # noqa: E402
                      matmul_roofline, memory_bandwidth, timed, update_bytes)

VOCAB, PROMPT = 512, 32
SAMPLE_ROWS, SAMPLE_NEW = 32, 128
GRPO_PROMPTS, GROUP, GRPO_NEW = 8, 8, 64
WARMUP_STEPS, TIMED_STEPS = 2, 5
SAMPLE_PHASES, GRPO_PHASES = auto_decode_phases(SAMPLE_NEW), auto_decode_phases(GRPO_NEW)  # 8, 4

# rlpt on a CPU host runs SPMD over one XLA device per core, each running its
# ops on one thread, with the batch sharded over them: the data parallelism a
# multi-chip mesh uses, instead of one device splitting every small op across
# the cores. It must be set before JAX starts (the peers' processes get the
# environment as it was before: PEER_ENV). RLPT_CPU_DEVICES=1 measures the
# single-device default; an XLA_FLAGS already set is left alone.
PEER_ENV = dict(os.environ)
CPU_DEVICES = int(os.environ.get("RLPT_CPU_DEVICES",
                                 math.gcd(os.cpu_count() or 1, GRPO_PROMPTS, SAMPLE_ROWS)))
if "XLA_FLAGS" not in os.environ:
  from rlpt.device import set_cpu_devices  # noqa: E402  (launch.train --cpu_devices)
  set_cpu_devices(CPU_DEVICES)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402




def prompts(seed: int) -> dict[str, np.ndarray]:
  """The run's prompts (token ids in [1, VOCAB)): ``sample`` [32, 32], ``grpo``
  [7, 8, 32] (each GRPO step's prompts, warm-up steps first), ``check`` [4, 32]."""
  rng = np.random.default_rng(seed)
  steps = WARMUP_STEPS + TIMED_STEPS
  return {
      "sample": rng.integers(1, VOCAB, size=(SAMPLE_ROWS, PROMPT)).astype(np.int32),
      "grpo": rng.integers(1, VOCAB, size=(steps, GRPO_PROMPTS, PROMPT)).astype(np.int32),
      "check": rng.integers(1, VOCAB, size=(4, PROMPT)).astype(np.int32),
  }


def model_config():
  from rlpt.models import ModelConfig
  return ModelConfig(vocab_size=VOCAB, d_model=256, num_layers=4, num_heads=8, num_kv_heads=4,
                     head_dim=32, mlp_dim=704, norm_eps=1e-6, rope_theta=10_000.0,
                     tie_embeddings=False)


def _flops(jitted, *args) -> float:
  """XLA's FLOP count of a data-parallel program: its cost analysis is of the
  per-device program, which every device runs on its share of the rows."""
  cost = jitted.lower(*args).compile().cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  return float(cost.get("flops", float("nan"))) * jax.device_count()


def measure(seed: int = 0) -> dict:
  """One measurement of the workload with the model initialised from ``seed`` and
  ``prompts(seed)`` (the model and prompts benchmarks/peers/ hand to the peers)."""
  from flax import nnx

  from rlpt.config import OptimConfig
  from rlpt.models import Transformer
  from rlpt.rl import LossConfig
  from rlpt.sampling import Sampler, SamplingParams
  from rlpt.sampling.fast import FastSampler
  from rlpt.sampling.prefix import PrefixLayout
  from rlpt.sampling.quant import tree_bytes
  from rlpt.steps import (LossCounts, RLBatch, SharedPrefix, init_train_state, make_optimizer,
                          rl_train_step, sequence_logprobs)

  from jax.sharding import Mesh, NamedSharding, PartitionSpec

  cfg = model_config()
  # Parameters replicated, rows sharded over the devices (one per core on CPU).
  mesh = Mesh(np.array(jax.devices()), ("data",))
  rep = NamedSharding(mesh, PartitionSpec())
  rows2 = NamedSharding(mesh, PartitionSpec("data", None))
  rows1 = NamedSharding(mesh, PartitionSpec("data"))
  graphdef, params = nnx.split(Transformer(cfg, nnx.Rngs(seed)))
  params = jax.device_put(params, rep)
  reference = jax.tree.map(jnp.copy, params)
  sampling = SamplingParams(1.0)
  data = prompts(seed)
  out = {}

  # Sampling: no stop ids, so every row generates exactly SAMPLE_NEW tokens.
  sampler = Sampler(graphdef, cfg, PROMPT, SAMPLE_NEW, 0, (), decode_phases=SAMPLE_PHASES)
  generate = jax.jit(lambda p, ids, lens, key: sampler.generate(p, ids, lens, key, sampling),
                     in_shardings=(rep, rows2, rows1, rep))
  ids = jax.device_put(data["sample"], rows2)
  lens = jax.device_put(np.full((SAMPLE_ROWS,), PROMPT, np.int32), rows1)
  jax.block_until_ready(generate(params, ids, lens, jax.random.key(0)))
  times = [timed(lambda i=i: jax.block_until_ready(generate(params, ids, lens, jax.random.key(i))))
           for i in range(1, 4)]
  out["sample_tok_s"] = SAMPLE_ROWS * SAMPLE_NEW / statistics.median(times)
  out["sample_flops"] = generation_flops(cfg, SAMPLE_ROWS, PROMPT, SAMPLE_NEW)
  # At least read per decode step: every weight (fp32, once per device: each
  # holds a replica) and each row's cached keys and values so far.
  weights = tree_bytes(params) * jax.device_count()
  kvb = kv_bytes_per_token(cfg)
  out["sample_bytes"] = decode_bytes(weights, kvb, SAMPLE_ROWS, PROMPT, SAMPLE_NEW)

  # GRPO step.
  optimizer = make_optimizer(OptimConfig(learning_rate=1e-5, grad_clip=1e9), 100)
  state = jax.device_put(init_train_state(params, optimizer), rep)
  loss_cfg = LossConfig(policy_loss="ppo_clip", kl_beta=0.04, kl_estimator="k3",
                        aggregation="token-mean", norm_len=GRPO_NEW)
  # Each group samples from its prompt's one prefilled cache (rollout.share_prefix:
  # the same distribution; log-probs equal the trainer's, tests/sampling/test_prefix.py).
  gsampler = FastSampler(graphdef, cfg, PROMPT, GRPO_NEW, 0, (), PrefixLayout(GROUP), GRPO_PHASES)
  ggen = jax.jit(lambda p, ids, lens, key: gsampler.generate(p, ids, lens, key, sampling),
                 in_shardings=(rep, rows2, rows1, rep))
  # Each group's 8 rows share their 32 prompt tokens: the reference pass and the
  # update run each prompt once (same log-probs and gradients; rlpt.steps.SharedPrefix).
  shared = SharedPrefix(PROMPT, GROUP)
  logprobs = jax.jit(lambda p, t: sequence_logprobs(graphdef, p, t, sampling, shared),
                     in_shardings=(rep, rows2), out_shardings=rows2)
  update = jax.jit(lambda s, b, c, k: rl_train_step(s, b, c, k, graphdef=graphdef,
                                                     optimizer=optimizer, loss_cfg=loss_cfg,
                                                     sampling=sampling, shared=shared),
                   in_shardings=(rep, rows2, rep, rep), out_shardings=(rep, rep),
                   donate_argnums=0)
  rows = GRPO_PROMPTS * GROUP

  def step(state, i):
    t0 = time.perf_counter()
    gids = np.repeat(data["grpo"][i], GROUP, axis=0)
    glens = np.full((rows,), PROMPT, np.int32)
    toks, logp, n = jax.device_get(ggen(state.params, data["grpo"][i], glens[:GRPO_PROMPTS],
                                        jax.random.key(100 + i)))
    t1 = time.perf_counter()
    b = grpo_batch(gids, glens, toks, n, logp, GROUP)
    ref_logp = logprobs(reference, b.tokens)
    jax.block_until_ready(ref_logp)
    t2 = time.perf_counter()
    batch = RLBatch(b.tokens, b.loss_mask, b.old_logp, ref_logp, b.advantages)
    state, metrics = update(state, batch, b.counts, jnp.float32(0.04))
    jax.block_until_ready(metrics)
    t3 = time.perf_counter()
    return state, batch, (t3 - t0, t1 - t0, t2 - t1, t3 - t2)

  for i in range(WARMUP_STEPS):
    state, batch, _ = step(state, i)
  timings = []
  for i in range(WARMUP_STEPS, WARMUP_STEPS + TIMED_STEPS):
    state, batch, tm = step(state, i)
    timings.append(tm)
  med = [statistics.median(t[k] for t in timings) for k in range(4)]
  out.update(step_s=med[0], gen_s=med[1], ref_s=med[2], update_s=med[3])
  out["gen_flops"] = generation_flops(cfg, rows, PROMPT, GRPO_NEW, GROUP)
  out["gen_bytes"] = decode_bytes(weights, kvb, rows, PROMPT, GRPO_NEW, GROUP)
  out["ref_flops"] = _flops(logprobs, reference, batch.tokens)
  out["ref_bytes"] = weights  # every weight read once, per device
  counts = LossCounts(jnp.float32(1.0), jnp.float32(1.0))
  out["update_flops"] = _flops(update, state, batch, counts, jnp.float32(0.04))
  out["update_bytes"] = update_bytes(cfg.num_params(), jax.device_count())
  return out


def main(_):
  from launch.common import quiet_libraries
  quiet_libraries()  # orbax / XLA INFO lines would bury the figures
  roof = matmul_roofline()
  bandwidth = memory_bandwidth()
  print(f"devices: {jax.device_count()} x {jax.devices()[0].platform}; "
        f"fp32 matmul roofline {roof:.0f} GFLOP/s; memory bandwidth {bandwidth / 1e9:.1f} GB/s "
        "(y = 2x + 1, every device at once)")
  runs = []
  for r in range(flags.FLAGS.runs):
    m = measure(seed=r)
    runs.append(m)
    print(f"run {r}: sampler {m['sample_tok_s']:,.0f} tok/s; GRPO step {m['step_s']:.3f} s "
          f"(generate {m['gen_s']:.3f}, reference {m['ref_s']:.3f}, update {m['update_s']:.3f})",
          flush=True)

  def stat(key, fmt):
    xs = [r[key] for r in runs]
    return f"{fmt.format(statistics.median(xs))} [{fmt.format(min(xs))}-{fmt.format(max(xs))}]"

  last = runs[-1]
  # Each part against the limit that binds it: its FLOPs at the matmul rate or
  # the bytes it must move at the measured bandwidth, whichever takes longer.
  print("\n| measure | rlpt, median [min-max] | GFLOP | MB moved | bound (binds) | of bound |")
  print("|---|---:|---:|---:|---:|---:|")

  def row(name, secs, value, flops, moved, bound=None):
    bound, binding = bound_seconds(flops, moved, roof * 1e9, bandwidth) if bound is None else (
        bound, "sum of the parts'")
    print(f"| {name} | {value} | {flops / 1e9:.1f} | {moved / 1e6:.0f} | "
          f"{bound * 1e3:.1f} ms ({binding}) | {bound / secs:.1%} |")

  tok_s = statistics.median(r["sample_tok_s"] for r in runs)
  row("sampler, 32 x 128 tokens", SAMPLE_ROWS * SAMPLE_NEW / tok_s,
      f"{stat('sample_tok_s', '{:,.0f}')} tok/s", last["sample_flops"], last["sample_bytes"])
  parts = (("  generation", "gen_s", "gen"), ("  reference pass", "ref_s", "ref"),
           ("  update", "update_s", "update"))
  flops = sum(last[f"{p}_flops"] for _, _, p in parts)
  moved = sum(last[f"{p}_bytes"] for _, _, p in parts)
  bound = sum(bound_seconds(last[f"{p}_flops"], last[f"{p}_bytes"], roof * 1e9, bandwidth)[0]
              for _, _, p in parts)
  row("GRPO step", statistics.median(r["step_s"] for r in runs), f"{stat('step_s', '{:.3f}')} s",
      flops, moved, bound)
  for name, key, p in parts:
    row(name, statistics.median(r[key] for r in runs), f"{stat(key, '{:.3f}')} s",
        last[f"{p}_flops"], last[f"{p}_bytes"])


if __name__ == "__main__":
  flags.DEFINE_integer("runs", 3, "Repetitions of the whole measurement.")
  app.run(main)
