r"""rlpt on one accelerator: each figure next to the physical limit that binds it.

    python benchmarks/device.py --out=runs/device          # full shapes (one H200: < 8 min)
    python benchmarks/device.py --quick --out=/tmp/device  # tiny shapes, any machine (CPU: < 2 min)
    python benchmarks/device.py --parts=decode,attention   # a subset

Runs on the first device JAX sees and prints one JSON line per figure (also
written to OUT/device.jsonl; OUT/summary.json holds the run's facts). Every
line has ``figure``, ``value`` and ``unit``, the ``limit`` it is measured
against with ``limit_unit`` and ``limit_source``, and ``of_limit``: the
fraction of the limit reached (value / limit for rates, limit / value for
times), so 1.0 is the machine's physics.

Limits: the device's peak dense bf16 FLOP/s and HBM bandwidth from
``roofline.DEVICE_LIMITS`` (vendor datasheets, keyed by device kind); a
device not in the table (a CPU) is measured against what this run measures on
it (an n^3 matmul in the run's dtype; a streaming y = 2x + 1). Both are also
printed as figures of their own, against the table where there is one.

Parts (``--parts``; full shapes, ``--quick`` divides them down):

* ``train``: one policy step (forward + backward + AdamW, fp32 master weights,
  bf16 compute) of a Llama-shaped 1.1B model (TinyLlama's shape: d 2048,
  22 layers, 32 heads, 4 KV heads, MLP 5632, vocab 32000) on 8 x 2048 tokens.
  MFU: model FLOPs (3x the forward's matmuls and causal attention) / time /
  peak.
* ``decode``: FastSampler decode at batch 64 and 256 over a 2K-token context
  (512-token prompts, 1536 new tokens, no stop), bf16 and int8 KV cache;
  tokens/s of the decode (the generate call less its prefill, timed apart)
  against the HBM roofline: each step reads every weight (bf16) and each row's
  cached keys and values so far.
* ``engine``: the continuous-batching engine (rlpt.engine) with as many
  slots as the largest decode batch (256), the same prompts and new tokens
  (no stop, so every slot stays busy), bf16 KV: tokens/s over the whole
  workload (chunked prefill and the host's scheduling included) against the
  same HBM roofline as ``decode``.
* ``speculative``: a 2-layer draft distilled (forward KL) on the target's own
  samples, then speculative decoding (gamma 4) against plain decode at batch
  64; the limit is the speed-up of a free draft at the measured acceptance,
  (1 - a^(gamma+1)) / (1 - a).
* ``attention``: one attention layer (32 heads, 4 KV heads, head 64, bf16,
  batch 1) forward + backward: blockwise causal at 32K and 128K tokens; sparse
  (window 4096 + 4 sinks, the same kernel visiting only the window's blocks)
  at 32K, 128K and 1M. Time, model FLOP/s against peak, and peak bytes of the
  compiled program (XLA's memory analysis: arguments + outputs + temporaries).
* ``grpo``: the main job's step scaled up on the 1.1B model: 32 prompts of 128
  tokens x group 8 = 256 completions of 1024 tokens (no stop), each group
  sampled from its one prefilled prompt; reference log-probs and 16 clipped
  policy-gradient minibatch updates of 16 rows (rl.minibatches), each row
  scored whole by the blockwise kernel, k3 KL 0.01 in the loss; the
  reward is the share of even token ids (the device is what is measured, not
  an environment). Each part against the roofline bound that binds it.

The model is randomly initialised (seed 0): speeds do not depend on the
weights, except the draft's acceptance, which is a distilled draft's on a
random target (the acceptance is printed; the limit is computed from it).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

import roofline  # noqa: E402
from synthetic_grpo import grpo_batch  # noqa: E402

PARTS = ("limits", "train", "decode", "engine", "speculative", "attention", "grpo")
_OUT = flags.DEFINE_string("out", os.path.join("runs", "device"), "Output folder.")
_QUICK = flags.DEFINE_bool("quick", False, "Tiny shapes (a CPU runs it in under 2 minutes).")
_PARTS = flags.DEFINE_list("parts", list(PARTS), f"Parts to run, of {', '.join(PARTS)}.")
_DTYPE = flags.DEFINE_string("dtype", None, "Compute dtype (default bfloat16; float32 on CPU, "
                             "whose bf16 matmuls are emulated).")
_REPS = flags.DEFINE_integer("reps", 3, "Timed repetitions of each measurement (median).")


@dataclasses.dataclass(frozen=True)
class Shapes:
  model: dict
  draft: dict
  train_batch: int
  train_len: int
  decode_batches: tuple[int, ...]
  decode_prompt: int
  decode_new: int
  spec_batch: int
  spec_prompt: int
  spec_new: int
  spec_gamma: int
  distill_steps: int
  distill_batch: int
  distill_len: int
  attn_heads: tuple[int, int, int]  # (heads, kv heads, head dim)
  attn_block: int
  attn_causal: tuple[int, ...]
  attn_sparse: tuple[int, ...]
  attn_window: int
  attn_sinks: int
  grpo_prompts: int
  grpo_group: int
  grpo_prompt: int
  grpo_new: int
  grpo_minibatch: int


FULL = Shapes(
    model=dict(vocab_size=32000, d_model=2048, num_layers=22, num_heads=32, num_kv_heads=4,
               head_dim=64, mlp_dim=5632),
    draft=dict(vocab_size=32000, d_model=512, num_layers=2, num_heads=8, num_kv_heads=2,
               head_dim=64, mlp_dim=1408),
    train_batch=8, train_len=2048,
    decode_batches=(64, 256), decode_prompt=512, decode_new=1536,
    spec_batch=64, spec_prompt=128, spec_new=256, spec_gamma=4,
    distill_steps=60, distill_batch=64, distill_len=256,
    attn_heads=(32, 4, 64), attn_block=512, attn_causal=(32768, 131072),
    attn_sparse=(32768, 131072, 1048576), attn_window=4096, attn_sinks=4,
    grpo_prompts=32, grpo_group=8, grpo_prompt=128, grpo_new=1024, grpo_minibatch=16)

QUICK = Shapes(
    model=dict(vocab_size=512, d_model=64, num_layers=2, num_heads=4, num_kv_heads=2,
               head_dim=16, mlp_dim=128),
    draft=dict(vocab_size=512, d_model=32, num_layers=1, num_heads=2, num_kv_heads=1,
               head_dim=16, mlp_dim=64),
    train_batch=4, train_len=128,
    decode_batches=(8, 16), decode_prompt=32, decode_new=32,
    spec_batch=8, spec_prompt=16, spec_new=32, spec_gamma=4,
    distill_steps=8, distill_batch=8, distill_len=32,
    attn_heads=(4, 2, 16), attn_block=128, attn_causal=(1024, 2048),
    attn_sparse=(1024, 2048, 8192), attn_window=256, attn_sinks=4,
    grpo_prompts=4, grpo_group=4, grpo_prompt=16, grpo_new=32, grpo_minibatch=8)


class Report:
  """Prints each figure as one JSON line and appends it to OUT/device.jsonl."""

  def __init__(self, out: str, device):
    os.makedirs(out, exist_ok=True)
    self.path = os.path.join(out, "device.jsonl")
    self.device_kind = device.device_kind
    self.rows: list[dict] = []
    open(self.path, "w").close()

  def emit(self, figure: str, value: float, unit: str, limit: float, limit_unit: str,
           limit_source: str, time_like: bool = False, **extra) -> dict:
    of = (limit / value if time_like else value / limit) if value and limit else float("nan")
    row = {"figure": figure, "value": float(value), "unit": unit, "limit": float(limit),
           "limit_unit": limit_unit, "of_limit": float(of), "limit_source": limit_source,
           "device": self.device_kind, **extra}
    self.rows.append(row)
    line = json.dumps(row)
    print(line, flush=True)
    with open(self.path, "a") as f:
      f.write(line + "\n")
    return row


@dataclasses.dataclass(frozen=True)
class Limits:
  flops: float
  bandwidth: float
  flops_source: str
  bandwidth_source: str


def median_time(fn, reps: int) -> float:
  """Median wall seconds of ``fn()`` (blocked on its result) after one warm-up call."""
  jax.block_until_ready(fn())
  times = []
  for _ in range(reps):
    t = time.perf_counter()
    jax.block_until_ready(fn())
    times.append(time.perf_counter() - t)
  return statistics.median(times)


def compiled_with_peak(jitted, *args):
  """(the compiled program for ``args``, the peak bytes XLA plans for one call:
  arguments + outputs + temporaries - aliased), compiled once."""
  compiled = jitted.lower(*args).compile()
  m = compiled.memory_analysis()
  return compiled, int(m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
                       - m.alias_size_in_bytes)


def forward_flops(cfg, rows: int, length: int) -> float:
  """Forward FLOPs of ``rows`` sequences of ``length`` tokens (causal attention)."""
  return rows * sum(roofline.token_flops(cfg, p) for p in range(length))


def attention_flops(t: int, heads: int, head_dim: int, window: int | None, sinks: int) -> float:
  """Model FLOPs of one attention layer's forward + backward (3x the forward's
  QK^T and PV products) over the keys each query may see."""
  pos = np.arange(t, dtype=np.float64)
  keys = pos + 1 if window is None else np.minimum(pos + 1, window) + np.minimum(
      sinks, np.maximum(pos + 1 - window, 0))
  return 3 * 4 * heads * head_dim * float(keys.sum())


def make_config(fields: dict, dtype: str):
  from rlpt.models import ModelConfig
  return ModelConfig(**fields, tie_embeddings=False, scale_tied_head=False, dtype=dtype,
                     attention_impl="auto", rope_theta=10_000.0, norm_eps=1e-5)


def cast(params, dtype):
  return jax.tree.map(lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x,
                      params)


def measure_limits(report: Report, device, dtype) -> Limits:
  table = roofline.device_limits(device.device_kind)
  n = 8192 if device.platform != "cpu" else 1024
  mm = roofline.matmul_rate([device], dtype, n)
  bw = roofline.memory_bandwidth([device], 2048 if device.platform != "cpu" else 256)
  if table is None:
    limits = Limits(mm, bw, f"measured in this run ({n}^3 {jnp.dtype(dtype).name} matmul)",
                    "measured in this run (streaming y = 2x + 1)")
  else:
    limits = Limits(table[0], table[1], table[2], table[2])
  report.emit("matmul", mm, "FLOP/s", limits.flops, "FLOP/s", limits.flops_source,
              n=n, dtype=jnp.dtype(dtype).name)
  report.emit("memory_bandwidth", bw, "bytes/s", limits.bandwidth, "bytes/s",
              limits.bandwidth_source, kernel="y = 2x + 1, fp32, read + write")
  return limits


class Parts:
  """The measurements; each writes its figures to ``report``."""

  def __init__(self, shapes: Shapes, report: Report, limits: Limits, device, dtype: str,
               reps: int):
    from flax import nnx

    from rlpt.models import Transformer
    self.s, self.report, self.limits, self.device, self.reps = shapes, report, limits, device, reps
    self.dtype = dtype
    self.cfg = make_config(shapes.model, dtype)
    with jax.default_device(device):
      self.graphdef, params = nnx.split(Transformer(self.cfg, nnx.Rngs(0)))
    self.params = jax.device_put(params, device)  # fp32 master weights
    self.sample_params = cast(self.params, self.cfg.jnp_dtype)  # what a sampler reads
    self.rng = np.random.default_rng(0)

  def tokens(self, *shape) -> np.ndarray:
    return self.rng.integers(1, self.cfg.vocab_size, size=shape).astype(np.int32)

  def _bound(self, flops, bytes_moved):
    return roofline.bound_seconds(flops, bytes_moved, self.limits.flops, self.limits.bandwidth)

  def train(self):
    from rlpt.config import OptimConfig
    from rlpt.steps import init_train_state, make_optimizer, sft_train_step
    s, cfg = self.s, self.cfg
    optimizer = make_optimizer(OptimConfig(learning_rate=1e-5), 100)
    state = jax.device_put(init_train_state(self.params, optimizer), self.device)
    step = jax.jit(functools.partial(sft_train_step, graphdef=self.graphdef, optimizer=optimizer))
    tokens = jax.device_put(self.tokens(s.train_batch, s.train_len + 1), self.device)
    mask = jnp.ones((s.train_batch, s.train_len), jnp.float32)
    step, mem = compiled_with_peak(step, state, tokens, mask)
    secs = median_time(lambda: step(state, tokens, mask), self.reps)
    flops = 3 * forward_flops(cfg, s.train_batch, s.train_len)
    self.report.emit("train_step_mfu", flops / secs, "FLOP/s", self.limits.flops, "FLOP/s",
                     self.limits.flops_source, seconds=secs, model_flops=flops,
                     params=cfg.num_params(), tokens=s.train_batch * s.train_len,
                     tokens_per_s=s.train_batch * s.train_len / secs, peak_bytes=mem,
                     dtype=self.dtype, master_weights="float32", optimizer="adamw")

  def _decode_time(self, sampler, batch: int, prompt: int, new: int):
    """(whole generate seconds, prefill seconds) of ``batch`` rows."""
    from rlpt.sampling.sampler import decode_bounds
    ids = jax.device_put(self.tokens(batch, prompt), self.device)
    lens = jnp.full((batch,), prompt, jnp.int32)
    layout = sampler.layout
    gen = lambda: sampler.generate(self.sample_params, ids, lens, jax.random.key(1),
                                   self._sampling)
    # The generate call's own prefill: its cache holds the first decode phase.
    room = decode_bounds(new, sampler.decode_phases)[0] + 1
    prefill = jax.jit(lambda p, i, n: layout.prefill(self.graphdef, self.cfg, p, i, n, room))
    total = median_time(gen, self.reps)
    pre = median_time(lambda: prefill(self.sample_params, ids, lens), self.reps)
    return total, pre

  @property
  def _sampling(self):
    from rlpt.sampling import SamplingParams
    return SamplingParams(1.0)

  def decode(self):
    from rlpt.sampling.fast import FastSampler, FlatLayout
    from rlpt.sampling.quant import tree_bytes
    from rlpt.sampling.sampler import auto_decode_phases
    s, cfg = self.s, self.cfg
    weights = tree_bytes(self.sample_params)
    for int8 in (False, True):
      layout = FlatLayout(kv_int8=int8)
      sampler = FastSampler(self.graphdef, cfg, s.decode_prompt, s.decode_new, 0, (), layout,
                            auto_decode_phases(s.decode_new))
      for b in s.decode_batches:
        total, pre = self._decode_time(sampler, b, s.decode_prompt, s.decode_new)
        decode_s = max(total - pre, 1e-9)
        kvb = roofline.kv_bytes_per_token(cfg, int8)
        moved = roofline.decode_bytes(weights, kvb, b, s.decode_prompt, s.decode_new)
        flops = roofline.decode_flops(cfg, b, s.decode_prompt, s.decode_new)
        bound, binding = self._bound(flops, moved)
        tokens = b * s.decode_new
        self.report.emit("decode_tokens_per_s", tokens / decode_s, "tokens/s", tokens / bound,
                         f"tokens/s at the {binding} roofline", self._source(binding),
                         batch=b, kv_cache="int8" if int8 else jnp.dtype(cfg.jnp_dtype).name,
                         prompt=s.decode_prompt, new_tokens=s.decode_new,
                         context=s.decode_prompt + s.decode_new, decode_s=decode_s,
                         prefill_s=pre, bytes_read=moved, weight_bytes=weights,
                         kv_bytes_per_token=kvb, binding=binding,
                         decode_phases=sampler.decode_phases)

  def engine(self):
    import types

    from rlpt.device import ProgramPool, RunContext, SampledModel
    from rlpt.engine import Engine, EngineConfig
    from rlpt.keys import run_key
    from rlpt.sampling.quant import tree_bytes
    from rlpt.sharding import DEFAULT_RULES, SAMPLE_RULES, make_mesh, state_shardings
    s, cfg = self.s, self.cfg
    slots, prompt, new = max(s.decode_batches), s.decode_prompt, s.decode_new
    mesh = make_mesh({"data": 1}, [self.device])
    ctx = RunContext(mesh, DEFAULT_RULES, SAMPLE_RULES, 0, types.SimpleNamespace(pad_id=0),
                     ProgramPool())
    model = SampledModel(cfg, self.graphdef, state_shardings(self.sample_params, mesh, SAMPLE_RULES))
    engine = Engine(EngineConfig(slots=slots, max_len=prompt + new, chunk_steps=16), ctx, model, ())
    engine.warm_up(self.sample_params, self._sampling)
    prompts = self.tokens(slots, prompt).tolist()
    keys = np.stack([np.asarray(jax.random.key_data(run_key(0, "rollout", 1, 0, i)))
                     for i in range(slots)])
    t = time.perf_counter()
    engine.generate(self.sample_params, self._sampling, prompts, keys, new)
    secs = time.perf_counter() - t
    weights = tree_bytes(self.sample_params)
    kvb = roofline.kv_bytes_per_token(cfg, False)
    moved = roofline.decode_bytes(weights, kvb, slots, prompt, new)
    bound, binding = self._bound(roofline.decode_flops(cfg, slots, prompt, new), moved)
    tokens = slots * new
    self.report.emit("engine_tokens_per_s", tokens / secs, "tokens/s", tokens / bound,
                     f"tokens/s at the {binding} roofline", self._source(binding),
                     slots=slots, prompt=prompt, new_tokens=new, seconds=secs,
                     host_share=1 - engine.stats["device_s"] / engine.stats["step_s"],
                     prefill_calls=engine.stats["prefill_calls"],
                     decode_chunks=engine.stats["decode_chunks"],
                     programs=len(ctx.programs), binding=binding)

  def _source(self, binding: str) -> str:
    return self.limits.bandwidth_source if binding == "memory" else self.limits.flops_source

  def speculative(self):
    from flax import nnx

    from rlpt.config import OptimConfig
    from rlpt.distill import DraftDistiller
    from rlpt.models import Transformer
    from rlpt.rollout import build_sequences
    from rlpt.sampling.fast import FastSampler
    from rlpt.sampling.sampler import auto_decode_phases
    from rlpt.sampling.speculative import SpeculativeSampler, expected_tokens_per_call
    from rlpt.steps import make_optimizer
    s, cfg = self.s, self.cfg
    dcfg = make_config(s.draft, self.dtype)
    with jax.default_device(self.device):
      dgraph, dparams = nnx.split(Transformer(dcfg, nnx.Rngs(1)))
    t0 = time.perf_counter()
    distiller = DraftDistiller(dgraph, jax.device_put(dparams, self.device), self.graphdef,
                               make_optimizer(OptimConfig(learning_rate=3e-3), s.distill_steps))
    plen = s.distill_len // 4
    teacher = FastSampler(self.graphdef, cfg, plen, s.distill_len - plen, 0, ())
    metrics = {}
    for step in range(s.distill_steps):
      if step % 10 == 0:  # fresh target samples every 10 steps
        ids = self.tokens(s.distill_batch, plen)
        lens = np.full((s.distill_batch,), plen, np.int32)
        out = teacher.generate(self.sample_params, ids, lens, jax.random.key(step), self._sampling)
        toks, logp, n = map(np.asarray, out)
        seq = build_sequences(ids, lens, toks, n, logp, 0)
      metrics = distiller.update(self.sample_params, seq.tokens, seq.loss_mask)
    distill_s = time.perf_counter() - t0
    draft = cast(distiller.params, dcfg.jnp_dtype)
    ids = jax.device_put(self.tokens(s.spec_batch, s.spec_prompt), self.device)
    lens = jnp.full((s.spec_batch,), s.spec_prompt, jnp.int32)
    plain = FastSampler(self.graphdef, cfg, s.spec_prompt, s.spec_new, 0, (),
                        decode_phases=auto_decode_phases(s.spec_new))
    spec = SpeculativeSampler(self.graphdef, cfg, dgraph, dcfg, s.spec_prompt, s.spec_new, 0, (),
                              s.spec_gamma)
    t_plain = median_time(lambda: plain.generate(self.sample_params, ids, lens,
                                                 jax.random.key(2), self._sampling), self.reps)
    t_spec = median_time(lambda: spec.generate(self.sample_params, draft, ids, lens,
                                               jax.random.key(2), self._sampling), self.reps)
    _, stats = spec.generate(self.sample_params, draft, ids, lens, jax.random.key(2),
                             self._sampling)
    acc = stats.acceptance_rate
    ideal = expected_tokens_per_call(acc, s.spec_gamma)
    self.report.emit("speculative_speedup", t_plain / t_spec, "x plain decode", ideal,
                     "x (a free draft at this acceptance)",
                     "(1 - a^(gamma+1)) / (1 - a) at the measured acceptance a",
                     acceptance=acc, gamma=s.spec_gamma, batch=s.spec_batch,
                     new_tokens=s.spec_new, plain_s=t_plain, speculative_s=t_spec,
                     draft_params=dcfg.num_params(), distill_steps=s.distill_steps,
                     distill_s=distill_s, distill_kl=metrics.get("distill/kl"))

  def attention(self):
    s = self.s
    capacity = (self.device.memory_stats() or {}).get("bytes_limit")
    for t in s.attn_causal:
      self._attention_case(t, None, 0, capacity)
    for t in s.attn_sparse:
      self._attention_case(t, s.attn_window, s.attn_sinks, capacity)

  def _attention_case(self, t: int, window: int | None, sinks: int, capacity):
    """One layer's forward + backward at ``t`` tokens (its arrays die on return)."""
    from rlpt.attention import blockwise_attention
    s = self.s
    n, k, h = s.attn_heads
    dt = self.cfg.jnp_dtype

    def loss(q, kk, v, pos):
      out = blockwise_attention(q, kk, v, q_positions=pos, kv_positions=pos, window=window,
                                num_sinks=sinks, block_size=s.attn_block)
      return jnp.sum(out.astype(jnp.float32) ** 2)

    step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))
    key = jax.random.key(t)
    q = jax.device_put(jax.random.normal(key, (1, t, n, h), dt), self.device)
    kk = jax.device_put(jax.random.normal(jax.random.fold_in(key, 1), (1, t, k, h), dt),
                        self.device)
    v = jax.device_put(jax.random.normal(jax.random.fold_in(key, 2), (1, t, k, h), dt),
                       self.device)
    pos = jax.device_put(jnp.arange(t, dtype=jnp.int32)[None], self.device)
    step, mem = compiled_with_peak(step, q, kk, v, pos)
    secs = median_time(lambda: step(q, kk, v, pos), self.reps)
    flops = attention_flops(t, n, h, window, sinks)
    self.report.emit("attention_fwd_bwd", flops / secs, "FLOP/s", self.limits.flops, "FLOP/s",
                     self.limits.flops_source, tokens=t,
                     kind="blockwise causal" if window is None else "sparse",
                     window=window, sinks=sinks, seconds=secs, model_flops=flops,
                     peak_bytes=mem, memory_capacity=capacity, heads=n, kv_heads=k,
                     head_dim=h, block=s.attn_block, dtype=jnp.dtype(dt).name)

  def grpo(self):
    from rlpt.config import OptimConfig
    from rlpt.rl import LossConfig
    from rlpt.sampling.fast import FastSampler
    from rlpt.sampling.prefix import PrefixLayout
    from rlpt.sampling.quant import tree_bytes
    from rlpt.sampling.sampler import auto_decode_phases
    from rlpt.steps import (RLBatch, init_train_state, make_optimizer,
                            rl_train_step, sequence_logprobs)
    s, cfg, sampling = self.s, self.cfg, self._sampling
    g, p, new = s.grpo_group, s.grpo_prompt, s.grpo_new
    rows = s.grpo_prompts * g
    mb = s.grpo_minibatch
    optimizer = make_optimizer(OptimConfig(learning_rate=1e-5), 100)
    # A copy: the update donates its state, and the other parts keep self.params.
    state = init_train_state(jax.tree.map(jnp.copy, self.params), optimizer)
    reference = self.sample_params
    loss_cfg = LossConfig(policy_loss="ppo_clip", kl_beta=0.01, kl_estimator="k3",
                          aggregation="token-mean", norm_len=new)
    sampler = FastSampler(self.graphdef, cfg, p, new, 0, (), PrefixLayout(g),
                          auto_decode_phases(new))
    # Rows of 1K+ tokens take the blockwise kernel (attention_impl "auto"), which
    # scores every row whole: no shared prefix in the reference pass and update.
    logprobs = jax.jit(lambda w, t: sequence_logprobs(self.graphdef, w, t, sampling))
    update = jax.jit(lambda st, b, c, k: rl_train_step(st, b, c, k, graphdef=self.graphdef,
                                                       optimizer=optimizer, loss_cfg=loss_cfg,
                                                       sampling=sampling),
                     donate_argnums=0)

    def step(state, i):
      t0 = time.perf_counter()
      prompts = self.tokens(s.grpo_prompts, p)
      plens = np.full((s.grpo_prompts,), p, np.int32)
      sample_params = cast(state.params, cfg.jnp_dtype)
      toks, logp, n = jax.device_get(sampler.generate(sample_params, prompts, plens,
                                                      jax.random.key(100 + i), sampling))
      t1 = time.perf_counter()
      b = grpo_batch(np.repeat(prompts, g, 0), np.repeat(plens, g), toks, n, logp, g)
      ref = jnp.concatenate([logprobs(reference, b.tokens[j:j + mb])
                             for j in range(0, rows, mb)])
      jax.block_until_ready(ref)
      t2 = time.perf_counter()
      metrics = None
      for j in range(0, rows, mb):  # minibatches of whole groups, the whole batch's counts
        part = slice(j, j + mb)
        batch = RLBatch(b.tokens[part], b.loss_mask[part], b.old_logp[part], ref[part],
                        b.advantages[part])
        state, metrics = update(state, batch, b.counts, jnp.float32(0.01))
      jax.block_until_ready(metrics)
      t3 = time.perf_counter()
      return state, (t3 - t0, t1 - t0, t2 - t1, t3 - t2)

    state, _ = step(state, 0)  # compiles
    times = []
    for i in range(1, 1 + self.reps):
      state, tm = step(state, i)
      times.append(tm)
    total, gen, ref, upd = (statistics.median(t[k] for t in times) for k in range(4))
    weights = tree_bytes(self.sample_params)
    gen_flops = roofline.generation_flops(cfg, rows, p, new, g)
    gen_bytes = roofline.decode_bytes(weights, roofline.kv_bytes_per_token(cfg), rows, p, new, g)
    length = p + new
    fwd = forward_flops(cfg, rows, length - 1)  # every row whole, its last token predicts none
    # Bytes at least moved: each reference minibatch reads the weights; each
    # minibatch update moves roofline.update_bytes.
    n_params = sum(x.size for x in jax.tree.leaves(self.params))
    parts = {"generate": (gen, gen_flops, gen_bytes),
             "reference": (ref, fwd, rows // mb * tree_bytes(reference)),
             "update": (upd, 3 * fwd, rows // mb * roofline.update_bytes(n_params))}
    bounds = {}
    for name, (secs, flops, moved) in parts.items():
      bound, binding = self._bound(flops, moved)
      bounds[name] = bound
      self.report.emit(f"grpo_{name}_s", secs, "s", bound, f"s at the {binding} roofline",
                       self._source(binding), time_like=True, share_of_step=secs / total,
                       model_flops=flops, bytes_moved=moved, binding=binding)
    self.report.emit("grpo_step_s", total, "s", sum(bounds.values()),
                     "s (the parts' roofline bounds summed)",
                     f"{self.limits.flops_source}; {self.limits.bandwidth_source}",
                     time_like=True, rows=rows, prompts=s.grpo_prompts, group=g,
                     prompt_tokens=p, new_tokens=new, minibatches=rows // mb,
                     breakdown_s={"generate": gen, "reference": ref, "update": upd,
                                  "host": total - gen - ref - upd})


def main(_):
  from launch.common import quiet_libraries
  quiet_libraries()
  unknown = sorted(set(_PARTS.value) - set(PARTS))
  if unknown:
    raise app.UsageError(f"--parts has {unknown}; expected some of {list(PARTS)}.")
  t_start = time.perf_counter()
  device = jax.devices()[0]
  dtype = _DTYPE.value or ("float32" if device.platform == "cpu" else "bfloat16")
  shapes = QUICK if _QUICK.value else FULL
  report = Report(_OUT.value, device)
  print(f"device: {device.device_kind} ({device.platform}), dtype {dtype}, "
        f"{'quick' if _QUICK.value else 'full'} shapes", file=sys.stderr, flush=True)
  limits = measure_limits(report, device, jnp.dtype(dtype))
  parts = Parts(shapes, report, limits, device, dtype, _REPS.value)
  seconds = {}
  for name in PARTS[1:]:
    if name in _PARTS.value:
      t = time.perf_counter()
      getattr(parts, name)()
      seconds[name] = time.perf_counter() - t
      print(f"{name}: {seconds[name]:.1f} s", file=sys.stderr, flush=True)
  summary = {"device": device.device_kind, "platform": device.platform, "dtype": dtype,
             "quick": _QUICK.value, "parts_s": seconds, "wall_s": time.perf_counter() - t_start,
             "jax": jax.__version__, "figures": len(report.rows),
             "shapes": dataclasses.asdict(shapes)}
  with open(os.path.join(_OUT.value, "summary.json"), "w") as f:
    json.dump(summary, f, indent=1)
  print(f"wall {summary['wall_s']:.0f} s; {len(report.rows)} figures in {report.path}",
        file=sys.stderr, flush=True)


if __name__ == "__main__":
  app.run(main)
