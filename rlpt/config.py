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
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from rlpt.models import ModelConfig
from rlpt.sharding import DEFAULT_RULES, SAMPLE_RULES, check_rules

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


def unknown_key_message(cls: type, keys: Sequence[str], path: str = "config") -> str | None:
  """None if ``keys`` (e.g. ["rollout", "temperature"]) is a field path of
  config dataclass ``cls``, else the message for its first unknown part."""
  for i, k in enumerate(keys):
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init} if dataclasses.is_dataclass(cls) else {}
    if not fields:  # a leaf (or a dict-valued field): no deeper names to check
      return None
    if k not in fields:
      close = difflib.get_close_matches(k, list(fields), n=1)
      hint = f" Did you mean '{path}.{close[0]}'?" if close else ""
      return f"Unknown config key '{path}.{k}'.{hint} Known keys of {path}: {sorted(fields)}."
    path = f"{path}.{k}"
    cls = typing.get_type_hints(cls)[k]
  return None


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
    raise ConfigError(unknown_key_message(cls, unknown[:1], path))
  kwargs = {k: _check_type(f"{path}.{k}", v, hints[k]) for k, v in cfg.items()}
  try:
    return cls(**kwargs)
  except ConfigError:
    raise
  except (ValueError, TypeError) as e:
    raise ConfigError(f"{path}: {e}") from e


