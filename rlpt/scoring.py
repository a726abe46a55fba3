"""Token scoring from final hidden states, a chunk of the sequence at a time.

Every pass that scores tokens (the reference pass, the scoring pass, the
update and its entropy) needs, per position, the log-probability of one
target token under the sampling distribution, and sometimes that
distribution's entropy: a few numbers per token. Forming the whole fp32
logits [B, T, V] to get them costs 4 B T V bytes, the largest tensor of a
long-context step at a real vocabulary (128K tokens x 128,256 entries: 67 GB,
twice that with the log-softmax). ``token_scores`` forms them ``chunk``
positions at a time inside a loop, each chunk's output projection and
log-softmax rematerialised in the backward pass, so the most any pass holds
is one chunk's [B, chunk, V] (and its gradient), whatever T is.

Chunks are strided, not contiguous: with n chunks, chunk i holds positions
i, i + n, i + 2n, ... Per-token scores do not care which tokens share a
chunk, and a strided chunk of a sequence-sharded array is sharded the same
way (each device's block of positions holds its share of every chunk), so
the loop runs over an axis no device splits and no position moves between
devices.

Gradients: the loop is a ``lax.map`` over a ``jax.checkpoint``-ed chunk, so
the backward pass keeps only each chunk's inputs (the hidden states, which
the trunk's backward needs anyway) and recomputes its logits; the head's
weight gradient is summed over chunks.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from rlpt.rl import entropy_from_logits
from rlpt.sampling.logits import SamplingParams, token_logprobs

Head = Callable[[jax.Array], jax.Array]   # hidden states [B, C, D] -> fp32 logits [B, C, V]


def num_chunks(length: int, chunk: int) -> int:
  """How many strided chunks of at most ``chunk`` positions cover ``length`` (0: one)."""
  if chunk < 0:
    raise ValueError(f"chunk must be >= 0 (0: the whole sequence at once), got {chunk}.")
  return 1 if chunk == 0 or length <= chunk else -(-length // chunk)


def token_scores(head: Head, h_BxTxD: jax.Array, targets_BxT: jax.Array, sampling: SamplingParams,
                 *, chunk: int = 0, entropy: bool = False) -> tuple[jax.Array, jax.Array | None]:
  """(log-prob [B, T] of each target under ``sampling``'s distribution, its
  entropy [B, T] or None without ``entropy``), from final hidden states.

  ``head`` maps hidden states to logits (``Transformer.head``); ``chunk``: at
  most this many positions per row have logits at once (0 or >= T: all of
  them, the plain computation).
  """
  b, t, d = h_BxTxD.shape
  n = num_chunks(t, chunk)
  if n == 1:
    return _scores(head, h_BxTxD, targets_BxT, sampling, entropy)
  per = -(-t // n)                      # positions per chunk; n * per >= t
  pad = n * per - t
  h = jnp.pad(h_BxTxD, ((0, 0), (0, pad), (0, 0)))
  targets = jnp.pad(targets_BxT, ((0, 0), (0, pad)))
  # Position p = r * n + i goes to chunk i, row r of it: [B, per, n, ...] -> chunk-major.
  h_NxBxCxD = h.reshape(b, per, n, d).transpose(2, 0, 1, 3)
  targets_NxBxC = targets.reshape(b, per, n).transpose(2, 0, 1)

  @jax.checkpoint
  def one(args):
    logp, ent = _scores(head, *args, sampling, entropy)
    return (logp, ent) if entropy else logp

  out = jax.lax.map(one, (h_NxBxCxD, targets_NxBxC))

  def unchunk(x_NxBxC):
    return x_NxBxC.transpose(1, 2, 0).reshape(b, n * per)[:, :t]

  return (unchunk(out[0]), unchunk(out[1])) if entropy else (unchunk(out), None)


def _scores(head: Head, h_BxTxD, targets_BxT, sampling: SamplingParams, entropy: bool):
  logits = head(h_BxTxD)
  logp = token_logprobs(logits, targets_BxT, sampling)
  return logp, (entropy_from_logits(logits, sampling) if entropy else None)
