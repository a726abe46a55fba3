"""Per-device memory of an RL run (policy, reference, critic) on a mesh, without allocating.

Parameters, optimizer state, gradients and the KV cache come from abstract
arrays (``nnx.eval_shape`` / ``jax.eval_shape``) laid out by the rules on a
``jax.sharding.AbstractMesh``, so any device count can be planned on a laptop;
they are exact for this codebase's models (fp32 parameters, Adam moments
sharded like the parameters, KV cache in the model dtype). Activations are an
estimate (see ``activation_bytes``): what backpropagation keeps per layer
without rematerialisation, plus the fp32 logits.

    python -m launch.plan --config=experiments/plan_llama_70b.py
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import AbstractMesh, AxisType, NamedSharding

from rlpt.device.placement import opt_state_shardings
from rlpt.models import ModelConfig, Transformer, ValueModel, init_cache
from rlpt.sharding.mesh import MESH_AXES, resolve_mesh_shape
from rlpt.sharding.rules import (
  K_CACHE_AXES,
  KV_CACHE_AXES,
  Rules,
  logical_to_spec,
  per_device_bytes,
  state_shardings,
)

GiB = 1024 ** 3


def abstract_mesh(shape: Mapping[str, int], num_devices: int) -> AbstractMesh:
  sizes = resolve_mesh_shape(shape, num_devices)
  return AbstractMesh(sizes, MESH_AXES, axis_types=(AxisType.Auto,) * len(MESH_AXES))


def axis_shards(name: str, rules: Rules, mesh) -> int:
  """How many ways the rules split logical axis ``name`` on ``mesh``."""
  target = logical_to_spec((name,), rules)[0]
  names = () if target is None else ((target,) if isinstance(target, str) else target)
  return math.prod(mesh.shape[n] for n in names)


def _adam() -> optax.GradientTransformation:
  # Same state layout as rlpt.steps.make_optimizer (clip + adamw): mu, nu, count.
  return optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-4))


@functools.lru_cache(maxsize=8)
def _abstract_params(model_cls, model_cfg: ModelConfig) -> nnx.State:
  return nnx.split(nnx.eval_shape(lambda: model_cls(model_cfg, nnx.Rngs(0))))[1]


def model_bytes(model_cls, model_cfg: ModelConfig, mesh, rules: Rules) -> dict[str, int]:
  """Per-device bytes of a model's params, Adam state and gradients under ``rules``."""
  params = _abstract_params(model_cls, model_cfg)
  sh = state_shardings(params, mesh, rules)
  opt = _adam()
  opt_abstract = jax.eval_shape(opt.init, params)
  opt_sh = opt_state_shardings(opt, params, sh, mesh)
  p = per_device_bytes(params, sh)
  return {"params": p, "optimizer": per_device_bytes(opt_abstract, opt_sh), "gradients": p,
          "count": sum(x.size for x in jax.tree.leaves(params))}


def kv_cache_bytes(model_cfg: ModelConfig, batch: int, length: int, mesh, rules: Rules) -> int:
  cache = jax.eval_shape(lambda: init_cache(model_cfg, batch, length))
  k_sh = NamedSharding(mesh, logical_to_spec(K_CACHE_AXES, rules))
  v_sh = NamedSharding(mesh, logical_to_spec(KV_CACHE_AXES, rules))
  shs = type(cache)(tuple(k_sh for _ in cache.k), tuple(v_sh for _ in cache.v))
  for x, sh in zip(jax.tree.leaves(cache), jax.tree.leaves(shs)):
    sh.shard_shape(x.shape)  # raises if a dimension does not divide
  return per_device_bytes(cache, shs)


def _tokens_per_device(batch: int, seq_len: int, mesh, rules: Rules) -> float:
  """Tokens of a [batch, seq_len] micro-batch on one device: rows split by the
  batch rule, positions by the seq rule (the sequence axis of long contexts)."""
  return (batch / axis_shards("batch", rules, mesh)) * (seq_len / axis_shards("seq", rules, mesh))


