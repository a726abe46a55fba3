"""Token layout: prompts -> sampler input, (prompt, completion) -> training sequence.

Every sequence is the prompt's ids + completion, right-padded, at positions
0..L-1: the same positions the sampler used, so training log-probs match the
sampler's exactly. A prompt's ids are its `PromptFormat`'s
(rlpt.tokenizers.chat): BOS + text when bare, the model's chat template
otherwise.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence
from typing import ClassVar, NamedTuple

import numpy as np

from rlpt.curriculum.signal import SUM_PREFIX
from rlpt.packing import pack_width
from rlpt.tokenizers import Tokenizer
from rlpt.tokenizers.prompts import PromptFormat


def bucket_length(n: int, max_len: int, bucket: int, ladder: bool = False) -> int:
  """``n`` rounded up to a multiple of ``bucket``, at most ``max_len``; with
  ``ladder``, then up to the next 2^k or 1.5 * 2^k (rlpt.packing.pack_width).

  Padding batches to a few bucket widths instead of the maximum keeps the
  number of compiled shapes small without paying for the longest prompt
  every step. Multiples of ``bucket`` alone give max_len / bucket widths; the
  ladder gives two per doubling (16, 32, 48, 64, 96, 128, 192, 256, ...), so
  a run over prompts of every length compiles a handful.
  """
  if not bucket:
    return max_len
  width = -(-n // bucket) * bucket
  return min(max_len, pack_width(width) if ladder else width)


def encode_prompts(texts: Sequence[str], tokenizer: Tokenizer, max_len: int,
                   domains: Sequence[str] | None = None, bucket: int = 0,
                   prompt_format: PromptFormat | None = None) -> tuple[np.ndarray, np.ndarray]:
  """Right-padded [B, P] prompt ids and their lengths [B].

  Each prompt is ``prompt_format.prompt_ids(text)`` (default: bare, BOS +
  text). P is ``max_len``, or with ``bucket`` > 0 the longest prompt rounded
  up to a multiple of ``bucket`` and onto the 2^k / 1.5 * 2^k ladder
  (bucket_length; never more than ``max_len``).
  """
  fmt = prompt_format if prompt_format is not None else PromptFormat(tokenizer)
  encoded = []
  for i, text in enumerate(texts):
    ids = fmt.prompt_ids(text)
    if len(ids) > max_len:
      where = f" from domain '{domains[i]}'" if domains is not None else ""
      layout = "with BOS" if fmt.template is None else f"in the '{fmt.name}' chat template"
      raise ValueError(
          f"prompt{where} has {len(ids)} tokens ({layout}) but the limit "
          f"(rollout.max_prompt_len) is {max_len}: {text[:80]!r}")
    encoded.append(ids)
  width = bucket_length(max((len(e) for e in encoded), default=1), max_len, bucket, ladder=True)
  out = np.full((len(texts), width), tokenizer.pad_id, np.int32)
  lengths = np.zeros((len(texts),), np.int32)
  for i, ids in enumerate(encoded):
    out[i, :len(ids)] = ids
    lengths[i] = len(ids)
  return out, lengths


class SequenceBatch(NamedTuple):
  """tokens [B, L]; loss_mask and logp [B, L-1] aligned to target tokens 1..L-1."""

  tokens: np.ndarray
  loss_mask: np.ndarray
  logp: np.ndarray


def build_sequences(prompts_BxP: np.ndarray, prompt_lengths_B: np.ndarray,
                    completions_BxN: np.ndarray, completion_lengths_B: np.ndarray,
                    completion_logp_BxN: np.ndarray | None, pad_id: int) -> SequenceBatch:
  """Concatenates each prompt with its completion at the prompt's true length."""
  b, p = prompts_BxP.shape
  n = completions_BxN.shape[1]
  length = p + n
  tokens = np.full((b, length), pad_id, np.int32)
  mask = np.zeros((b, length - 1), np.float32)
  logp = np.zeros((b, length - 1), np.float32)
  for i in range(b):
    pl, cl = int(prompt_lengths_B[i]), int(completion_lengths_B[i])
    tokens[i, :pl] = prompts_BxP[i, :pl]
    tokens[i, pl:pl + cl] = completions_BxN[i, :cl]
    # Target index t predicts tokens[t + 1]; completion token j sits at pl + j.
    mask[i, pl - 1:pl - 1 + cl] = 1.0
    if completion_logp_BxN is not None:
      logp[i, pl - 1:pl - 1 + cl] = completion_logp_BxN[i, :cl]
  return SequenceBatch(tokens, mask, logp)


