"""What the rollout reads of a run: its config sections (`SourceConfig`) and
the policy it samples (`rlpt.device.SampledModel`); where it runs comes with
the run's `rlpt.device.RunContext`."""

from __future__ import annotations

import dataclasses

from rlpt.config import (CurriculumConfig, DomainsConfig, EngineConfig, EnvConfig, RLConfig,
                         RolloutConfig, SpeculativeConfig, TrainConfig)
from rlpt.device import SampledModel  # noqa: F401  (where the rollout's users find it)
from rlpt.sampling import SamplingParams


@dataclasses.dataclass(frozen=True)
class SourceConfig:
  """A rollout source's sections of the run config (`from_train` builds it).

  ``steps``: the run's updates (the draft's distillation budget). ``modes``:
  the sampling settings to compile, the rollout's first, then evaluation's.
  """

  rollout: RolloutConfig
  rl: RLConfig
  speculative: SpeculativeConfig
  env: EnvConfig
  domains: DomainsConfig
  curriculum: CurriculumConfig
  steps: int
  modes: tuple[SamplingParams, ...]
  engine: EngineConfig = EngineConfig()

  @property
  def sampling(self) -> SamplingParams:
    """The rollout's sampling settings."""
    return self.modes[0]

  @classmethod
  def from_train(cls, cfg: TrainConfig) -> "SourceConfig":
    ro = cfg.rollout
    sampling = SamplingParams(ro.temperature, ro.top_k, ro.top_p)
    greedy = SamplingParams(cfg.eval.temperature, ro.top_k, ro.top_p)
    return cls(ro, cfg.rl, cfg.speculative, cfg.env, cfg.domains, cfg.curriculum, cfg.steps,
               (sampling, greedy), cfg.engine)

