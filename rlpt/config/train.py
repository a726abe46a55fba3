"""A whole RL post-training run (rlpt.trainer, python -m launch.train)."""

from __future__ import annotations

import dataclasses

from rlpt.config.rl_sections import (
    BaseModelConfig,
    EnvConfig,
    RLConfig,
    RolloutConfig,
    SpeculativeConfig,
    ValueConfig,
)
from rlpt.config.engine import EngineConfig
from rlpt.config.run_sections import CheckpointConfig, CurriculumConfig, EvalConfig
from rlpt.config.schema import ConfigError, _require
from rlpt.config.sections import DomainsConfig, LoraSection, MeshConfig, OptimConfig, ShardingConfig
from rlpt.config.losses import LossConfig, ValueLossConfig
from rlpt.registry import (ADVANTAGE_ESTIMATORS, CONFIG_CHECKS, is_group_baseline, lookup,
                           needs_value_model)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """A whole RL run."""

  seed: int = 0
  steps: int = 100
  base: BaseModelConfig = BaseModelConfig()
  domains: DomainsConfig = DomainsConfig(ids=("rlpt/math-add-easy-v0",))
  rollout: RolloutConfig = RolloutConfig()
  speculative: SpeculativeConfig = SpeculativeConfig()
  engine: EngineConfig = EngineConfig()
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
    if self.engine.enabled:
      ro = self.rollout
      refused = [name for name, on in (("speculative.gamma", self.speculative.gamma),
                                       ("rollout.weights_int8", ro.weights_int8)) if on]
      _require(not refused, f"engine.enabled does not run {', '.join(refused)} yet (the static "
               "sampler does): turn one off.")
      _require(not (self.engine.prompts and ro.max_turns > 1),
               f"engine.prompts={self.engine.prompts} shares single-turn prompts: a slot holds "
               f"the max_len - prompt_len positions after its prompt row, which a conversation "
               f"of rollout.max_turns={ro.max_turns} turns may outgrow; set engine.prompts=0.")
    for check in CONFIG_CHECKS.values():  # e.g. the curriculum's strategy, params and weights
      try:
        check(self)
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
    try:
      return ValueLossConfig(value_clip=self.value.value_clip or None,
                             aggregation=self.value.aggregation,
                             norm_len=self.rollout.max_new_tokens)
    except ValueError as e:
      raise ConfigError(f"value: {e}") from e
