"""Supervised pre-training of the tiny base model (rlpt.pretrain, python -m launch.pretrain)."""

from __future__ import annotations

import dataclasses

from rlpt.config.schema import _require
from rlpt.config.sections import DomainsConfig, OptimConfig
from rlpt.config.model import ModelConfig


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
