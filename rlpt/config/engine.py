"""The continuous-batching engine's config section (``engine``)."""

from __future__ import annotations

import dataclasses

IN_FLIGHT = ("finish", "continue")


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

  in_flight: what a batch's sequences sample with when an asynchronous run
  publishes new weights while they decode. "finish": each batch finishes on
  the weights it started with (its staleness is exactly the schedule's; runs
  are reproducible). "continue": every round takes the newest weights, each
  token's version is recorded, and a sample's staleness is that of its
  oldest token (fresher tokens, timing-dependent runs). docs/async.md
  measures both.
  """

  enabled: bool = False
  slots: int = 64
  max_len: int = 0
  chunk_steps: int = 16
  prefill_rows: int = 0
  prefill_len: int = 64
  kv_int8: bool = False
  in_flight: str = "finish"

  def __post_init__(self):
    for name in ("slots", "chunk_steps", "prefill_len"):
      if getattr(self, name) < 1:
        raise ValueError(f"engine.{name} must be >= 1, got {getattr(self, name)}.")
    if self.max_len < 0:
      raise ValueError(f"engine.max_len must be >= 0 (0: from the rollout), got {self.max_len}.")
    if self.in_flight not in IN_FLIGHT:
      raise ValueError(f"engine.in_flight must be one of {IN_FLIGHT}, got {self.in_flight!r}.")
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
