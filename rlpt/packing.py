"""Sequence packing: the sequences of a right-padded [B, L] batch laid end to
end in fewer rows of the same width, so that the reference pass and the
update run on tokens, not on padding.

    packing = Packing.plan(tokens_BxL, loss_mask_BxT, pad_id, row_multiple=8)
    tokens_RxL, segments_RxL = packing.tokens(tokens_BxL, pad_id), packing.segments()
    ref_RxT = logprobs(params, tokens_RxL, segments_RxL)     # any per-target field
    ref_BxT = packing.unpack(ref_RxT)                         # back to the batch layout
    adv_RxT = packing.pack(adv_BxT)

``segments`` numbers each row's sequences 1, 2, ... (0 is padding); a model
pass attends within a segment only, with positions restarting at 0 in each
(rlpt.steps.forward_logits), so every sequence's logits are those it has
alone. Per-target fields ([.., L-1]: entry i scores token i+1) move with
their sequence; the target slot after a sequence's last token (the next
sequence's first token) holds 0, so it never carries loss.

Rows are filled first-fit, longest sequence first (deterministic: ties by
index), and their count is rounded up to ``row_multiple`` (batch shards), with
``ladder`` further to ``row_ladder``'s next rung, so a run compiles a handful
of shapes; extra rows are all padding. Packed rows may be wider than the
batch's (``width``): ``pack_width`` rounds a batch width up to the next of
2^k, 1.5 * 2^k, so batches of a few widths share one compiled shape.
"""

from __future__ import annotations

import dataclasses

import numpy as np


def pack_width(width: int) -> int:
  """``width`` rounded up to the next 2^k or 1.5 * 2^k (72 -> 96, 88 -> 96, 136 -> 192)."""
  w = max(int(width), 1)
  k = max(w - 1, 1).bit_length() - 1   # 2^k < w <= 2^(k+1) for w > 2
  if w <= 2:
    return w
  return 3 << (k - 1) if w <= 3 << (k - 1) else 2 << k


def row_ladder(units: int) -> int:
  """``units`` rounded up to the next rung of 1, 2, 3, 4, then 2^k x (1, 1.25,
  1.5, 1.75): four rungs an octave, so padding rows stay under a quarter of
  the rows while batches of any size share a few compiled shapes
  (5 -> 5, 9 -> 10, 11 -> 12, 13 -> 14, 15 -> 16, 17 -> 20)."""
  u = max(int(units), 1)
  if u <= 4:
    return u
  octave = 1 << (u.bit_length() - 1)          # 2^k <= u < 2^(k+1), k >= 2
  step = octave // 4
  return -(-u // step) * step


@dataclasses.dataclass(frozen=True)
class Packing:
  """Where each sequence of a [B, L] batch sits in the packed [R, L] rows."""

  row_B: np.ndarray      # packed row of sequence b
  offset_B: np.ndarray   # its first token's column
  length_B: np.ndarray   # its tokens (BOS .. last real token)
  rank_B: np.ndarray     # its place in its row, 1 for the first (its segment id)
  num_rows: int          # R, padding rows included
  width: int             # the packed rows' width (>= L)
  batch_width: int       # L

  @staticmethod
  def lengths(tokens_BxL: np.ndarray, loss_mask_BxT: np.ndarray, pad_id: int) -> np.ndarray:
    """Each row's real length: through its last non-pad token or last trained target."""
    t = np.asarray(tokens_BxL)
    b, l = t.shape
    cols = np.arange(l)
    last_tok = np.where(t != pad_id, cols, -1).max(axis=1) + 1
    last_tgt = np.where(np.asarray(loss_mask_BxT) > 0, cols[:-1], -1).max(axis=1) + 2
    return np.maximum(np.maximum(last_tok, last_tgt), 1).astype(np.int64)

  @classmethod
  def plan(cls, tokens_BxL, loss_mask_BxT, pad_id: int, row_multiple: int = 1,
           width: int | None = None, ladder: bool = False) -> "Packing":
    """``width``: of the packed rows (default the batch's, never less);
    ``ladder``: the row count in units of ``row_multiple`` on ``row_ladder``."""
    t = np.asarray(tokens_BxL)
    b, batch_width = t.shape
    if width is not None and width < batch_width:
      raise ValueError(f"packed rows of width {width} cannot hold this batch's rows of "
                       f"width {batch_width}.")
    width = batch_width if width is None else int(width)
    length = cls.lengths(t, loss_mask_BxT, pad_id)
    order = np.lexsort((np.arange(b), -length))  # longest first, ties by index
    free: list[int] = []                         # room left in each open row
    count: list[int] = []                        # sequences placed in each row
    row, offset, rank = (np.zeros(b, np.int64) for _ in range(3))
    for i in order:
      n = int(length[i])
      for r, room in enumerate(free):
        if room >= n:
          break
      else:
        r = len(free)
        free.append(width)
        count.append(0)
      row[i], offset[i] = r, width - free[r]
      free[r] -= n
      count[r] += 1
      rank[i] = count[r]
    m = max(int(row_multiple), 1)
    units = -(-max(len(free), 1) // m)
    num_rows = (row_ladder(units) if ladder else units) * m
    return cls(row, offset, length, rank, num_rows, width, batch_width)

  @property
  def fill(self) -> float:
    """Share of the packed rows' tokens that are real (not padding)."""
    return float(self.length_B.sum()) / (self.num_rows * self.width)

  def _index(self, span: np.ndarray):
    """(batch row, batch column, packed row, packed column) of every position
    j < span[b] of every sequence b."""
    b_idx = np.repeat(np.arange(len(span)), span)
    starts = np.cumsum(span) - span
    col = np.arange(int(span.sum())) - np.repeat(starts, span)
    return b_idx, col, self.row_B[b_idx], self.offset_B[b_idx] + col

  def tokens(self, tokens_BxL, pad_id: int) -> np.ndarray:
    t = np.asarray(tokens_BxL)
    out = np.full((self.num_rows, self.width), pad_id, t.dtype)
    b, c, r, pc = self._index(self.length_B)
    out[r, pc] = t[b, c]
    return out

  def segments(self) -> np.ndarray:
    """[R, L] int32: the k-th sequence of a row is k (by column), padding 0."""
    out = np.zeros((self.num_rows, self.width), np.int32)
    b, _, r, pc = self._index(self.length_B)
    out[r, pc] = self.rank_B[b]
    return out

  def pack(self, x_BxT) -> np.ndarray:
    """A per-target field [B, L-1] in the packed layout [R, L-1] (0 between sequences)."""
    x = np.asarray(x_BxT)
    out = np.zeros((self.num_rows, self.width - 1) + x.shape[2:], x.dtype)
    b, c, r, pc = self._index(self.length_B - 1)
    out[r, pc] = x[b, c]
    return out

  def unpack(self, x_RxT) -> np.ndarray:
    """The inverse of ``pack`` for a per-target field (0 past each sequence)."""
    x = np.asarray(x_RxT)
    out = np.zeros((len(self.row_B), self.batch_width - 1) + x.shape[2:], x.dtype)
    b, c, r, pc = self._index(self.length_B - 1)
    out[b, c] = x[r, pc]
    return out
