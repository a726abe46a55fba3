"""Sections shared by experiments: the optimizer, the mesh, the sharding rules, the domains and LoRA."""

from __future__ import annotations

import dataclasses

from rlpt.config.model import LoraConfig
from rlpt.config.schema import ConfigError, _require
from rlpt.config.rules import DEFAULT_RULES, SAMPLE_RULES, check_rules


@dataclasses.dataclass(frozen=True)
class OptimConfig:
  """AdamW with linear warm-up then a constant (or cosine-decayed) rate."""

  learning_rate: float = 1e-4
  warmup_steps: int = 0
  decay: str = "constant"
  weight_decay: float = 0.0
  b1: float = 0.9
  b2: float = 0.99
  grad_clip: float = 1.0

  def __post_init__(self):
    _require(self.learning_rate > 0, f"optim.learning_rate must be > 0, got {self.learning_rate}.")
    _require(self.warmup_steps >= 0, f"optim.warmup_steps must be >= 0, got {self.warmup_steps}.")
    _require(self.decay in ("constant", "cosine"),
             f"optim.decay must be 'constant' or 'cosine', got '{self.decay}'.")
    _require(self.weight_decay >= 0, f"optim.weight_decay must be >= 0, got {self.weight_decay}.")
    _require(0 <= self.b1 < 1 and 0 <= self.b2 < 1, f"optim.b1/b2 must be in [0, 1), got {self.b1}, {self.b2}.")
    _require(self.grad_clip > 0, f"optim.grad_clip must be > 0, got {self.grad_clip}.")


@dataclasses.dataclass(frozen=True)
class MeshConfig:
  """Device mesh sizes; -1 on one axis takes the remaining devices."""

  data: int = -1
  fsdp: int = 1
  sequence: int = 1
  tensor: int = 1

  def as_dict(self) -> dict[str, int]:
    return dataclasses.asdict(self)


RulesField = tuple[tuple[str, str | tuple[str, ...] | None], ...]


@dataclasses.dataclass(frozen=True)
class ShardingConfig:
  """The rules tables (logical axis -> mesh axes) of the two layouts.

  train_rules: the policy's, reference's and critic's parameters, optimizer
    state and training activations (FSDP + tensor by default).
  sample_rules: the policy copy the sampler reads and the KV cache (tensor
    parallel, replicated over data and fsdp by default); the trainer reshards
    the policy into it after every update.
  reference_memory: "device" keeps the frozen reference in accelerator memory;
    "pinned_host" keeps it in host memory and brings it in for its pass.
  """

  train_rules: RulesField = DEFAULT_RULES
  sample_rules: RulesField = SAMPLE_RULES
  reference_memory: str = "device"

  def __post_init__(self):
    for name in ("train_rules", "sample_rules"):
      try:
        check_rules(getattr(self, name), f"sharding.{name}")
      except ValueError as e:
        raise ConfigError(str(e)) from e
    _require(self.reference_memory in ("device", "pinned_host"),
             f"sharding.reference_memory must be 'device' or 'pinned_host', got "
             f"'{self.reference_memory}'.")


@dataclasses.dataclass(frozen=True)
class DomainsConfig:
  """Which registered environments a run draws tasks from, and how often.

  files: dataset files to register as domains before the run starts, each
    "rlpt/dataset-<name>-v0=path[:verifier][?field=column&...]"
    (environments.datasets.parse_description). Their ids join ``ids`` (in
    order, after it) unless ``ids`` already lists them.
  """

  ids: tuple[str, ...] = ()
  weights: tuple[float, ...] = ()
  files: tuple[str, ...] = ()

  def __post_init__(self):
    file_ids = []
    for i, desc in enumerate(self.files):
      domain_id, sep, path = desc.partition("=") if isinstance(desc, str) else ("", "", "")
      _require(bool(sep and path and domain_id.strip()),
               f"domains.files[{i}] is {desc!r}; expected 'rlpt/dataset-<name>-v0=path[:verifier]"
               "[?field=column&...]'.")
      file_ids.append(domain_id.strip())
    _require(len(set(file_ids)) == len(file_ids), f"domains.files names one id twice: {file_ids}.")
    object.__setattr__(self, "ids", tuple(self.ids) + tuple(d for d in file_ids if d not in self.ids))
    _require(len(self.ids) > 0, "domains.ids is empty; list at least one registered domain id.")
    _require(len(set(self.ids)) == len(self.ids), f"domains.ids has duplicates: {self.ids}.")
    if self.weights:
      _require(len(self.weights) == len(self.ids),
               f"domains.weights has {len(self.weights)} entries for {len(self.ids)} domains.")
      _require(all(w >= 0 for w in self.weights) and sum(self.weights) > 0,
               f"domains.weights must be >= 0 with a positive sum, got {self.weights}.")


@dataclasses.dataclass(frozen=True)
class LoraSection:
  """LoRA fine-tuning of the policy; rank 0 trains every weight.

  With rank > 0 the trainable state is the adapters alone; the frozen base is
  the reference policy too, so LoRA costs no extra weights for the KL term.
  """

  rank: int = 0
  alpha: float = 16.0
  targets: tuple[str, ...] = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")

  def __post_init__(self):
    _require(self.rank >= 0, f"lora.rank must be >= 0 (0 = full fine-tuning), got {self.rank}.")
    if self.rank:
      self.lora_config()

  def lora_config(self):
    try:
      return LoraConfig(rank=self.rank, alpha=self.alpha, targets=self.targets)
    except ValueError as e:
      raise ConfigError(str(e)) from e
