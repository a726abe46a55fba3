"""Token layout: prompts -> sampler input, (prompt, completion) -> training sequence.

Every sequence is BOS + prompt + completion, right-padded, at positions
0..L-1: the same positions the sampler used, so training log-probs match the
sampler's exactly.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from rlpt.tokenizers import Tokenizer


def bucket_length(n: int, max_len: int, bucket: int) -> int:
  """``n`` rounded up to a multiple of ``bucket``, at most ``max_len``.

  Padding batches to a few bucket widths instead of the maximum keeps the
  number of compiled shapes small without paying for the longest prompt
  every step.
  """
  return min(max_len, -(-n // bucket) * bucket) if bucket else max_len


def encode_prompts(texts: Sequence[str], tokenizer: Tokenizer, max_len: int,
                   domains: Sequence[str] | None = None,
                   bucket: int = 0) -> tuple[np.ndarray, np.ndarray]:
  """Right-padded [B, P] prompt ids (BOS first) and their lengths [B].

  P is ``max_len``, or with ``bucket`` > 0 the longest prompt rounded up to a
  multiple of ``bucket`` (never more than ``max_len``).
  """
  encoded = []
  for i, text in enumerate(texts):
    ids = [tokenizer.bos_id] + tokenizer.encode(text)
    if len(ids) > max_len:
      where = f" from domain '{domains[i]}'" if domains is not None else ""
      raise ValueError(
          f"prompt{where} has {len(ids)} tokens (with BOS) but the limit "
          f"(rollout.max_prompt_len) is {max_len}: {text[:80]!r}")
    encoded.append(ids)
  width = bucket_length(max((len(e) for e in encoded), default=1), max_len, bucket)
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
  """Right-padded [B, P] sampler input from token lists (BOS included) and lengths [B].

  The token-level twin of `encode_prompts` for later turns of an episode:
  the conversation so far is kept as the exact tokens sampled and observed,
  never re-tokenized from text.
  """
  lengths = np.array([len(c) for c in contexts], np.int32)
  if lengths.size and lengths.max() > max_len:
    raise ValueError(f"context of {int(lengths.max())} tokens exceeds rollout.max_prompt_len={max_len}.")
  width = bucket_length(int(lengths.max(initial=1)), max_len, bucket)
  out = np.full((len(contexts), width), pad_id, np.int32)
  for i, c in enumerate(contexts):
    out[i, :len(c)] = c
  return out, lengths


def build_episode_sequences(tokens: Sequence[Sequence[int]], model_mask: Sequence[Sequence[float]],
                            logp: Sequence[Sequence[float]], width: int,
                            pad_id: int) -> SequenceBatch:
  """Training sequences of whole episodes.

  ``tokens[i]`` is episode i's conversation (BOS, prompt, then each turn's
  sampled completion followed by the environment's observation tokens);
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


def pad_width(arrays: dict, width: int, pad_id: int) -> dict:
  """Right-pads the sequence arrays of a rollout to ``width`` tokens."""
  extra = width - arrays["tokens"].shape[1]
  if not extra:
    return {}
  return {
      "tokens": np.pad(arrays["tokens"], ((0, 0), (0, extra)), constant_values=pad_id),
      "loss_mask": np.pad(arrays["loss_mask"], ((0, 0), (0, extra))),
      "old_logp": np.pad(arrays["old_logp"], ((0, 0), (0, extra))),
  }


def merge_parts(parts, group_size: int, pad_id: int):
  """One rollout from parts played separately (per-domain staleness budgets).

  parts: (prompt indices, arrays, records, timings) per part, the arrays'
  rows being each prompt's ``group_size`` samples in the part's order.
  Returns (arrays, records, timings) with rows back in prompt order, every
  part padded to the widest; times and counts add up over parts, per-sample
  rates are weighted by rows.
  """
  width = max(a["tokens"].shape[1] for _, a, _, _ in parts)
  rows = np.concatenate([(np.asarray(idx)[:, None] * group_size + np.arange(group_size)).ravel()
                         for idx, _, _, _ in parts])
  back = np.argsort(rows)
  padded = [{**a, **pad_width(a, width, pad_id)} for _, a, _, _ in parts]
  arrays = {k: np.concatenate([p[k] for p in padded])[back] for k in padded[0]}
  flat = [r for _, _, rs, _ in parts for r in rs]
  records = [flat[i] for i in back]
  timings: dict[str, float] = collections.defaultdict(float)
  n = len(records)
  for _, _, rs, t in parts:
    for k, x in t.items():
      timings[k] += x if k.startswith("time/") or k == "rollout/sampler_calls" else x * len(rs) / n
  return arrays, records, timings