def pad_contexts(contexts: Sequence[Sequence[int]], max_len: int, pad_id: int,
                 bucket: int = 0) -> tuple[np.ndarray, np.ndarray]:
  """Right-padded [B, P] sampler input from token lists (whole contexts) and lengths [B].

  The token-level twin of `encode_prompts` for later turns of an episode:
  the conversation so far is kept as the exact tokens sampled and observed,
  never re-tokenized from text.
  """
  lengths = np.array([len(c) for c in contexts], np.int32)
  if lengths.size and lengths.max() > max_len:
    raise ValueError(f"context of {int(lengths.max())} tokens exceeds rollout.max_prompt_len={max_len}.")
  width = bucket_length(int(lengths.max(initial=1)), max_len, bucket, ladder=True)
  out = np.full((len(contexts), width), pad_id, np.int32)
  for i, c in enumerate(contexts):
    out[i, :len(c)] = c
  return out, lengths


def build_episode_sequences(tokens: Sequence[Sequence[int]], model_mask: Sequence[Sequence[float]],
                            logp: Sequence[Sequence[float]], width: int,
                            pad_id: int) -> SequenceBatch:
  """Training sequences of whole episodes.

  ``tokens[i]`` is episode i's conversation (the prompt's ids, then each
  turn's sampled completion followed by the observation's ids, as its
  `PromptFormat` lays them out);
  ``model_mask[i][t]`` is 1 where token t was sampled by the policy and
  ``logp[i][t]`` its sampling log-prob. Only sampled tokens carry loss.
  """
  b = len(tokens)
  out = np.full((b, width), pad_id, np.int32)
  mask = np.zeros((b, width - 1), np.float32)
  lp = np.zeros((b, width - 1), np.float32)
  for i in range(b):
    n = len(tokens[i])
    if n > width:
      raise ValueError(f"episode {i} has {n} tokens; the sequence buffer holds {width}.")
    out[i, :n] = tokens[i]
    # Target index t predicts token t + 1.
    mask[i, :n - 1] = model_mask[i][1:]
    lp[i, :n - 1] = logp[i][1:]
  return SequenceBatch(out, mask, lp)


TOKEN, ROW = "token", "row"


