"""Typed run configuration, built from an ``ml_collections.ConfigDict`` at the boundary.

Experiment files return ConfigDicts (easy to override from the command line);
``from_config_dict`` turns one into nested frozen dataclasses, rejecting
unknown keys (naming them, with the closest known key), wrong types and
impossible values before anything is compiled. Library code receives only the
small dataclass it needs.

Layout: ``schema`` (the generic machinery: ``from_config_dict``,
``default_config_dict``, ``unknown_key_message``, ``ConfigError``),
``sections`` (sections shared by experiments), ``pretrain`` (PretrainConfig),
``rl_sections``, ``run_sections`` and ``train`` (the sections of an RL run and
TrainConfig),
``plan`` (PlanConfig); ``model`` (ModelConfig, RopeScaling, LoraConfig),
``rules`` (the mesh and logical axes, the rules tables), ``engine``
(EngineConfig), ``losses``
(LossConfig, ValueLossConfig): the configs the pure code below reads.
Everything is imported from ``rlpt.config``.

A leaf: nothing here imports rlpt beyond this package and `rlpt.registry`,
through which names (losses, estimators, strategies) are checked.
"""

from rlpt.config.engine import EngineConfig
from rlpt.config.losses import LossConfig, ValueLossConfig
from rlpt.config.model import LoraConfig, ModelConfig, RopeScaling
from rlpt.config.plan import PlanConfig
from rlpt.config.pretrain import PretrainConfig, WarmupConfig
from rlpt.config.rl_sections import (
    BaseModelConfig,
    EnvConfig,
    RLConfig,
    RolloutConfig,
    SpeculativeConfig,
    ValueConfig,
)
from rlpt.config.run_sections import CheckpointConfig, CurriculumConfig, EvalConfig
from rlpt.config.schema import (
    ConfigError,
    default_config_dict,
    from_config_dict,
    to_json,
    unknown_key_message,
)
from rlpt.config.sections import (
    DomainsConfig,
    LoraSection,
    MeshConfig,
    OptimConfig,
    RulesField,
    ShardingConfig,
)
from rlpt.config.train import TrainConfig

__all__ = [
    "LoraConfig",
    "LossConfig",
    "ModelConfig",
    "RopeScaling",
    "ValueLossConfig",
    "ConfigError",
    "default_config_dict",
    "from_config_dict",
    "to_json",
    "unknown_key_message",
    "DomainsConfig",
    "MeshConfig",
    "OptimConfig",
    "RulesField",
    "ShardingConfig",
    "PretrainConfig",
    "WarmupConfig",
    "BaseModelConfig",
    "CheckpointConfig",
    "CurriculumConfig",
    "EnvConfig",
    "EvalConfig",
    "LoraSection",
    "RLConfig",
    "RolloutConfig",
    "SpeculativeConfig",
    "EngineConfig",
    "ValueConfig",
    "TrainConfig",
    "PlanConfig",
]