def default_config_dict(cls: type):
  """A ConfigDict holding every field of dataclass ``cls`` at its default.

  Experiment files start from this and set what they change, so every field
  exists in the (locked) ConfigDict and can be overridden from the command
  line with ``--config.a.b=...``.
  """
  import ml_collections

  def conv(value):
    if dataclasses.is_dataclass(value):
      return ml_collections.ConfigDict(
          {f.name: conv(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init})
    if isinstance(value, dict):
      return ml_collections.ConfigDict({k: conv(v) for k, v in value.items()})
    return value

  return conv(cls())


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


# ----------------------------------------------------------------------------
# Supervised pre-training of the tiny base model.


@dataclasses.dataclass(frozen=True)
class PretrainConfig:
  """Supervised pre-training of a base on the domains' demonstrations.

  demo_noise: fraction of demonstrations with one wrong character, as in SFT
    data distilled from an imperfect teacher. The base inherits those slips;
    RL against the verifiers is what removes them.
  """

  seed: int = 0
  model: ModelConfig = ModelConfig()
  domains: DomainsConfig = DomainsConfig(ids=("rlpt/math-add-easy-v0",))
  steps: int = 1000
  batch_size: int = 64
  max_len: int = 80
  optim: OptimConfig = OptimConfig(learning_rate=3e-3, warmup_steps=50, decay="cosine")
  log_every: int = 50
  demo_noise: float = 0.0

  def __post_init__(self):
    _require(self.steps > 0, f"steps must be > 0, got {self.steps}.")
    _require(self.batch_size > 0, f"batch_size must be > 0, got {self.batch_size}.")
    _require(self.max_len > 2, f"max_len must be > 2, got {self.max_len}.")
    _require(0.0 <= self.demo_noise < 1.0, f"demo_noise must be in [0, 1), got {self.demo_noise}.")


# ----------------------------------------------------------------------------
# RL post-training.


@dataclasses.dataclass(frozen=True)
class BaseModelConfig:
  """Where the starting policy comes from.

  ``checkpoint`` names a saved base directly; ``hf_checkpoint`` a Hugging Face
  checkpoint directory (config.json + safetensors, rlpt.models.hf); when both
  are empty, the base is built by the pre-training experiment ``experiment``
  (with argument ``arg``) and cached under ``cache_dir`` keyed by that
  config's fingerprint.
  """

  checkpoint: str = ""
  hf_checkpoint: str = ""
  experiment: str = "pretrain_base"
  arg: str = ""
  cache_dir: str = ".cache/rlpt/bases"
  # How the run applies the base's attention (long contexts), without
  # changing its weights: "" keeps the base's own; else one of the model's
  # attention implementations (blockwise, sparse, ring; see
  # rlpt.attention.dispatch). attention_block_size 0 keeps the base's.
  attention_impl: str = ""
  attention_block_size: int = 0

  def __post_init__(self):
    from rlpt.models.config import ATTENTION_IMPLS
    _require(not self.attention_impl or self.attention_impl in ATTENTION_IMPLS,
             f"base.attention_impl must be '' (keep the base's) or one of {ATTENTION_IMPLS}, "
             f"got '{self.attention_impl}'.")
    _require(self.attention_block_size >= 0,
             f"base.attention_block_size must be >= 0 (0 = keep), got {self.attention_block_size}.")
    _require(not (self.checkpoint and self.hf_checkpoint),
             f"set base.checkpoint ('{self.checkpoint}') or base.hf_checkpoint "
             f"('{self.hf_checkpoint}'), not both.")


@dataclasses.dataclass(frozen=True)
class RolloutConfig:
  batch_size: int = 64
  group_size: int = 8
  max_prompt_len: int = 72
  max_new_tokens: int = 24
  temperature: float = 1.0
  top_k: int = 0
  top_p: float = 1.0
  # Asynchronous rollout: batch n is trained on while batches n+1..n+k are
  # generated and graded. staleness k = 0 is fully synchronous (exactly
  # on-policy); k >= 1 samples batch n with the policy of k updates earlier and
  # corrects with truncated importance weights (rl.tis_cap).
  staleness: int = 0
  # Per-domain staleness budgets {domain: k} (others use ``staleness``): that
  # domain's share of a batch is sampled with the policy of k updates
  # earlier, so slow environments may lag more while fast ones stay closer to
  # on-policy (e.g. staleness=0 with {"rlpt/code-...": 2}).
  domain_staleness: dict[str, int] = dataclasses.field(default_factory=dict)
  # Multi-turn episodes, later turns: False samples turn t+1 once every
  # episode's turn t is graded (reproducible); True samples each episode's
  # next turn as soon as its environment answers, so a slow environment holds
  # back only its own episode (which episodes share a sampler call then
  # depends on timing, and with it the random draws).
  interleave_turns: bool = False
  # Multi-turn episodes: graded attempts per episode (failed ones return the
  # verifier's feedback and the policy tries again in the same conversation),
  # and the turn budget of tool-using domains (0 = each domain's own). Every
  # turn's context, prompt and earlier turns included, is bounded by
  # max_prompt_len; an episode that would exceed it ends unsolved.
  max_attempts: int = 1
  max_turns: int = 0
  # The fast sampling path (rlpt.sampling.cached): int8 weight-only copy of
  # the policy for the sampler (re-quantized after every weight handoff), an
  # int8 KV cache, and a GRPO group sharing its prompt's prefilled cache.
  # With int8 the sampler's log-probs differ slightly from the policy's: the
  # trainer then recomputes the behaviour log-probs with the policy and
  # corrects with truncated importance weights (rl.tis_cap).
  weights_int8: bool = False
  kv_int8: bool = False
  share_prefix: bool = False
  # Decode in this many stages over a KV cache grown between them, so early
  # steps do not read the slots of tokens not yet generated (same samples;
  # each stage compiles its own loop). Worth it when completions are long next
  # to prompts; dense attention only (rlpt.sampling.sampler).
  decode_phases: int = 1

  @property
  def fast_sampler(self) -> bool:
    return self.weights_int8 or self.kv_int8 or self.share_prefix

  def __post_init__(self):
    _require(self.max_attempts >= 1, f"rollout.max_attempts must be >= 1, got {self.max_attempts}.")
    _require(self.max_turns >= 0,
             f"rollout.max_turns must be >= 0 (0 = each domain's own), got {self.max_turns}.")
    _require(self.batch_size > 0, f"rollout.batch_size must be > 0, got {self.batch_size}.")
    _require(self.group_size >= 1, f"rollout.group_size must be >= 1, got {self.group_size}.")
    _require(self.batch_size % self.group_size == 0,
             f"rollout.batch_size={self.batch_size} completions is not divisible by "
             f"rollout.group_size={self.group_size}.")
    _require(self.max_prompt_len > 1, f"rollout.max_prompt_len must be > 1, got {self.max_prompt_len}.")
    _require(self.max_new_tokens > 0, f"rollout.max_new_tokens must be > 0, got {self.max_new_tokens}.")
    _require(self.temperature > 0,
             f"rollout.temperature must be > 0 for RL sampling, got {self.temperature}.")
    _require(1 <= self.decode_phases <= self.max_new_tokens,
             f"rollout.decode_phases must be in [1, rollout.max_new_tokens={self.max_new_tokens}], "
             f"got {self.decode_phases}.")
    _require(self.staleness >= 0, f"rollout.staleness must be >= 0 (0 = synchronous), got "
             f"{self.staleness}.")
    for d, k in self.domain_staleness.items():
      _require(isinstance(k, int) and not isinstance(k, bool) and k >= 0,
               f"rollout.domain_staleness['{d}'] must be an int >= 0, got {k!r}.")

  @property
  def max_staleness(self) -> int:
    """How many batches the asynchronous producer runs ahead (0 = synchronous)."""
    return max([self.staleness, *self.domain_staleness.values()])

  def staleness_of(self, domain: str) -> int:
    return self.domain_staleness.get(domain, self.staleness)

  @property
  def prompts_per_step(self) -> int:
    return self.batch_size // self.group_size


@dataclasses.dataclass(frozen=True)
class SpeculativeConfig:
  """Speculative decoding of rollouts with a draft distilled from the policy.

  gamma: draft tokens per verification; 0 turns speculative decoding off.
    Samples follow the policy's distribution exactly and their log-probs are
    the policy's, so RL is unchanged; only speed differs.
  adaptive: re-choose gamma (1..max_gamma) between generate calls from the
    measured acceptance rate, for a draft step costing ``draft_cost`` target
    steps and ``verify_cost`` per extra verified token (see
    rlpt.sampling.speculative.AdaptiveGamma).
  draft_*: the draft's shape; it shares the policy's vocabulary, norms and RoPE.
  warmup_steps: distillation updates (forward KL) on the policy's own samples
    before the first RL step; then ``distill_steps`` updates on every
    ``distill_every``-th trained batch keep the draft close to the changing
    policy. draft_lr: the distillation optimizer's learning rate.
  """

  gamma: int = 0
  adaptive: bool = False
  max_gamma: int = 8
  draft_cost: float = 0.1
  verify_cost: float = 0.0
  draft_layers: int = 1
  draft_d_model: int = 64
  draft_heads: int = 2
  draft_kv_heads: int = 1
  draft_head_dim: int = 32
  draft_mlp_dim: int = 192
  draft_lr: float = 3e-3
  warmup_steps: int = 40
  distill_every: int = 1
  distill_steps: int = 1

  def __post_init__(self):
    _require(self.gamma >= 0, f"speculative.gamma must be >= 0 (0 = off), got {self.gamma}.")
    _require(self.max_gamma >= max(self.gamma, 1),
             f"speculative.max_gamma ({self.max_gamma}) must be >= max(gamma, 1).")
    _require(min(self.draft_layers, self.draft_d_model, self.draft_heads, self.draft_kv_heads,
                 self.draft_head_dim, self.draft_mlp_dim) > 0,
             "speculative.draft_* sizes must all be > 0.")
    _require(self.draft_heads % self.draft_kv_heads == 0,
             f"speculative.draft_heads ({self.draft_heads}) must be a multiple of "
             f"draft_kv_heads ({self.draft_kv_heads}).")
    _require(self.warmup_steps >= 0 and self.distill_every >= 1 and self.distill_steps >= 1,
             "speculative.warmup_steps must be >= 0, distill_every and distill_steps >= 1.")
    _require(self.draft_lr > 0, f"speculative.draft_lr must be > 0, got {self.draft_lr}.")

  def draft_config(self, policy: ModelConfig) -> ModelConfig:
    return dataclasses.replace(policy, d_model=self.draft_d_model, num_layers=self.draft_layers,
                               num_heads=self.draft_heads, num_kv_heads=self.draft_kv_heads,
                               head_dim=self.draft_head_dim, mlp_dim=self.draft_mlp_dim)


@dataclasses.dataclass(frozen=True)
class EnvConfig:
  """How environment jobs run (rlpt.rollout.envs, rlpt.rollout.scheduler).

  workers / sandbox_workers: threads of the cheap-verifier and sandbox
    resource classes (sandbox_workers 0 = workers).
  priorities: one per domains.ids entry (default all 0); higher-priority
    domains' jobs run first, ageing (one priority unit per aging_s seconds of
    waiting) keeps the rest from starving.
  retries / backoff_s: infrastructure failures are retried on a fresh,
    replayed environment, backing off backoff_s, 2 backoff_s, ...; then masked.
  job_timeout_s: a step running longer is a hung worker: it is failed (and
    retried) and its thread replaced.
  latency_s: sleep added to every sandbox step, to benchmark slow environments;
    latency_dist "fixed" (exactly latency_s) or "exponential" (mean latency_s:
    a long tail, as a shared remote sandbox has).
  backend: "local" (threads on this host) or "ray" (actors on a Ray cluster;
    ray_address "" starts a local one, ray_actors actors).
  """

  workers: int = 4
  sandbox_workers: int = 0
  priorities: tuple[float, ...] = ()
  retries: int = 2
  backoff_s: float = 0.05
  job_timeout_s: float = 120.0
  aging_s: float = 10.0
  latency_s: float = 0.0
  latency_dist: str = "fixed"
  backend: str = "local"
  ray_address: str = ""
  ray_actors: int = 2

  def __post_init__(self):
    _require(self.workers > 0, f"env.workers must be > 0, got {self.workers}.")
    _require(self.sandbox_workers >= 0,
             f"env.sandbox_workers must be >= 0 (0 = env.workers), got {self.sandbox_workers}.")
    _require(self.retries >= 0 and self.backoff_s >= 0,
             f"env.retries and env.backoff_s must be >= 0, got {self.retries}, {self.backoff_s}.")
    _require(self.job_timeout_s > 0 and self.aging_s > 0,
             f"env.job_timeout_s and env.aging_s must be > 0, got {self.job_timeout_s}, "
             f"{self.aging_s}.")
    _require(self.latency_s >= 0, f"env.latency_s must be >= 0, got {self.latency_s}.")
    _require(self.latency_dist in ("fixed", "exponential"),
             f"env.latency_dist must be 'fixed' or 'exponential', got '{self.latency_dist}'.")
    _require(self.backend in ("local", "ray"),
             f"env.backend must be 'local' or 'ray', got '{self.backend}'.")
    _require(self.ray_actors > 0, f"env.ray_actors must be > 0, got {self.ray_actors}.")


@dataclasses.dataclass(frozen=True)
class RLConfig:
  """The policy-gradient algorithm: estimator, loss and their knobs.

  Names are looked up in the registries of rlpt.rl (``ADVANTAGE_ESTIMATORS``,
  ``POLICY_LOSSES``, ``KL_ESTIMATORS``, ``AGGREGATIONS``); a value-based
  estimator ("gae") turns on the value model configured in ``value``.
  """

  advantage: str = "grpo"
  policy_loss: str = "ppo_clip"
  clip_eps: float = 0.2
  clip_eps_high: float = 0.28
  dual_clip_c: float = 3.0
  aggregation: str = "token-mean"
  entropy_coef: float = 0.0
  # KL to the reference: "loss" adds beta * KL to the objective; "reward"
  # subtracts beta * KL (k1 per token) from the reward before advantages.
  kl_beta: float = 0.04
  kl_estimator: str = "k3"
  kl_mode: str = "loss"
  kl_controller: str = "fixed"
  kl_target: float = 0.1
  kl_horizon: int = 10_000
  gamma: float = 1.0
  lam: float = 1.0
  whiten_advantages: bool = True
  ppo_epochs: int = 1
  minibatches: int = 1
  # DAPO dynamic sampling: drop groups whose rewards are all equal, refill.
  dynamic_sampling: bool = False
  max_rollouts_per_step: int = 3
  # Overlong responses (no stop token within max_new_tokens).
  overlong_filter: bool = False
  overlong_buffer: int = 0
  overlong_penalty: float = 1.0
  # Behaviour log-probs: with recompute_old_logp (forced on by an int8
  # sampler) the policy's own log-probs on the sampled batch become old_logp,
  # and each token's advantage is weighted by min(pi_old / pi_sampler,
  # tis_cap), truncated importance sampling for the sampler's mismatch.
  recompute_old_logp: bool = False
  tis_cap: float = 2.0
  # Where those weights are taken: inside the update's own forward pass when the
  # update allows it (see TrainConfig.tis_in_step), else by a scoring pass
  # first. False always runs the scoring pass (the same update, one more pass).
  tis_in_step: bool = True
  # The reference pass, old log-probs and the update run each GRPO group's
  # shared prompt once instead of once per sample (same log-probs and
  # gradients; rlpt.steps.SharedPrefix). With minibatches > 1, minibatches
  # are then drawn as whole groups.
  shared_prefix: bool = True

  def __post_init__(self):
    _require(self.tis_cap >= 1.0, f"rl.tis_cap must be >= 1, got {self.tis_cap}.")
    _require(self.ppo_epochs > 0, f"rl.ppo_epochs must be > 0, got {self.ppo_epochs}.")
    _require(self.minibatches > 0, f"rl.minibatches must be > 0, got {self.minibatches}.")
    _require(self.kl_mode in ("loss", "reward"),
             f"rl.kl_mode must be 'loss' or 'reward', got '{self.kl_mode}'.")
    _require(self.kl_controller in ("fixed", "adaptive"),
             f"rl.kl_controller must be 'fixed' or 'adaptive', got '{self.kl_controller}'.")
    _require(0 < self.gamma <= 1 and 0 <= self.lam <= 1,
             f"rl.gamma must be in (0, 1] and rl.lam in [0, 1], got {self.gamma}, {self.lam}.")
    _require(self.entropy_coef >= 0, f"rl.entropy_coef must be >= 0, got {self.entropy_coef}.")
    _require(self.max_rollouts_per_step >= 1,
             f"rl.max_rollouts_per_step must be >= 1, got {self.max_rollouts_per_step}.")
    _require(self.overlong_buffer >= 0 and self.overlong_penalty >= 0,
             f"rl.overlong_buffer and rl.overlong_penalty must be >= 0, got "
             f"{self.overlong_buffer}, {self.overlong_penalty}.")


@dataclasses.dataclass(frozen=True)
class ValueConfig:
  """The critic, used when the advantage estimator needs values (GAE).

  Its trunk starts as a copy of the base policy's decoder; the scalar head
  starts at zero so initial values are 0.
  """

  value_clip: float = 0.2
  aggregation: str = "token-mean"
  optim: OptimConfig = OptimConfig(learning_rate=1e-4)

  def __post_init__(self):
    _require(self.value_clip >= 0, f"value.value_clip must be >= 0 (0 = no clipping), got "
             f"{self.value_clip}.")


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
    from rlpt.models.lora import LoraConfig
    try:
      return LoraConfig(rank=self.rank, alpha=self.alpha, targets=self.targets)
    except ValueError as e:
      raise ConfigError(str(e)) from e


@dataclasses.dataclass(frozen=True)
class CurriculumConfig:
  """How training tasks are spread over domains (rlpt.curriculum).

  strategy: uniform | fixed (uses domains.weights) | temperature | success_band
    | learning_progress. ``params`` holds the strategy's own knobs, e.g.
    {"low": 0.1, "high": 0.9} for success_band.
  """

  strategy: str = "uniform"
  params: dict[str, Any] = dataclasses.field(default_factory=dict)
  priorities: dict[str, float] = dataclasses.field(default_factory=dict)
  min_share: float = 0.0
  max_share: float = 1.0


@dataclasses.dataclass(frozen=True)
class EvalConfig:
  every: int = 25
  tasks_per_domain: int = 64
  temperature: float = 0.0
  sampled: bool = True

  def __post_init__(self):
    _require(self.every > 0, f"eval.every must be > 0, got {self.every}.")
    _require(self.tasks_per_domain > 0,
             f"eval.tasks_per_domain must be > 0, got {self.tasks_per_domain}.")
    _require(self.temperature >= 0, f"eval.temperature must be >= 0, got {self.temperature}.")


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
  """Complete run checkpoints under ``workdir/checkpoints`` (rlpt.checkpoint.manager).

  every: save after every ``every`` steps and after the last one; 0 turns
    checkpoints (and resuming) off.
  keep: how many of the latest checkpoints to keep.
  keep_best: also keep the checkpoint with the best ``best_metric``, a held-out
    metric of the evaluation at the checkpoint's step (an ``eval`` row of
    metrics.jsonl, e.g. ``success/mean``), ranked by ``best_mode`` ("max" or
    "min"). Steps saved without an evaluation never count as best, so make
    ``every`` a multiple of ``eval.every``.
  async_save: write in a background thread; the loop waits only for the
    device-to-host copy (and for the previous save, if still running).
  export: write the final policy as a plain parameter checkpoint to
    ``workdir/export`` (rlpt.checkpoint.save_model).
  """

  every: int = 25
  keep: int = 3
  keep_best: bool = True
  best_metric: str = "success/mean"
  best_mode: str = "max"
  async_save: bool = True
  export: bool = True

  def __post_init__(self):
    _require(self.every >= 0, f"checkpoint.every must be >= 0 (0 = no checkpoints), got "
             f"{self.every}.")
    _require(self.keep >= 1, f"checkpoint.keep must be >= 1, got {self.keep}.")
    _require(not self.keep_best or bool(self.best_metric),
             "checkpoint.best_metric is empty but checkpoint.keep_best=True; name a logged "
             "metric such as 'success/mean'.")
    _require(self.best_mode in ("max", "min"),
             f"checkpoint.best_mode must be 'max' or 'min', got '{self.best_mode}'.")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """A whole RL run."""

  seed: int = 0
  steps: int = 100
  base: BaseModelConfig = BaseModelConfig()
  domains: DomainsConfig = DomainsConfig(ids=("rlpt/math-add-easy-v0",))
  rollout: RolloutConfig = RolloutConfig()
  speculative: SpeculativeConfig = SpeculativeConfig()
  env: EnvConfig = EnvConfig()
  rl: RLConfig = RLConfig()
  value: ValueConfig = ValueConfig()
  lora: LoraSection = LoraSection()
  curriculum: CurriculumConfig = CurriculumConfig()
  optim: OptimConfig = OptimConfig(learning_rate=1e-4)
  eval: EvalConfig = EvalConfig()
  mesh: MeshConfig = MeshConfig()
  sharding: ShardingConfig = ShardingConfig()
  checkpoint: CheckpointConfig = CheckpointConfig()
  log_every: int = 1
  progress: bool = True

  def __post_init__(self):
    from rlpt.rl import ADVANTAGE_ESTIMATORS, is_group_baseline, lookup
    _require(self.steps > 0, f"steps must be > 0, got {self.steps}.")
    _require(self.log_every > 0, f"log_every must be > 0, got {self.log_every}.")
    try:
      lookup(ADVANTAGE_ESTIMATORS, self.rl.advantage)
    except ValueError as e:
      raise ConfigError(f"rl.advantage: {e}") from e
    if is_group_baseline(self.rl.advantage):
      _require(self.rollout.group_size >= 2,
               f"rollout.group_size must be >= 2 for {self.rl.advantage} (advantages are "
               f"relative to the group), got {self.rollout.group_size}.")
    try:
      from rlpt.curriculum import sampler_from_config
      sampler_from_config(self.curriculum, self.domains)  # checks strategy, params and weights
    except ValueError as e:
      raise ConfigError(str(e)) from e
    if self.lora.rank:
      _require(self.sharding.reference_memory == "device",
               "lora.rank > 0 reads the frozen base (the reference) in every update; set "
               "sharding.reference_memory='device'.")
    _require(self.rollout.batch_size % self.rl.minibatches == 0,
             f"rollout.batch_size={self.rollout.batch_size} is not divisible by "
             f"rl.minibatches={self.rl.minibatches}.")
    unknown = sorted(set(self.rollout.domain_staleness) - set(self.domains.ids))
    _require(not unknown, f"rollout.domain_staleness names domains that are not in domains.ids: "
             f"{unknown}; expected some of {list(self.domains.ids)}.")
    if self.rollout.decode_phases > 1:
      _require(self.base.attention_impl in ("", "dense") and not self.speculative.gamma,
               f"rollout.decode_phases={self.rollout.decode_phases} needs the dense-attention "
               f"samplers; base.attention_impl is '{self.base.attention_impl}' and "
               f"speculative.gamma {self.speculative.gamma} (use decode_phases=1).")
    _require(not (self.rollout.domain_staleness and self.rl.dynamic_sampling),
             "rollout.domain_staleness cannot be combined with rl.dynamic_sampling (its refill "
             "rollouts are drawn from the first one's results, so a batch has one version); "
             "use rollout.staleness.")
    if self.env.priorities:
      _require(len(self.env.priorities) == len(self.domains.ids),
               f"env.priorities has {len(self.env.priorities)} entries for "
               f"{len(self.domains.ids)} domains (one per domains.ids entry).")
    self.loss_config()

  @property
  def uses_value_model(self) -> bool:
    from rlpt.rl import needs_value_model
    return needs_value_model(self.rl.advantage)

  @property
  def recomputes_old_logp(self) -> bool:
    """Whether old_logp is the policy's own on the sampled batch, with the
    sampler's log-probs entering only through truncated importance weights:
    asked for, or forced by a sampler that is not the policy (int8 weights or
    cache, asynchronous staleness)."""
    ro = self.rollout
    return self.rl.recompute_old_logp or ro.weights_int8 or ro.kv_int8 or ro.max_staleness > 0

  @property
  def tis_in_step(self) -> bool:
    """Whether the update takes those weights from its own forward pass
    (LossConfig.behaviour_tis_cap) instead of a scoring pass before it. It can
    when nothing needs the policy's log-probs before the update: one update per
    batch (several would each need the same proximal policy), the KL in the
    loss (in the reward it is computed from them beforehand) and a fixed KL
    coefficient (the adaptive controller reads the batch's KL first)."""
    rl = self.rl
    return (self.recomputes_old_logp and rl.tis_in_step and rl.ppo_epochs == 1
            and rl.minibatches == 1 and rl.kl_mode == "loss" and rl.kl_controller == "fixed")

  def loss_config(self):
    from rlpt.rl import LossConfig
    rl = self.rl
    try:
      return LossConfig(
          policy_loss=rl.policy_loss, clip_eps=rl.clip_eps, clip_eps_high=rl.clip_eps_high,
          dual_clip_c=rl.dual_clip_c, kl_beta=rl.kl_beta if rl.kl_mode == "loss" else 0.0,
          kl_estimator=rl.kl_estimator, aggregation=rl.aggregation,
          entropy_coef=rl.entropy_coef, norm_len=self.rollout.max_new_tokens,
          behaviour_tis_cap=rl.tis_cap if self.tis_in_step else 0.0)
    except ValueError as e:
      raise ConfigError(f"rl: {e}") from e

  def value_loss_config(self):
    from rlpt.rl import ValueLossConfig
    try:
      return ValueLossConfig(value_clip=self.value.value_clip or None,
                             aggregation=self.value.aggregation,
                             norm_len=self.rollout.max_new_tokens)
    except ValueError as e:
      raise ConfigError(f"value: {e}") from e


# ----------------------------------------------------------------------------
# Memory plan (python -m launch.plan).


@dataclasses.dataclass(frozen=True)
class PlanConfig:
  """A model, a mesh and the batch shapes whose per-device memory to plan.

  num_devices: the pod's device count (need not exist here; -1 in ``mesh``
    takes the rest of it). train_batch x seq_len: sequences and tokens of one
  update micro-batch. sample_batch x sample_len: sequences decoded together and
  their KV length (prompt + new tokens). device_memory_gib: per-device memory
  the peak is compared with (0: no verdict).
  """

  model: ModelConfig = ModelConfig()
  mesh: MeshConfig = MeshConfig()
  num_devices: int = 8
  sharding: ShardingConfig = ShardingConfig()
  train_batch: int = 8
  seq_len: int = 1024
  sample_batch: int = 64
  sample_len: int = 1024
  reference: bool = True
  value_model: bool = True
  device_memory_gib: float = 0.0

  def __post_init__(self):
    for name in ("num_devices", "train_batch", "seq_len", "sample_batch", "sample_len"):
      _require(getattr(self, name) > 0, f"{name} must be > 0, got {getattr(self, name)}.")
    _require(self.device_memory_gib >= 0,
             f"device_memory_gib must be >= 0, got {self.device_memory_gib}.")
