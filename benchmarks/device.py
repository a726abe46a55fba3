r"""rlpt on one accelerator: each figure next to the physical limit that binds it.

    python benchmarks/device.py --out=runs/device          # full shapes, 480 s budget on an accelerator
    python benchmarks/device.py --quick --out=/tmp/device  # tiny shapes, any machine (CPU: < 2 min)
    python benchmarks/device.py --parts=decode,attention   # a subset
    python benchmarks/device.py --budget_s=900             # a longer budget (<= 0: none)

Runs on the first device JAX sees and prints one JSON line per figure (also
written to OUT/device.jsonl as it comes, so a run cut short keeps every figure
it reached; OUT/summary.json holds the run's facts). Every figure line has
``figure``, ``value`` and ``unit``, the ``limit`` it is measured against with
``limit_unit`` and ``limit_source``, and ``of_limit``: the fraction of the
limit reached (value / limit for rates, limit / value for times), so 1.0 is
the machine's physics. Lines without ``figure`` say what happened to a case:
``"skipped": "budget"`` (with its ``estimate_s`` and the ``left_s`` it did not
fit in), ``"stopped": "budget"`` (the case running at the deadline), ``"error"``.

One process, one budget (``--budget_s``, default 480 s on an accelerator, none
on a CPU), counted from the process's start. The parts are split into cases (a
decode batch and KV dtype, an attention length) run in order of value:

  limits; decode (bf16 at the largest batch, its profile, bf16 at the smaller,
  int8 smallest first); train (with its profile); engine; grpo; speculative;
  attention (causal 32K, 128K; sparse 32K, 128K, 1M).

Before each case its cost is estimated (the same case's time in the last run
with this compilation cache, else the last case of its part scaled by the
bytes or FLOPs of the two shapes, else a prior per part, ``Shapes.prior_s``;
see device_schedule.py) and the case is skipped if it would not fit in what
is left. At the deadline a case still running is abandoned: the run writes
what it has, a ``stopped`` line and summary.json, and exits 0 (1 if a case
failed). summary.json records ``stopped_by_budget``, the parts run and
skipped, each case's status, seconds and estimate, and the wall time.

Compiling is much of a full-shape case's time, so compiled programs persist in
``--compilation_cache`` (default OUT/xla_cache; empty: off); a second run with
the same folder skips the compiles and, with each case's last time recorded
there, estimates from it.

Repetitions: ``--reps`` (default 3) timed calls after a warm-up call, median.
At full shapes one decode generate lasts seconds, so the decode generates and
the grpo steps take ``--long_reps`` (default 2 at full shapes, ``--reps`` with
``--quick``): the median of 2 is their mean; each decode line also carries
``decode_step_s``, the decode's seconds per generated token step.

Profiles: the bf16 decode at the largest batch (a generate of
``Shapes.profile_new`` new tokens, compiled first, then traced once) and the
train step (one step after its timed ones) are traced with ``jax.profiler``
into OUT/profile/<name>/ (a Perfetto trace), and OUT/profile/<name>_top_ops.txt
lists the 20 operations that took the most time (count, total ms, share;
device_profile.py). A profile that fails writes its reason there and the run
goes on; its time counts in the budget.

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
  cached keys and values so far. On a TPU or GPU the batch-256 bf16 case runs
  twice: on XLA's attention and on the Pallas decode kernel
  (``decode/bfloat16/b256/pallas``; rlpt.models.decode_kernel).
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

import time

_T0 = time.time()  # the budget counts from here, before JAX and rlpt load

import dataclasses  # noqa: E402
import functools  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

import roofline  # noqa: E402
from launch import common  # noqa: E402  (defines --compilation_cache, read in main)
from device_profile import profile  # noqa: E402
from device_schedule import Case, Lines, Runner  # noqa: E402
from synthetic_grpo import grpo_batch  # noqa: E402

# In order of value: what runs first when the budget is short.
PARTS = ("limits", "decode", "train", "engine", "grpo", "speculative", "attention")
ACCELERATOR_BUDGET_S = 480.0
_OUT = flags.DEFINE_string("out", os.path.join("runs", "device"), "Output folder.")
_QUICK = flags.DEFINE_bool("quick", False, "Tiny shapes (a CPU runs it in under 2 minutes).")
_PARTS = flags.DEFINE_list("parts", list(PARTS), f"Parts to run, of {', '.join(PARTS)} "
                           "(limits always runs: every other figure is measured against it).")
_DTYPE = flags.DEFINE_string("dtype", None, "Compute dtype (default bfloat16; float32 on CPU, "
                             "whose bf16 matmuls are emulated).")
_REPS = flags.DEFINE_integer("reps", 3, "Timed repetitions of each measurement (median).")
_LONG_REPS = flags.DEFINE_integer("long_reps", None, "Timed repetitions of the decode generates "
                                  "and grpo steps (default 2 at full shapes, --reps with --quick).")
_BUDGET = flags.DEFINE_float("budget_s", None, "Wall seconds for the whole run, from the process's "
                             f"start (default {ACCELERATOR_BUDGET_S:.0f} on an accelerator, none on "
                             "a CPU; <= 0: none).")


@dataclasses.dataclass(frozen=True)
class Shapes:
  model: dict
  draft: dict
  train_batch: int
  train_len: int
  decode_batches: tuple[int, ...]
  decode_prompt: int
  decode_new: int
  profile_new: int  # new tokens of the profiled decode generate
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
  # Seconds the first case of each part is estimated to take when nothing
  # better is known (device_schedule.py); later cases of a part scale from
  # the measured ones.
  prior_s: dict


FULL = Shapes(
    model=roofline.LLAMA_1B,
    draft=dict(vocab_size=32000, d_model=512, num_layers=2, num_heads=8, num_kv_heads=2,
               head_dim=64, mlp_dim=1408),
    train_batch=8, train_len=2048,
    decode_batches=(64, 256), decode_prompt=512, decode_new=1536, profile_new=64,
    spec_batch=64, spec_prompt=128, spec_new=256, spec_gamma=4,
    distill_steps=60, distill_batch=64, distill_len=256,
    attn_heads=(32, 4, 64), attn_block=512, attn_causal=(32768, 131072),
    attn_sparse=(32768, 131072, 1048576), attn_window=4096, attn_sinks=4,
    grpo_prompts=32, grpo_group=8, grpo_prompt=128, grpo_new=1024, grpo_minibatch=16,
    # One H200, cold cache: the engine part took 165 s (one 18.5 s pass, the
    # rest compiling and warm-up); decode 349 s for three cases and part of a
    # fourth at 3 reps, so about 100 s for bf16 at 256 with 2. The others have
    # not run on a GPU; theirs are guesses of the same kind (a minute or two
    # of compiling plus their executions), to be replaced by measurements
    # (case_seconds.json) after the first run.
    prior_s={"limits": 30, "model": 30, "decode": 100, "train": 120, "engine": 165, "grpo": 240,
             "speculative": 150, "attention": 60})

QUICK = Shapes(
    model=dict(vocab_size=512, d_model=64, num_layers=2, num_heads=4, num_kv_heads=2,
               head_dim=16, mlp_dim=128),
    draft=dict(vocab_size=512, d_model=32, num_layers=1, num_heads=2, num_kv_heads=1,
               head_dim=16, mlp_dim=64),
    train_batch=4, train_len=128,
    decode_batches=(8, 16), decode_prompt=32, decode_new=32, profile_new=8,
    spec_batch=8, spec_prompt=16, spec_new=32, spec_gamma=4,
    distill_steps=8, distill_batch=8, distill_len=32,
    attn_heads=(4, 2, 16), attn_block=128, attn_causal=(1024, 2048),
    attn_sparse=(1024, 2048, 8192), attn_window=256, attn_sinks=4,
    grpo_prompts=4, grpo_group=4, grpo_prompt=16, grpo_new=32, grpo_minibatch=8,
    # The 2-core CPU this suite runs on, --reps=1.
    prior_s={"limits": 3, "model": 5, "decode": 5, "train": 5, "engine": 14, "grpo": 15,
             "speculative": 23, "attention": 3})


class Report:
  """Prints each figure as one JSON line and appends it to OUT/device.jsonl."""

  def __init__(self, lines: Lines, device):
    self.lines = lines
    self.path = lines.path
    self.device_kind = device.device_kind
    self.rows: list[dict] = []

  def emit(self, figure: str, value: float, unit: str, limit: float, limit_unit: str,
           limit_source: str, time_like: bool = False, **extra) -> dict:
    of = (limit / value if time_like else value / limit) if value and limit else float("nan")
    row = {"figure": figure, "value": float(value), "unit": unit, "limit": float(limit),
           "limit_unit": limit_unit, "of_limit": float(of), "limit_source": limit_source,
           "device": self.device_kind, **extra}
    self.rows.append(row)
    self.lines.write(row)
    return row


@dataclasses.dataclass(frozen=True)
class Limits:
  flops: float
  bandwidth: float
  flops_source: str
  bandwidth_source: str


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


def tokens_name(t: int) -> str:
  return f"{t >> 20}M" if t % (1 << 20) == 0 else f"{t >> 10}K" if t % 1024 == 0 else str(t)


def make_config(fields: dict, dtype: str):
  from rlpt.models import ModelConfig
  return ModelConfig(**fields, tie_embeddings=False, scale_tied_head=False, dtype=dtype,
                     attention_impl="auto", rope_theta=10_000.0, norm_eps=1e-5)


def cast(params, dtype):
  return jax.tree.map(lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x,
                      params)


class Parts:
  """The measurements; each case writes its figures to ``report``. ``exec_s``
  counts the seconds spent executing measured programs (warm-up and timed
  calls, compiling excluded): the share of a case that scales with its shape."""

  def __init__(self, shapes: Shapes, report: Report, device, dtype: str, reps: int,
               long_reps: int, out: str):
    self.s, self.report, self.device, self.dtype = shapes, report, device, dtype
    self.reps, self.long_reps = reps, long_reps
    self.profile_dir = os.path.join(out, "profile")
    self.cfg = make_config(shapes.model, dtype)
    self.limits: Limits | None = None
    self.exec_s = 0.0
    self.profiles: dict[str, dict] = {}
    self.rng = np.random.default_rng(0)

  @functools.cached_property
  def _model(self):
    """(graphdef, fp32 master weights, what a sampler reads), built on first use:
    a run of the attention part alone never builds the 1.1B model."""
    from flax import nnx

    from rlpt.models import Transformer
    with jax.default_device(self.device):
      graphdef, params = nnx.split(Transformer(self.cfg, nnx.Rngs(0)))
    params = jax.device_put(params, self.device)
    return graphdef, params, cast(params, self.cfg.jnp_dtype)

  @property
  def graphdef(self):
    return self._model[0]

  @property
  def params(self):
    return self._model[1]

  @property
  def sample_params(self):
    return self._model[2]

  def tokens(self, *shape) -> np.ndarray:
    return self.rng.integers(1, self.cfg.vocab_size, size=shape).astype(np.int32)

  def _bound(self, flops, bytes_moved):
    return roofline.bound_seconds(flops, bytes_moved, self.limits.flops, self.limits.bandwidth)

  def median_time(self, fn, reps: int) -> float:
    """Median wall seconds of ``fn()`` (blocked on its result) after one warm-up call."""
    jax.block_until_ready(fn())
    times = []
    for _ in range(reps):
      t = time.perf_counter()
      jax.block_until_ready(fn())
      times.append(time.perf_counter() - t)
    median = statistics.median(times)
    self.exec_s += (reps + 1) * median  # the warm-up's execution too; its compile is not
    return median

  def cases(self, selected) -> list[Case]:
    """Every selected part's cases, in order of value (the module's docstring)."""
    s, prior = self.s, self.s.prior_s
    out = [self._case("limits", "limits", self.measure_limits, prior_s=prior["limits"], needs=())]
    model_parts = {"decode", "train", "engine", "grpo", "speculative"} & set(selected)
    if model_parts:
      # Its own case, so that building it counts in no measured case's time
      # (which later estimates scale from).
      out.append(self._case("model", "model", lambda: self._model, prior_s=prior["model"],
                            needs=()))
    needs = ("limits", "model")
    if "decode" in selected:
      kv = jnp.dtype(self.cfg.jnp_dtype).name
      big, small = max(s.decode_batches), sorted(s.decode_batches, reverse=True)[1:]
      # On a TPU or a GPU, the largest batch again on the Pallas decode kernel
      # (rollout.decode_kernel=pallas), right after it on XLA's attention: the
      # pair says what the kernel is worth on this chip.
      kernel = [(False, big, "pallas")] if self.device.platform in ("tpu", "gpu") else []
      order = [(False, big, "xla")] + kernel + ["profile"] + [(False, b, "xla") for b in small] + [
          (True, b, "xla") for b in sorted(s.decode_batches)]
      for item in order:
        if item == "profile":
          # Work 0: estimated as the last decode case's compiling and set-up,
          # what a short generate of a fresh program costs.
          out.append(self._case("decode/profile", "decode", self.decode_profile, work=0.0,
                                prior_s=prior["decode"], needs=("model",)))
          continue
        int8, b, attend = item
        name = f"decode/{'int8' if int8 else kv}/b{b}" + ("" if attend == "xla" else f"/{attend}")
        out.append(self._case(name, "decode", functools.partial(self.decode, int8, b, attend),
                              work=(self.long_reps + 1) * self._decode_bytes(int8, b, s.decode_new),
                              prior_s=prior["decode"], needs=needs))
    for name in ("train", "engine", "grpo", "speculative"):
      if name in selected:
        out.append(self._case(name, name, getattr(self, name), prior_s=prior[name], needs=needs))
    if "attention" in selected:
      n, _, h = s.attn_heads
      for window, sinks, lengths, kind in ((None, 0, s.attn_causal, "causal"),
                                           (s.attn_window, s.attn_sinks, s.attn_sparse, "sparse")):
        for t in lengths:
          out.append(self._case(f"attention/{kind}/{tokens_name(t)}", "attention",
                                functools.partial(self.attention, t, window, sinks),
                                work=attention_flops(t, n, h, window, sinks),
                                prior_s=prior["attention"]))
    return out

  def _case(self, name: str, part: str, fn, work: float = 1.0, prior_s: float = 60.0,
            needs=("limits",)) -> Case:
    def run():
      before = self.exec_s
      fn()
      return self.exec_s - before
    return Case(name, part, run, work, prior_s, tuple(needs))

  def measure_limits(self):
    device, dtype = self.device, jnp.dtype(self.dtype)
    table = roofline.device_limits(device.device_kind)
    n = 8192 if device.platform != "cpu" else 1024
    mm = roofline.matmul_rate([device], dtype, n)
    bw = roofline.memory_bandwidth([device], 2048 if device.platform != "cpu" else 256)
    if table is None:
      limits = Limits(mm, bw, f"measured in this run ({n}^3 {dtype.name} matmul)",
                      "measured in this run (streaming y = 2x + 1)")
    else:
      limits = Limits(table[0], table[1], table[2], table[2])
    self.report.emit("matmul", mm, "FLOP/s", limits.flops, "FLOP/s", limits.flops_source,
                     n=n, dtype=dtype.name)
    self.report.emit("memory_bandwidth", bw, "bytes/s", limits.bandwidth, "bytes/s",
                     limits.bandwidth_source, kernel="y = 2x + 1, fp32, read + write")
    self.limits = limits

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
    secs = self.median_time(lambda: step(state, tokens, mask), self.reps)
    flops = 3 * forward_flops(cfg, s.train_batch, s.train_len)
    self.report.emit("train_step_mfu", flops / secs, "FLOP/s", self.limits.flops, "FLOP/s",
                     self.limits.flops_source, seconds=secs, model_flops=flops,
                     params=cfg.num_params(), tokens=s.train_batch * s.train_len,
                     tokens_per_s=s.train_batch * s.train_len / secs, peak_bytes=mem,
                     dtype=self.dtype, master_weights="float32", optimizer="adamw",
                     reps=self.reps)
    # The step is compiled and its state on the device: one more step, traced.
    self.profiles["train"] = profile(
        lambda: step(state, tokens, mask), self.profile_dir, "train",
        f"one train step (forward + backward + AdamW), {s.train_batch} x {s.train_len} tokens, "
        f"{cfg.num_params() / 1e6:.1f}M params, {self.dtype} compute")

  def _decode_bytes(self, int8: bool, batch: int, new: int) -> float:
    """Bytes one generate's decode reads (``roofline.decode_bytes``), from the
    config alone: the estimate of a case not yet built."""
    weights = self.cfg.num_params() * jnp.dtype(self.cfg.jnp_dtype).itemsize
    return roofline.decode_bytes(weights, roofline.kv_bytes_per_token(self.cfg, int8), batch,
                                 self.s.decode_prompt, new)

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
    total = self.median_time(gen, self.long_reps)
    pre = self.median_time(lambda: prefill(self.sample_params, ids, lens), self.reps)
    return total, pre

  @property
  def _sampling(self):
    from rlpt.sampling import SamplingParams
    return SamplingParams(1.0)

  def decode(self, int8: bool, b: int, kernel: str = "xla"):
    from rlpt.sampling.fast import FastSampler
    from rlpt.sampling.prefix import PrefixLayout
    from rlpt.sampling.quant import tree_bytes
    from rlpt.sampling.sampler import auto_decode_phases
    s, cfg = self.s, self.cfg
    weights = tree_bytes(self.sample_params)
    sampler = FastSampler(self.graphdef, cfg, s.decode_prompt, s.decode_new, 0, (),
                          PrefixLayout(1, int8, aligned=True, decode_kernel=kernel),
                          auto_decode_phases(s.decode_new))
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
                     decode_step_s=decode_s / s.decode_new, prefill_s=pre,
                     reps=self.long_reps, prefill_reps=self.reps, bytes_read=moved,
                     weight_bytes=weights, kv_bytes_per_token=kvb, binding=binding,
                     decode_phases=sampler.decode_phases, decode_kernel=kernel)

  def decode_profile(self):
    """A short generate at the largest decode batch (bf16 KV), compiled, then traced."""
    from rlpt.sampling.fast import FastSampler
    s = self.s
    b, new = max(s.decode_batches), s.profile_new
    sampler = FastSampler(self.graphdef, self.cfg, s.decode_prompt, new, 0, ())
    ids = jax.device_put(self.tokens(b, s.decode_prompt), self.device)
    lens = jnp.full((b,), s.decode_prompt, jnp.int32)
    gen = lambda: sampler.generate(self.sample_params, ids, lens, jax.random.key(1),
                                   self._sampling)
    jax.block_until_ready(gen())  # compiles
    kv = jnp.dtype(self.cfg.jnp_dtype).name
    self.profiles["decode"] = profile(
        gen, self.profile_dir, "decode",
        f"one FastSampler generate, batch {b}, {s.decode_prompt}-token prompts + {new} new "
        f"tokens ({kv} KV cache; the op counts include the prefill and {new} decode steps)")

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
    self.exec_s += secs
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
    t_plain = self.median_time(lambda: plain.generate(self.sample_params, ids, lens,
                                                 jax.random.key(2), self._sampling), self.reps)
    t_spec = self.median_time(lambda: spec.generate(self.sample_params, draft, ids, lens,
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

  def attention(self, t: int, window: int | None, sinks: int):
    """One layer's forward + backward at ``t`` tokens (its arrays die on return)."""
    from rlpt.attention import blockwise_attention
    s = self.s
    capacity = (self.device.memory_stats() or {}).get("bytes_limit")
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
    secs = self.median_time(lambda: step(q, kk, v, pos), self.reps)
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
    for i in range(1, 1 + self.long_reps):
      state, tm = step(state, i)
      times.append(tm)
    total, gen, ref, upd = (statistics.median(t[k] for t in times) for k in range(4))
    self.exec_s += (self.long_reps + 1) * total
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
                                  "host": total - gen - ref - upd}, reps=self.long_reps)


