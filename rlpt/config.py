"""Typed run configuration, built from an ``ml_collections.ConfigDict`` at the boundary.

Experiment files return ConfigDicts (easy to override from the command line);
``from_config_dict`` turns one into nested frozen dataclasses, rejecting
unknown keys (naming them, with the closest known key), wrong types and
impossible values before anything is compiled. Library code receives only the
small dataclass it needs.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from rlpt.models import ModelConfig

T = TypeVar("T")


class ConfigError(ValueError):
  """A user-facing configuration mistake."""


def _check_type(path: str, value: Any, tp: Any) -> Any:
  origin = typing.get_origin(tp)
  if dataclasses.is_dataclass(tp):
    return from_config_dict(tp, value, path)
  if origin in (types.UnionType, typing.Union):
    errors = []
    for arm in typing.get_args(tp):
      if arm is type(None):
        if value is None:
          return None
        continue
      try:
        return _check_type(path, value, arm)
      except ConfigError as e:
        errors.append(str(e))
    raise ConfigError(f"{path}={value!r} does not match {tp}.")
  if origin is tuple:
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
      raise ConfigError(f"{path} must be a list, got {type(value).__name__} {value!r}.")
    args = typing.get_args(tp)
    if len(args) == 2 and args[1] is Ellipsis:
      return tuple(_check_type(f"{path}[{i}]", v, args[0]) for i, v in enumerate(value))
    if len(args) != len(value):
      raise ConfigError(f"{path} must have {len(args)} entries, got {len(value)}.")
    return tuple(_check_type(f"{path}[{i}]", v, a) for i, (v, a) in enumerate(zip(value, args)))
  if origin is dict or tp is dict:
    if not isinstance(value, Mapping):
      raise ConfigError(f"{path} must be a mapping, got {value!r}.")
    kt, vt = typing.get_args(tp) or (str, Any)
    return {_check_type(f"{path}.key", k, kt): _check_type(f"{path}.{k}", v, vt)
            for k, v in value.items()}
  if tp is Any:
    return value
  if tp is float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
      raise ConfigError(f"{path} must be a number, got {type(value).__name__} {value!r}.")
    return float(value)
  if tp is int:
    if isinstance(value, bool) or not isinstance(value, int):
      raise ConfigError(f"{path} must be an integer, got {type(value).__name__} {value!r}.")
    return value
  if tp is bool or tp is str:
    if not isinstance(value, tp):
      raise ConfigError(f"{path} must be a {tp.__name__}, got {type(value).__name__} {value!r}.")
    return value
  raise TypeError(f"unsupported config field type {tp} at {path}")


def from_config_dict(cls: type[T], cfg: Mapping[str, Any], path: str = "config") -> T:
  """Builds dataclass ``cls`` from a (nested) mapping, strictly.

  Missing keys take the dataclass defaults; unknown keys are an error naming
  the key and suggesting the closest field.
  """
  if hasattr(cfg, "to_dict"):
    cfg = cfg.to_dict()
  if not isinstance(cfg, Mapping):
    raise ConfigError(f"{path} must be a mapping of fields of {cls.__name__}, got {cfg!r}.")
  hints = typing.get_type_hints(cls)
  fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
  unknown = [k for k in cfg if k not in fields]
  if unknown:
    k = unknown[0]
    close = difflib.get_close_matches(k, list(fields), n=1)
    hint = f" Did you mean '{path}.{close[0]}'?" if close else ""
    raise ConfigError(f"Unknown config key '{path}.{k}'.{hint} Known keys of {path}: {sorted(fields)}.")
  kwargs = {k: _check_type(f"{path}.{k}", v, hints[k]) for k, v in cfg.items()}
  try:
    return cls(**kwargs)
  except ConfigError:
    raise
  except (ValueError, TypeError) as e:
    raise ConfigError(f"{path}: {e}") from e


def to_json(cfg: Any) -> str:
  return json.dumps(dataclasses.asdict(cfg), indent=2, sort_keys=True)


def _require(cond: bool, msg: str):
  if not cond:
    raise ConfigError(msg)


# ----------------------------------------------------------------------------
# Sections shared by experiments.


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


@dataclasses.dataclass(frozen=True)
class DomainsConfig:
  """Which registered environments a run draws tasks from, and how often."""

  ids: tuple[str, ...] = ()
  weights: tuple[float, ...] = ()

  def __post_init__(self):
    _require(len(self.ids) > 0, "domains.ids is empty; list at least one registered domain id.")
    _require(len(set(self.ids)) == len(self.ids), f"domains.ids has duplicates: {self.ids}.")
    if self.weights:
      _require(len(self.weights) == len(self.ids),
               f"domains.weights has {len(self.weights)} entries for {len(self.ids)} domains.")
      _require(all(w >= 0 for w in self.weights) and sum(self.weights) > 0,
               f"domains.weights must be >= 0 with a positive sum, got {self.weights}.")


# ----------------------------------------------------------------------------
# Supervised pre-training of the tiny base model.


@dataclasses.dataclass(frozen=True)
class PretrainConfig:
  seed: int = 0
  model: ModelConfig = ModelConfig()
  domains: DomainsConfig = DomainsConfig(ids=("rlpt/math-add-easy-v0",))
  steps: int = 1000
  batch_size: int = 64
  max_len: int = 80
  optim: OptimConfig = OptimConfig(learning_rate=3e-3, warmup_steps=50, decay="cosine")
  log_every: int = 50

  def __post_init__(self):
    _require(self.steps > 0, f"steps must be > 0, got {self.steps}.")
    _require(self.batch_size > 0, f"batch_size must be > 0, got {self.batch_size}.")
    _require(self.max_len > 2, f"max_len must be > 2, got {self.max_len}.")


# ----------------------------------------------------------------------------
# RL post-training.


@dataclasses.dataclass(frozen=True)
class BaseModelConfig:
  """Where the starting policy comes from.

  ``checkpoint`` names a saved base directly; when empty, the base is built by
  the pre-training experiment ``experiment`` (with argument ``arg``) and cached
  under ``cache_dir`` keyed by that config's fingerprint.
  """

  checkpoint: str = ""
  experiment: str = "pretrain_base"
  arg: str = ""
  cache_dir: str = ".cache/rlpt/bases"


@dataclasses.dataclass(frozen=True)
class RolloutConfig:
  batch_size: int = 64
  group_size: int = 8
  max_prompt_len: int = 72
  max_new_tokens: int = 24
  temperature: float = 1.0
  top_k: int = 0
  top_p: float = 1.0
  env_workers: int = 4

  def __post_init__(self):
    _require(self.batch_size > 0, f"rollout.batch_size must be > 0, got {self.batch_size}.")
    _require(self.group_size >= 1, f"rollout.group_size must be >= 1, got {self.group_size}.")
    _require(self.batch_size % self.group_size == 0,
             f"rollout.batch_size={self.batch_size} completions is not divisible by "
             f"rollout.group_size={self.group_size}.")
    _require(self.max_prompt_len > 1, f"rollout.max_prompt_len must be > 1, got {self.max_prompt_len}.")
    _require(self.max_new_tokens > 0, f"rollout.max_new_tokens must be > 0, got {self.max_new_tokens}.")
    _require(self.temperature > 0,
             f"rollout.temperature must be > 0 for RL sampling, got {self.temperature}.")
    _require(self.env_workers > 0, f"rollout.env_workers must be > 0, got {self.env_workers}.")

  @property
  def prompts_per_step(self) -> int:
    return self.batch_size // self.group_size


@dataclasses.dataclass(frozen=True)
class RLConfig:
  advantage: str = "grpo"
  policy_loss: str = "ppo_clip"
  clip_eps: float = 0.2
  kl_beta: float = 0.04
  kl_estimator: str = "k3"
  aggregation: str = "token-mean"
  ppo_epochs: int = 1
  minibatches: int = 1

  def __post_init__(self):
    _require(self.ppo_epochs > 0, f"rl.ppo_epochs must be > 0, got {self.ppo_epochs}.")
    _require(self.minibatches > 0, f"rl.minibatches must be > 0, got {self.minibatches}.")


@dataclasses.dataclass(frozen=True)
class EvalConfig:
  every: int = 25
  tasks_per_domain: int = 64
  temperature: float = 0.0

  def __post_init__(self):
    _require(self.every > 0, f"eval.every must be > 0, got {self.every}.")
    _require(self.tasks_per_domain > 0,
             f"eval.tasks_per_domain must be > 0, got {self.tasks_per_domain}.")
    _require(self.temperature >= 0, f"eval.temperature must be >= 0, got {self.temperature}.")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """A whole RL run."""

  seed: int = 0
  steps: int = 100
  base: BaseModelConfig = BaseModelConfig()
  domains: DomainsConfig = DomainsConfig(ids=("rlpt/math-add-easy-v0",))
  rollout: RolloutConfig = RolloutConfig()
  rl: RLConfig = RLConfig()
  optim: OptimConfig = OptimConfig(learning_rate=1e-4)
  eval: EvalConfig = EvalConfig()
  mesh: MeshConfig = MeshConfig()
  log_every: int = 1
  progress: bool = True

  def __post_init__(self):
    from rlpt.rl import ADVANTAGE_ESTIMATORS, lookup
    _require(self.steps > 0, f"steps must be > 0, got {self.steps}.")
    _require(self.log_every > 0, f"log_every must be > 0, got {self.log_every}.")
    try:
      lookup(ADVANTAGE_ESTIMATORS, self.rl.advantage)
    except ValueError as e:
      raise ConfigError(f"rl.advantage: {e}") from e
    if self.rl.advantage == "grpo":
      _require(self.rollout.group_size >= 2,
               f"rollout.group_size must be >= 2 for GRPO (advantages are relative to the "
               f"group), got {self.rollout.group_size}.")
    _require(self.rollout.batch_size % self.rl.minibatches == 0,
             f"rollout.batch_size={self.rollout.batch_size} is not divisible by "
             f"rl.minibatches={self.rl.minibatches}.")
    self.loss_config()

  def loss_config(self):
    from rlpt.rl import LossConfig
    try:
      return LossConfig(policy_loss=self.rl.policy_loss, clip_eps=self.rl.clip_eps,
                        kl_beta=self.rl.kl_beta, kl_estimator=self.rl.kl_estimator,
                        aggregation=self.rl.aggregation)
    except ValueError as e:
      raise ConfigError(f"rl: {e}") from e
