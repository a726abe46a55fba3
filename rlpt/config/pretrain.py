"""Supervised pre-training of the tiny base model (rlpt.pretrain, python -m launch.pretrain)
and warm-up of an imported one (rlpt.warmup, python -m launch.warmup)."""

from __future__ import annotations

import dataclasses

from rlpt.config.schema import _require
from rlpt.config.sections import DomainsConfig, LoraSection, OptimConfig
from rlpt.config.model import ModelConfig
from rlpt.config.rl_sections import CHAT_TEMPLATES, PROMPT_STYLES, BaseModelConfig


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


@dataclasses.dataclass(frozen=True)
class WarmupConfig:
  """Supervised warm-up of an imported model on the domains' demonstrations
  (rlpt.warmup, python -m launch.warmup), before RL.

  base: the imported model, ``base.hf_checkpoint`` or ``base.model`` (a
    pre-trained built-in base is already trained on its demonstrations).
  lora: rank 0 trains every weight; rank > 0 trains adapters on the frozen
    base and merges them into the saved weights.
  prompt_style: the domains' style (env.prompt_style of the RL run that
    starts from the result): "instruct" for chat models.
  chat_template / system_prompt: as rollout.chat_template /
    rollout.system_prompt, so the warm-up trains on the ids RL will sample.
  export_dtype: the saved checkpoint's weights, "float32" or "bfloat16".
  """

  seed: int = 0
  base: BaseModelConfig = BaseModelConfig(experiment="")
  lora: LoraSection = LoraSection()
  domains: DomainsConfig = DomainsConfig(ids=("rlpt/math-add-easy-v0",))
  prompt_style: str = "instruct"
  chat_template: str = "auto"
  system_prompt: str = ""
  steps: int = 100
  batch_size: int = 16
  max_len: int = 256
  optim: OptimConfig = OptimConfig(learning_rate=1e-5, warmup_steps=10, decay="cosine")
  log_every: int = 10
  export_dtype: str = "float32"

  def __post_init__(self):
    _require(self.prompt_style in PROMPT_STYLES,
             f"prompt_style must be one of {PROMPT_STYLES}, got {self.prompt_style!r}.")
    _require(self.chat_template in CHAT_TEMPLATES,
             f"chat_template must be one of {CHAT_TEMPLATES}, got {self.chat_template!r}.")
    _require(self.steps > 0, f"steps must be > 0, got {self.steps}.")
    _require(self.batch_size > 0, f"batch_size must be > 0, got {self.batch_size}.")
    _require(self.max_len > 2, f"max_len must be > 2, got {self.max_len}.")
    _require(self.log_every > 0, f"log_every must be > 0, got {self.log_every}.")
    _require(self.export_dtype in ("float32", "bfloat16"),
             f"export_dtype must be 'float32' or 'bfloat16', got {self.export_dtype!r}.")

  def check_base(self) -> None:
    """Raises unless the base is an imported model (the default config names
    none: a config file sets one; rlpt.warmup calls this before loading)."""
    _require(bool(self.base.hf_checkpoint or self.base.model),
             "the warm-up starts from an imported model: set base.hf_checkpoint (a Hugging Face "
             "checkpoint directory) or base.model (a GGUF name or path), got neither"
             + (f" (base.checkpoint='{self.base.checkpoint}' is a built-in base, already "
                "pre-trained on demonstrations)." if self.base.checkpoint else "."))
