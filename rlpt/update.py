"""The host side of an RL update: what it reads of the run's config
(`UpdateConfig`, within the actor's `ActorConfig`), and how a graded batch is
laid out and split.

``plan_update`` decides, before any device pass, how the batch's rows pack
(or which prompt prefix its groups share), and the row order of every epoch's
minibatches, drawn from ``rlpt.keys`` (purpose ``minibatch_order``, the step):
the same step of the same run always splits the same way. ``minibatch`` then
cuts one minibatch out of the whole batch's arrays, by field name, packed like
the batch when it packs. Nothing here touches a device.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, NamedTuple

import numpy as np
from flax import nnx

from rlpt.config import LoraSection, OptimConfig, RLConfig, TrainConfig
from rlpt.keys import numpy_rng
from rlpt.models import ModelConfig
from rlpt.packing import Packing
from rlpt.rl import LossConfig, ValueLossConfig
from rlpt.sampling import SamplingParams
from rlpt.steps import RLBatch, SharedPrefix

class Base(NamedTuple):
  """A resolved base model: its config, graph and parameters (host or placed)."""
  model_cfg: ModelConfig
  graphdef: nnx.GraphDef
  params: nnx.State


@dataclasses.dataclass(frozen=True)
class UpdateConfig:
  """What the update reads of a run's config (`from_train` builds it)."""

  rl: RLConfig
  loss: LossConfig
  value_loss: ValueLossConfig
  sampling: SamplingParams   # the rollout's: log-probs are of the distribution sampled
  group_size: int
  batch_size: int
  max_new_tokens: int
  scoring_pass: bool         # behaviour log-probs from a policy pass before the update
  seed: int
  pad_id: int                # the tokenizer's (packing finds each row's real tokens)
  max_len: int = 0           # longest sequence a batch holds (prompt + new tokens; 0: unknown)

  @classmethod
  def from_train(cls, cfg: TrainConfig, pad_id: int) -> "UpdateConfig":
    ro = cfg.rollout
    return cls(cfg.rl, cfg.loss_config(), cfg.value_loss_config(),
               SamplingParams(ro.temperature, ro.top_k, ro.top_p), ro.group_size, ro.batch_size,
               ro.max_new_tokens, cfg.recomputes_old_logp and not cfg.tis_in_step, cfg.seed,
               pad_id, ro.max_prompt_len + ro.max_new_tokens)


@dataclasses.dataclass(frozen=True)
class ActorConfig:
  """What the actor reads of a run's config (`from_train` builds it).

  ``value_optim``: the critic's optimizer (None: no critic). ``steps``: the
  run's updates (the optimizers' schedules). ``sample_copy``: the sampler's
  weights must not alias the training copy (an asynchronous producer keeps
  sampling with them while the update donates it). ``reference_memory``:
  where the frozen reference waits ("device" or "pinned_host").
  """

  update: UpdateConfig
  optim: OptimConfig
  lora: LoraSection
  value_optim: OptimConfig | None
  steps: int
  sample_copy: bool = False
  reference_memory: str = "device"

  @classmethod
  def from_train(cls, cfg: TrainConfig, pad_id: int) -> "ActorConfig":
    return cls(UpdateConfig.from_train(cfg, pad_id), cfg.optim, cfg.lora,
               cfg.value.optim if cfg.uses_value_model else None, cfg.steps,
               cfg.rollout.max_staleness > 0, cfg.sharding.reference_memory)


# RLBatch fields with one row per sequence (segments are the packing's).
ROW_FIELDS = ("tokens", "loss_mask", "old_logp", "ref_logp", "advantages")


@dataclasses.dataclass(frozen=True)
class UpdatePlan:
  """packing: how the whole batch packs (None: whole rows). shared: the prefix
  its groups share (None: none, or packing). orders: one row order per epoch;
  minibatch k of an epoch is its k-th run of ``batch_size / minibatches`` rows.
  metrics: ``batch/*`` figures of the layout."""

  packing: Packing | None
  shared: SharedPrefix | None
  orders: tuple[np.ndarray, ...]
  minibatches: int
  metrics: dict


def minibatch_orders(seed: int, step: int, batch_size: int, minibatches: int, epochs: int,
                     group: int | None) -> tuple[np.ndarray, ...]:
  """Each epoch's row order: in order with one minibatch, else shuffled (whole
  groups of ``group`` rows together, when the groups share a prefix)."""
  if minibatches == 1:
    return tuple(np.arange(batch_size) for _ in range(epochs))
  rng = numpy_rng(seed, "minibatch_order", step)
  if group is not None:
    return tuple((rng.permutation(batch_size // group)[:, None] * group + np.arange(group)).ravel()
                 for _ in range(epochs))
  return tuple(rng.permutation(batch_size) for _ in range(epochs))


def plan_update(tokens_BxL: np.ndarray, loss_mask_BxT: np.ndarray, step: int, *, seed: int,
                minibatches: int, epochs: int, packing: Callable[..., Packing | None],
                shared_prefix: Callable[[np.ndarray], SharedPrefix | None],
                group: int | None = None) -> UpdatePlan:
  """The layout and the minibatch orders of update ``step``. ``packing(tokens,
  loss_mask)`` and ``shared_prefix(tokens)`` are the actor's (None: off);
  ``group``: rows of one prompt, whose prefix packed rows hold once (then
  minibatches are drawn as whole groups)."""
  packed = packing(tokens_BxL, loss_mask_BxT)
  shared = None if packed is not None else shared_prefix(tokens_BxL)
  if shared is not None:
    prefix = float(shared.length)
  elif packed is not None and packed.branch_B.any():
    prefix = float(packed.shared_B[packed.branch_B > 0].mean())  # mean over the branches
  else:
    prefix = 0.0
  metrics = {"batch/shared_prefix": prefix,
             # Token positions the reference pass and each update run (padding included).
             "batch/pass_tokens": float(tokens_BxL.size if packed is None else packed.num_rows * packed.width)}
  if packed is not None:
    metrics.update({"batch/packed_rows": float(packed.num_rows), "batch/packing_fill": packed.fill})
  keep = shared.group if shared is not None else group if packed is not None else None
  orders = minibatch_orders(seed, step, len(tokens_BxL), minibatches, epochs, keep)
  return UpdatePlan(packed, shared, orders, minibatches, metrics)


def rows(batch: RLBatch, idx: np.ndarray) -> RLBatch:
  """The rows ``idx`` of an unpacked batch."""
  return batch._replace(**{f: getattr(batch, f)[idx] for f in ROW_FIELDS})


def packed(batch: RLBatch, packing: Packing, pad_id: int) -> RLBatch:
  """An unpacked batch laid out as ``packing`` packs it."""
  return RLBatch(packing.tokens(batch.tokens, pad_id),
                 **{f: packing.pack(getattr(batch, f)) for f in ROW_FIELDS[1:]},
                 segments=packing.segments())


def minibatch(batch: RLBatch, plan: UpdatePlan, epoch: int, k: int, pad_id: int,
              packing: Callable[..., Packing | None]) -> tuple[RLBatch, np.ndarray]:
  """Minibatch ``k`` of ``epoch`` (and its row indices into the batch): the
  whole batch packed as planned with one minibatch, else its rows packed anew."""
  size = len(batch.tokens) // plan.minibatches
  idx = plan.orders[epoch][k * size:(k + 1) * size]
  mini = rows(batch, idx)
  if plan.packing is not None and plan.minibatches == 1:
    return packed(mini, plan.packing, pad_id), idx
  if plan.packing is not None:
    return packed(mini, packing(mini.tokens, mini.loss_mask), pad_id), idx
  return mini, idx