def activation_bytes(cfg: ModelConfig, batch: int, seq_len: int, mesh, rules: Rules) -> int:
  """Estimated per-device bytes backprop keeps of the trunk for one train micro-batch.

  Per token and layer, in the activation dtype (``a`` bytes): the residual
  stream in, the two norm outputs, the attention projection's output, the
  second residual and the MLP's output (6 D); q and k before and after the
  rotary embedding, v and the attention output (3 N H + 3 K H, split by the
  heads / kv_heads rules); the MLP's gate, up, the gate's sigmoid, the
  activation, the product and one temporary XLA keeps beside them (6 F, split
  by the mlp rule); and in fp32, for dense attention the scores,
  probabilities and mask over all S keys (3 N S), for the blockwise kernels
  only each query's log-sum-exp (N: they recompute a block's scores in the
  backward pass). Tokens are split by the batch and seq rules. The output
  head's logits are ``scoring_bytes``. Calibrated against XLA's analysis of
  the compiled update (fp32, CPU, the difference between one and three
  layers: within 1% per token and layer for dense attention, 1-6% for
  blockwise; benchmarks/scoring_memory.py compares whole plans).
  """
  a = jnp.dtype(cfg.dtype).itemsize
  shards = lambda name: axis_shards(name, rules, mesh)
  n, k, h, d, f = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.d_model, cfg.mlp_dim
  scores = 3 * n * seq_len if cfg.attention_impl == "dense" else n
  per_layer = (a * 6 * d + a * (3 * n * h / shards("heads") + 3 * k * h / shards("kv_heads"))
               + a * 6 * f / shards("mlp") + 4 * scores / shards("heads"))
  return int(_tokens_per_device(batch, seq_len, mesh, rules) * cfg.num_layers * per_layer)


# fp32 [tokens x vocab] blocks the update holds at its peak, measured from XLA's
# analysis (benchmarks/scoring_memory.py): the whole micro-batch's logits, their
# log-softmax and the logits' gradient; or, scoring by chunks, one chunk's
# recomputed logits, log-softmax, probabilities and gradient.
FULL_SCORING_BLOCKS = 3
CHUNK_SCORING_BLOCKS = 4


def scoring_bytes(cfg: ModelConfig, batch: int, seq_len: int, chunk: int, mesh,
                  rules: Rules) -> int:
  """Per-device bytes of the output head's fp32 logits in the update.

  ``chunk`` = 0: the whole micro-batch's [tokens x vocab] blocks; else the
  passes score ``chunk`` positions per row at a time (rlpt.scoring) and hold
  one chunk's blocks, the chunk's positions split by the seq rule like the
  sequence's. The vocabulary is split by its rule; the hidden states the
  chunks read are the trunk's (``activation_bytes``).
  """
  chunked = 0 < chunk < seq_len
  tokens = _tokens_per_device(batch, chunk if chunked else seq_len, mesh, rules)
  blocks = CHUNK_SCORING_BLOCKS if chunked else FULL_SCORING_BLOCKS
  return int(tokens * blocks * 4 * cfg.vocab_size / axis_shards("vocab", rules, mesh))


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
  """Bytes per device of each part of a run (``rows``), and on host (``host_rows``)."""

  mesh: dict[str, int]
  rows: dict[str, int]
  host_rows: dict[str, int]
  param_counts: dict[str, int]
  device_memory_bytes: int

  @property
  def peak(self) -> int:
    """Resident state plus the larger of the two phases: sampling (KV cache)
    or an update (gradients, activations and scoring logits of the policy
    step, the larger one)."""
    r = self.rows
    resident = sum(v for k, v in r.items()
                   if k not in ("policy gradients", "value gradients", "KV cache (sampling)",
                                "activations (policy step)", "scoring logits (policy step)"))
    update = (r["policy gradients"] + r["activations (policy step)"]
              + r["scoring logits (policy step)"])
    return resident + max(r["KV cache (sampling)"], update)

  def table(self) -> str:
    mesh = " x ".join(f"{k}={v}" for k, v in self.mesh.items())
    lines = [f"mesh {mesh} ({math.prod(self.mesh.values())} devices); parameters: "
             + ", ".join(f"{k} {v / 1e9:.2f}B" for k, v in self.param_counts.items()),
             "", "| per device | GiB |", "|---|---:|"]
    lines += [f"| {k} | {v / GiB:.2f} |" for k, v in self.rows.items()]
    lines.append(f"| **peak** (resident + max(sampling, update)) | **{self.peak / GiB:.2f}** |")
    if self.device_memory_bytes:
      verdict = "fits" if self.peak <= self.device_memory_bytes else "does NOT fit"
      lines.append(f"| device memory | {self.device_memory_bytes / GiB:.2f} ({verdict}) |")
    for k, v in self.host_rows.items():
      lines.append(f"| host: {k} | {v / GiB:.2f} |")
    return "\n".join(lines)