@dataclasses.dataclass(frozen=True)
class RolloutBatch:
  """One rollout's graded samples as host arrays, one row per sample (each
  group's samples adjacent, groups in prompt order).

  Per token: ``tokens`` [B, L] (prompt ids + completion, right-padded);
  ``loss_mask`` and ``old_logp`` [B, L-1], aligned to target tokens 1..L-1.
  Per row: ``rewards``; ``valid`` (0 where the environment could not grade:
  the sample is masked); ``lengths`` (the last turn's completion) and
  ``stopped`` (overlong shaping); ``version``, the policy version that sampled
  each row (None when the whole batch came from the current one); ``records``,
  a dict per row (domain, task seed and split, reward, success, verdict,
  infra_error, length, turns, env_s: its environment seconds). `FIELDS` declares each array field's kind:
  `pad_to`, `concat` and `take` treat every field by it, so a new field is
  declared there once.
  """

  tokens: np.ndarray
  loss_mask: np.ndarray
  old_logp: np.ndarray
  rewards: np.ndarray
  valid: np.ndarray
  lengths: np.ndarray
  stopped: np.ndarray
  records: tuple = ()
  version: np.ndarray | None = None

  FIELDS: ClassVar[dict[str, str]] = {
      "tokens": TOKEN, "loss_mask": TOKEN, "old_logp": TOKEN,
      "rewards": ROW, "valid": ROW, "lengths": ROW, "stopped": ROW, "version": ROW}

  def __post_init__(self):
    b = len(self.tokens)
    for name in self.FIELDS:
      x = getattr(self, name)
      if x is not None and len(x) != b:
        raise ValueError(f"RolloutBatch.{name} has {len(x)} rows, tokens has {b}.")
    if self.records and len(self.records) != b:
      raise ValueError(f"RolloutBatch has {len(self.records)} records for {b} rows.")

  def __len__(self) -> int:
    return len(self.tokens)

  @property
  def width(self) -> int:
    return self.tokens.shape[1]

  def replace(self, **changes) -> "RolloutBatch":
    return dataclasses.replace(self, **changes)

  def with_version(self, version: int) -> "RolloutBatch":
    """Every row sampled by policy ``version``, unless the rows' versions were
    recorded as they were sampled (the engine's)."""
    if self.version is not None:
      return self
    return self.replace(version=np.full(len(self), version, np.int32))

  def pad_to(self, width: int, pad_id: int) -> "RolloutBatch":
    """Right-pads the per-token fields to ``width`` tokens (``tokens`` with
    ``pad_id``, masks and log-probs with 0)."""
    extra = width - self.width
    if extra < 0:
      raise ValueError(f"cannot pad a batch of width {self.width} to {width}.")
    if not extra:
      return self
    return self.replace(**{
        name: np.pad(getattr(self, name), ((0, 0), (0, extra)),
                     constant_values=pad_id if name == "tokens" else 0)
        for name, kind in self.FIELDS.items() if kind == TOKEN})

  def take(self, rows) -> "RolloutBatch":
    """The batch of ``rows`` (indices, in that order)."""
    rows = np.asarray(rows, np.int64)
    arrays = {name: None if getattr(self, name) is None else getattr(self, name)[rows]
              for name in self.FIELDS}
    return RolloutBatch(**arrays, records=tuple(self.records[i] for i in rows) if self.records else ())

  @staticmethod
  def concat(batches: Sequence["RolloutBatch"], pad_id: int) -> "RolloutBatch":
    """The rows of ``batches`` in order, each padded to the widest."""
    if not batches:
      raise ValueError("RolloutBatch.concat needs at least one batch.")
    width = max(b.width for b in batches)
    padded = [b.pad_to(width, pad_id) for b in batches]
    arrays = {}
    for name in RolloutBatch.FIELDS:
      xs = [getattr(b, name) for b in padded]
      if any(x is None for x in xs) and not all(x is None for x in xs):
        raise ValueError(f"RolloutBatch.concat: '{name}' is set in some batches and not in others.")
      arrays[name] = None if xs[0] is None else np.concatenate(xs)
    return RolloutBatch(**arrays, records=tuple(r for b in padded for r in b.records))


def merge_parts(parts, group_size: int, pad_id: int):
  """One rollout from parts played separately (per-domain staleness budgets).

  parts: (prompt indices, RolloutBatch, metrics) per part, each batch's rows
  being each prompt's ``group_size`` samples in the part's order. Returns
  (RolloutBatch, metrics) with rows back in prompt order, every part padded
  to the widest; times, counts and signal sums add up over parts, per-sample
  rates are weighted by rows.
  """
  rows = np.concatenate([(np.asarray(idx)[:, None] * group_size + np.arange(group_size)).ravel()
                         for idx, _, _ in parts])
  batch = RolloutBatch.concat([b for _, b, _ in parts], pad_id).take(np.argsort(rows))
  metrics: dict[str, float] = collections.defaultdict(float)
  n = len(batch)
  for _, b, t in parts:
    for k, x in t.items():
      summed = k.startswith(("time/", "engine/", SUM_PREFIX)) or k == "rollout/sampler_calls"
      metrics[k] += x if summed else x * len(b) / n
  return batch, metrics
