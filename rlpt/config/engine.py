"""The continuous-batching engine's config section (``engine``)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class EngineConfig:
  """The continuous-batching engine (rlpt.engine).

  enabled: the rollout generates through the engine (else the static
  sampler); slots: sequences decoding at once (a multiple of the batch
  shards); max_len: tokens of one sequence, its prompt and every turn and
  observation (0: rollout.max_prompt_len + rollout.max_new_tokens, as a run
  fills it in); chunk_steps: decode steps per compiled chunk (between two
  admissions); prefill_rows / prefill_len: rows and tokens of one prefill
  call (0 rows: a quarter of the slots); kv_int8: an int8 KV store (a run
  takes rollout.kv_int8).
  """

  enabled: bool = False
  slots: int = 64
  max_len: int = 0
  chunk_steps: int = 16
  prefill_rows: int = 0
  prefill_len: int = 64
  kv_int8: bool = False

  def __post_init__(self):
    for name in ("slots", "chunk_steps", "prefill_len"):
      if getattr(self, name) < 1:
        raise ValueError(f"engine.{name} must be >= 1, got {getattr(self, name)}.")
    if self.max_len < 0:
      raise ValueError(f"engine.max_len must be >= 0 (0: from the rollout), got {self.max_len}.")
    if not 0 <= self.prefill_rows <= self.slots:
      raise ValueError(f"engine.prefill_rows must be in [0, slots={self.slots}] (0: slots // 4), "
                       f"got {self.prefill_rows}.")

  @property
  def prefill_batch(self) -> int:
    return self.prefill_rows or max(1, self.slots // 4)

  @property
  def cache_len(self) -> int:
    """Positions per slot: a prefill chunk may run prefill_len - 1 past a sequence's end."""
    return self.max_len + self.prefill_len
