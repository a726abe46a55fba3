"""The memory plan of a model on a mesh (python -m launch.plan)."""

from __future__ import annotations

import dataclasses

from rlpt.config.rl_sections import LOGPROB_CHUNK
from rlpt.config.schema import _require
from rlpt.config.sections import MeshConfig, ShardingConfig
from rlpt.config.model import ModelConfig


@dataclasses.dataclass(frozen=True)
class PlanConfig:
  """A model, a mesh and the batch shapes whose per-device memory to plan.

  num_devices: the pod's device count (need not exist here; -1 in ``mesh``
    takes the rest of it). train_batch x seq_len: sequences and tokens of one
  update micro-batch. sample_batch x sample_len: sequences decoded together and
  their KV length (prompt + new tokens). logprob_chunk: positions per row the
  update scores at a time (rl.logprob_chunk; 0: whole sequences).
  device_memory_gib: per-device memory the peak is compared with (0: no verdict).
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
  logprob_chunk: int = LOGPROB_CHUNK
  device_memory_gib: float = 0.0

  def __post_init__(self):
    for name in ("num_devices", "train_batch", "seq_len", "sample_batch", "sample_len"):
      _require(getattr(self, name) > 0, f"{name} must be > 0, got {getattr(self, name)}.")
    _require(self.logprob_chunk >= 0,
             f"logprob_chunk must be >= 0 (0: whole sequences), got {self.logprob_chunk}.")
    _require(self.device_memory_gib >= 0,
             f"device_memory_gib must be >= 0, got {self.device_memory_gib}.")
