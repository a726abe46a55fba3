"""The synthetic GRPO batch the device benchmarks train on: sampled completions
scored by the share of even token ids (the device is what is measured, not an
environment), group-normalised advantages, the whole batch's loss counts."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


class GRPOBatch(NamedTuple):
  tokens: jax.Array      # [B, L] prompt + completion
  loss_mask: jax.Array   # [B, L-1]
  old_logp: jax.Array    # [B, L-1] the sampler's log-probs
  advantages: jax.Array  # [B, L-1]
  counts: object         # rlpt.steps.LossCounts of the whole batch


def grpo_batch(prompts_BxP: np.ndarray, lengths_B: np.ndarray, completions, completion_lengths,
               completion_logp, group: int) -> GRPOBatch:
  """Rows are consecutive groups of ``group`` samples of one prompt (prompts
  given per row)."""
  from rlpt.rl import grpo_advantages, loss_counts
  from rlpt.rollout import build_sequences
  from rlpt.steps import LossCounts
  seq = build_sequences(prompts_BxP, lengths_B, completions, completion_lengths,
                        completion_logp, 0)
  rewards = jnp.asarray((np.asarray(completions) % 2 == 0).mean(axis=1), jnp.float32)
  mask = jnp.asarray(seq.loss_mask)
  c = loss_counts(mask)
  return GRPOBatch(jnp.asarray(seq.tokens), mask, jnp.asarray(seq.logp),
                   grpo_advantages(rewards, group)[:, None] * mask,
                   LossCounts(jnp.float32(c.num_tokens), jnp.float32(c.num_seqs)))
