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
(rlpt.steps.segment_positions_and_mask), so every sequence's logits are
those it has alone. Per-target fields ([.., L-1]: entry i scores token i+1) move with
their sequence; the target slot after a sequence's last token (the next
sequence's first token) holds 0, so it never carries loss.

With ``group`` (GRPO groups: consecutive rows that share a prompt), a group
is one piece: its shared prefix once, then each member's remaining tokens
(its branch), attending to the prefix and to itself, so each prompt is scored
once, not once per sample; ``segments`` then tell prefix from branches (see
``Packing.segments``). A group longer than a row splits into pieces that fit,
each with its own copy of the prefix.

Rows are filled first-fit, longest piece first (deterministic: ties by
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


# A branch token's segment id: its branch (1, 2, ...) in the high bits, its
# piece's place in the row in the low bits; a prefix token's is the place alone.
BRANCH_SHIFT = 16


def group_prefixes(tokens_BxL: np.ndarray, group: int) -> np.ndarray:
  """Per group of ``group`` consecutive rows, how many first tokens all its rows share."""
  t = np.asarray(tokens_BxL)
  b, l = t.shape
  same = np.all(t.reshape(b // group, group, l) == t[::group, None, :], axis=1)
  return np.argmin(np.concatenate([same, np.zeros((b // group, 1), bool)], axis=1), axis=1)


@dataclasses.dataclass(frozen=True)
class Packing:
  """Where each sequence of a [B, L] batch sits in the packed [R, L] rows.

  A row holds pieces end to end. A piece is one sequence, or (``group``) a
  GRPO group's shared prefix once followed by each member's own tokens (its
  branch), each branch attending to the prefix and to itself only, with
  positions continuing the prefix's: the same logits as the group's rows
  alone, each prompt scored once instead of once per sample."""

  row_B: np.ndarray      # packed row of sequence b
  offset_B: np.ndarray   # its piece's first column
  length_B: np.ndarray   # its tokens (BOS .. last real token)
  rank_B: np.ndarray     # its piece's place in its row, 1 for the first
  num_rows: int          # R, padding rows included
  width: int             # the packed rows' width (>= L)
  batch_width: int       # L
  # Tokens of b in its piece's shared prefix (all of them for a piece of one
  # sequence), the first column of its branch, and its branch (0: none).
  shared_B: np.ndarray
  branch_col_B: np.ndarray
  branch_B: np.ndarray
  real_tokens: int       # the pieces' tokens, padding excluded

  @staticmethod
  def lengths(tokens_BxL: np.ndarray, loss_mask_BxT: np.ndarray, pad_id: int) -> np.ndarray:
    """Each row's real length: through its last non-pad token or last trained target."""
    t = np.asarray(tokens_BxL)
    b, l = t.shape
    cols = np.arange(l)
    last_tok = np.where(t != pad_id, cols, -1).max(axis=1) + 1
    last_tgt = np.where(np.asarray(loss_mask_BxT) > 0, cols[:-1], -1).max(axis=1) + 2
    return np.maximum(np.maximum(last_tok, last_tgt), 1).astype(np.int64)

  @staticmethod
  def shared_lengths(tokens_BxL: np.ndarray, loss_mask_BxT: np.ndarray, length_B: np.ndarray,
                     group: int) -> np.ndarray:
    """Per group of ``group`` consecutive rows, how many first tokens its piece
    holds once: tokens every row shares, with the token after them shared too
    (the last prefix position predicts it for every branch), and no trained
    target among them (a shared slot carries one row's per-target values)."""
    m = np.asarray(loss_mask_BxT) > 0
    g = len(m) // group
    common = np.minimum(group_prefixes(tokens_BxL, group), length_B.reshape(g, group).min(axis=1))
    trained = m.reshape(g, group, -1).any(axis=1)
    first_trained = np.where(trained.any(axis=1), trained.argmax(axis=1), m.shape[1])
    return np.maximum(np.minimum(common - 1, first_trained), 0).astype(np.int64)

  @classmethod
  def _pieces(cls, tokens_BxL, loss_mask_BxT, length_B, group: int, width: int):
    """(pieces, tokens of each sequence held in its piece's prefix): a piece
    lists its sequences; one of several shares their prefix and holds as many
    branches as fit a row of ``width``."""
    shared = length_B.copy()
    if group == 1:
      return [[i] for i in range(len(length_B))], shared
    pieces: list[list[int]] = []
    for g, s in enumerate(cls.shared_lengths(tokens_BxL, loss_mask_BxT, length_B, group)):
      members = list(range(g * group, (g + 1) * group))
      if s < 1:
        pieces += [[i] for i in members]
        continue
      shared[members] = s
      piece, used = [], s
      for i in members:
        if piece and used + length_B[i] - s > width:
          pieces.append(piece)
          piece, used = [], s
        piece.append(i)
        used += length_B[i] - s
      pieces.append(piece)
    return pieces, shared

  @classmethod
  def plan(cls, tokens_BxL, loss_mask_BxT, pad_id: int, row_multiple: int = 1,
           width: int | None = None, ladder: bool = False, group: int = 1) -> "Packing":
    """``width``: of the packed rows (default the batch's, never less);
    ``ladder``: the row count in units of ``row_multiple`` on ``row_ladder``;
    ``group``: consecutive rows that may share a prefix (GRPO groups; rows
    that share nothing pack one piece each)."""
    t = np.asarray(tokens_BxL)
    b, batch_width = t.shape
    if width is not None and width < batch_width:
      raise ValueError(f"packed rows of width {width} cannot hold this batch's rows of "
                       f"width {batch_width}.")
    if group > 1 and b % group:
      raise ValueError(f"a batch of {b} rows is not whole groups of {group}.")
    width = batch_width if width is None else int(width)
    length = cls.lengths(t, loss_mask_BxT, pad_id)
    pieces, shared = cls._pieces(t, loss_mask_BxT, length, group, width)
    size = np.array([shared[p[0]] + sum(int(length[i] - shared[i]) for i in p) for p in pieces])
    order = np.lexsort((np.arange(len(pieces)), -size))  # longest first, ties by first row
    free: list[int] = []                                 # room left in each open row
    count: list[int] = []                                # pieces placed in each row
    row, offset, rank, branch_col, branch = (np.zeros(b, np.int64) for _ in range(5))
    for k in order:
      n = int(size[k])
      for r, room in enumerate(free):
        if room >= n:
          break
      else:
        r = len(free)
        free.append(width)
        count.append(0)
      start = width - free[r]
      free[r] -= n
      count[r] += 1
      col = start + int(shared[pieces[k][0]])
      for j, i in enumerate(pieces[k]):
        row[i], offset[i], rank[i] = r, start, count[r]
        branch_col[i] = col
        branch[i] = j + 1 if shared[i] < length[i] else 0  # a prefix holds <= all but one
        col += int(length[i] - shared[i])
    m = max(int(row_multiple), 1)
    units = -(-max(len(free), 1) // m)
    num_rows = (row_ladder(units) if ladder else units) * m
    return cls(row, offset, length, rank, num_rows, width, batch_width, shared, branch_col, branch,
               int(size.sum()))

  @property
  def fill(self) -> float:
    """Share of the packed rows' tokens that are real (not padding)."""
    return float(self.real_tokens) / (self.num_rows * self.width)

  def _index(self, span: np.ndarray):
    """(batch row, batch column, packed row, packed column) of every position
    j < span[b] of every sequence b: its piece's prefix, then its branch."""
    b_idx = np.repeat(np.arange(len(span)), span)
    starts = np.cumsum(span) - span
    col = np.arange(int(span.sum())) - np.repeat(starts, span)
    shared = self.shared_B[b_idx]
    packed = np.where(col < shared, self.offset_B[b_idx] + col,
                      self.branch_col_B[b_idx] + col - shared)
    return b_idx, col, self.row_B[b_idx], packed

  def tokens(self, tokens_BxL, pad_id: int) -> np.ndarray:
    t = np.asarray(tokens_BxL)
    out = np.full((self.num_rows, self.width), pad_id, t.dtype)
    b, c, r, pc = self._index(self.length_B)
    out[r, pc] = t[b, c]
    return out

  def segments(self) -> np.ndarray:
    """[R, L] int32: a piece's prefix is its place in the row k (by column), a
    branch ``(branch << BRANCH_SHIFT) | k``, padding 0
    (rlpt.steps.segment_positions_and_mask reads them)."""
    out = np.zeros((self.num_rows, self.width), np.int32)
    b, c, r, pc = self._index(self.length_B)
    in_branch = c >= self.shared_B[b]
    out[r, pc] = np.where(in_branch, self.branch_B[b] << BRANCH_SHIFT, 0) | self.rank_B[b]
    return out

  def pack(self, x_BxT) -> np.ndarray:
    """A per-target field [B, L-1] in the packed layout [R, L-1] (0 between
    sequences; a shared prefix's slots hold one member's values, which carry
    no loss)."""
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
