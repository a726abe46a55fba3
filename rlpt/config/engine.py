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

  prompts / prompt_len: a shared store of ``prompts`` prompt rows, each
  holding up to ``prompt_len`` leading tokens of a sequence (0: a run fills
  in rollout.max_prompt_len - 1): sequences that begin alike (a GRPO group's
  G samples) read one copy of their prompt's cache, and each slot holds only
  the ``max_len - prompt_len`` positions after it. 0 prompts: no store, each
  slot holds its whole sequence. A sequence waits for a prompt row when all
  are held; a row whose sequences have finished keeps its prompt for a later
  one that begins alike until it is needed for another.

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
  prompts: int = 0
  prompt_len: int = 0

  def __post_init__(self):
    for name in ("slots", "chunk_steps", "prefill_len"):
      if getattr(self, name) < 1:
        raise ValueError(f"engine.{name} must be >= 1, got {getattr(self, name)}.")
    if self.max_len < 0:
      raise ValueError(f"engine.max_len must be >= 0 (0: from the rollout), got {self.max_len}.")
    if self.in_flight not in IN_FLIGHT:
      raise ValueError(f"engine.in_flight must be one of {IN_FLIGHT}, got {self.in_flight!r}.")
    if self.prompts < 0 or self.prompt_len < 0:
      raise ValueError(f"engine.prompts and engine.prompt_len must be >= 0, got {self.prompts} "
                       f"and {self.prompt_len}.")
    if self.prompts and self.max_len and not 1 <= self.prompt_len < self.max_len:
      raise ValueError(f"engine.prompt_len must be in [1, max_len={self.max_len}) with "
                       f"engine.prompts {self.prompts}, got {self.prompt_len}.")
    if not 0 <= self.prefill_rows <= self.slots:
      raise ValueError(f"engine.prefill_rows must be in [0, slots={self.slots}] (0: slots // 4), "
                       f"got {self.prefill_rows}.")

  @property
  def prefill_batch(self) -> int:
    return self.prefill_rows or max(1, self.slots // 4)

  @property
  def prompt_tokens(self) -> int:
    """Leading tokens a shared prompt row holds (0: no shared prompts)."""
    return self.prompt_len if self.prompts else 0

  @property
  def cache_len(self) -> int:
    """Positions per slot (after the shared prompt's): a prefill chunk may run
    prefill_len - 1 past a sequence's end."""
    return self.max_len - self.prompt_tokens + self.prefill_len

  @property
  def prompt_cache_len(self) -> int:
    """Positions per shared prompt row."""
    return self.prompt_tokens + self.prefill_len