def memory_plan(model_cfg: ModelConfig, mesh_shape: Mapping[str, int], num_devices: int,
                train_rules: Rules, sample_rules: Rules, *, train_batch: int, seq_len: int,
                sample_batch: int, sample_len: int, reference: bool = True,
                reference_memory: str = "device", value_model: bool = True,
                device_memory_gib: float = 0.0, logprob_chunk: int = 0) -> MemoryPlan:
  """Per-device bytes of a policy (+ reference, + critic) run; nothing is allocated.

  ``train_batch`` sequences of ``seq_len`` tokens per update micro-batch,
  scored ``logprob_chunk`` positions at a time (0: whole sequences);
  ``sample_batch`` sequences decoded together with a KV cache of
  ``sample_len`` (prompt + new tokens).
  """
  mesh = abstract_mesh(mesh_shape, num_devices)
  for what, size, rules in (("train_batch", train_batch, train_rules),
                            ("sample_batch", sample_batch, sample_rules)):
    if size % axis_shards("batch", rules, mesh):
      raise ValueError(f"{what}={size} must be a multiple of the "
                       f"{axis_shards('batch', rules, mesh)} batch shards of mesh {dict(mesh.shape)}.")
  policy = model_bytes(Transformer, model_cfg, mesh, train_rules)
  sample = model_bytes(Transformer, model_cfg, mesh, sample_rules)
  rows = {"policy params": policy["params"], "policy optimizer (Adam)": policy["optimizer"],
          "policy gradients": policy["gradients"], "policy sampling copy": sample["params"]}
  host_rows = {}
  counts = {"policy": policy["count"]}
  if reference:
    if reference_memory == "pinned_host":
      # On the host each process holds its devices' shards.
      rows["reference params"] = 0
      host_rows["reference params (per device's shard)"] = policy["params"]
    else:
      rows["reference params"] = policy["params"]
  if value_model:
    value = model_bytes(ValueModel, model_cfg, mesh, train_rules)
    counts["value"] = value["count"]
    rows.update({"value params": value["params"], "value optimizer (Adam)": value["optimizer"],
                 "value gradients": value["gradients"]})
  else:
    rows.update({"value params": 0, "value optimizer (Adam)": 0, "value gradients": 0})
  rows["KV cache (sampling)"] = kv_cache_bytes(model_cfg, sample_batch, sample_len, mesh,
                                               sample_rules)
  rows["activations (policy step)"] = activation_bytes(model_cfg, train_batch, seq_len, mesh,
                                                       train_rules)
  rows["scoring logits (policy step)"] = scoring_bytes(model_cfg, train_batch, seq_len,
                                                       logprob_chunk, mesh, train_rules)
  return MemoryPlan({k: v for k, v in mesh.shape.items()}, rows, host_rows, counts,
                    int(device_memory_gib * GiB))
