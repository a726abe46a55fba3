"""Token-level distillation loss: forward KL(p_teacher || q_student) over a mask.

Forward KL is mode-covering: the student puts mass wherever the teacher
does, which is what speculative decoding rewards (a draft's acceptance
probability is sum_x min(p(x), q(x)) = 1 - TV(p, q), and
TV <= sqrt(KL(p || q) / 2) by Pinsker). Shapes: B sequences, T target
positions (L - 1, aligned with rlpt.steps.sequence_logprobs), V vocab.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def forward_kl(student_logits_BxTxV: jax.Array, teacher_logits_BxTxV: jax.Array,
               temperature: float = 1.0) -> jax.Array:
  """KL(softmax(teacher / t) || softmax(student / t)) per position, [B, T] in nats.

  The teacher is not differentiated (stop_gradient).
  """
  if temperature <= 0:
    raise ValueError(f"distillation temperature must be > 0, got {temperature}.")
  logp = jax.nn.log_softmax(
      jax.lax.stop_gradient(teacher_logits_BxTxV).astype(jnp.float32) / temperature, axis=-1)
  logq = jax.nn.log_softmax(student_logits_BxTxV.astype(jnp.float32) / temperature, axis=-1)
  return jnp.sum(jnp.exp(logp) * (logp - logq), axis=-1)


def distill_loss(student_logits_BxTxV: jax.Array, teacher_logits_BxTxV: jax.Array,
                 mask_BxT: jax.Array, temperature: float = 1.0) -> tuple[jax.Array, dict]:
  """Mean forward KL over masked tokens, and metrics.

  Metrics: ``distill/kl`` (the loss), ``distill/acceptance`` (mean of
  sum_x min(p, q): the expected per-token acceptance rate of speculative
  sampling at this temperature), ``distill/top1_agreement`` (argmax equal:
  the greedy acceptance rate).
  """
  kl_BxT = forward_kl(student_logits_BxTxV, teacher_logits_BxTxV, temperature)
  mask = mask_BxT.astype(jnp.float32)
  denom = jnp.maximum(mask.sum(), 1.0)
  loss = (kl_BxT * mask).sum() / denom
  p = jax.nn.softmax(jax.lax.stop_gradient(teacher_logits_BxTxV) / temperature, axis=-1)
  q = jax.nn.softmax(jax.lax.stop_gradient(student_logits_BxTxV) / temperature, axis=-1)
  accept = jnp.sum(jnp.minimum(p, q), axis=-1)
  agree = jnp.argmax(teacher_logits_BxTxV, -1) == jnp.argmax(student_logits_BxTxV, -1)
  return loss, {"distill/kl": loss,
                "distill/acceptance": (accept * mask).sum() / denom,
                "distill/top1_agreement": (agree * mask).sum() / denom}