def main(_):
  common.quiet_libraries()
  unknown = sorted(set(_PARTS.value) - set(PARTS))
  if unknown:
    raise app.UsageError(f"--parts has {unknown}; expected some of {list(PARTS)}.")
  out = _OUT.value
  os.makedirs(out, exist_ok=True)
  # launch.common's --compilation_cache, but defaulting to OUT/xla_cache: a
  # device run's programs stay with its figures. Set before anything compiles
  # (JAX reads it on the first compile), and keep every program however fast
  # it compiled: a full run has dozens, each worth seconds on the next run.
  cache = (common.COMPILATION_CACHE.value if flags.FLAGS["compilation_cache"].present
           else os.path.join(out, "xla_cache"))
  if cache:
    from rlpt.device import use_compilation_cache
    use_compilation_cache(cache, min_compile_secs=0.0)
  device = jax.devices()[0]
  dtype = _DTYPE.value or ("float32" if device.platform == "cpu" else "bfloat16")
  shapes = QUICK if _QUICK.value else FULL
  budget = _BUDGET.value
  if budget is None:
    budget = ACCELERATOR_BUDGET_S if device.platform != "cpu" else None
  budget = budget if budget and budget > 0 else None
  reps = _REPS.value
  long_reps = _LONG_REPS.value or (reps if _QUICK.value else 2)
  lines = Lines(os.path.join(out, "device.jsonl"))
  report = Report(lines, device)
  parts = Parts(shapes, report, device, dtype, reps, long_reps, out)
  shape_set = "quick" if _QUICK.value else "full"
  runner = Runner(lines, None if budget is None else _T0 + budget,
                  os.path.join(cache, "case_seconds.json") if cache else None,
                  f"{device.device_kind} {shape_set} {dtype} reps {reps}/{long_reps}")
  print(f"device: {device.device_kind} ({device.platform}), dtype {dtype}, {shape_set} shapes, "
        f"budget {'none' if budget is None else f'{budget:.0f} s'}, "
        f"compilation cache {cache or 'off'}; {time.time() - _T0:.1f} s since start",
        file=sys.stderr, flush=True)
  finished = runner.run_until_deadline(parts.cases(_PARTS.value))
  facts = runner.summary()
  parts_s = {}
  for c in facts["cases"]:
    if c["status"] == "done":
      parts_s[c["part"]] = parts_s.get(c["part"], 0.0) + c["seconds"]
  summary = {"device": device.device_kind, "platform": device.platform, "dtype": dtype,
             "quick": _QUICK.value, "parts_s": parts_s, "wall_s": time.time() - _T0,
             "budget_s": budget, **facts, "jax": jax.__version__,
             "figures": len(report.rows), "reps": reps, "long_reps": long_reps,
             "compilation_cache": cache or None, "profiles": dict(parts.profiles),
             "shapes": dataclasses.asdict(shapes)}
  with open(os.path.join(out, "summary.json"), "w") as f:
    json.dump(summary, f, indent=1)
  print(f"wall {summary['wall_s']:.0f} s; {len(report.rows)} figures in {report.path}"
        + (f"; stopped by the {budget:.0f} s budget" if not finished else "")
        + (f"; skipped: {', '.join(facts['cases_skipped'])}" if facts["cases_skipped"] else "")
        + (f"; failed: {', '.join(facts['cases_failed'])}" if facts["cases_failed"] else ""),
        file=sys.stderr, flush=True)
  code = 1 if facts["cases_failed"] else 0
  if not finished:
    # The worker is still inside a case (likely blocked in XLA): it cannot be
    # joined, and a normal exit would wait for it. Everything is written.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
  if code:
    sys.exit(code)


if __name__ == "__main__":
  app.run(main)
