"""Training a draft (or a compressed model) from a teacher policy.

``draft_train_step`` is a pure, jittable step in the style of rlpt.steps:
the teacher's logits on the batch are computed inside it (no gradient), so
one jitted program does teacher forward + student update.

``DraftDistiller`` keeps the draft fresh while the policy trains. How the
trainer wires it (the policy drifts away from the draft as RL updates it,
so the acceptance rate decays without refreshes):

  distiller = DraftDistiller(draft_graphdef, draft_params, policy_graphdef,
                             make_optimizer(OptimConfig(3e-4), total), every=N, steps=k)
  ...after each rollout, with the batch that is about to be trained on:
  distiller.maybe_update(step, policy_params, seq.tokens, seq.loss_mask)
  ...and the speculative sampler reads distiller.params (quantize it too if
  the sampler's copy is int8).

The batch is the policy's own samples (prompt + completion, loss_mask over
the completion): forward KL on on-policy tokens is what acceptance depends on.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from rlpt.distill.loss import distill_loss
from rlpt.steps import TrainState, forward_logits, init_train_state


def draft_train_step(state: TrainState, teacher_params: nnx.State, tokens_BxL: jax.Array,
                     loss_mask_BxL1: jax.Array, *, graphdef: nnx.GraphDef,
                     teacher_graphdef: nnx.GraphDef, optimizer: optax.GradientTransformation,
                     temperature: float = 1.0) -> tuple[TrainState, dict]:
  """One update of the student on KL(teacher || student) over loss_mask_BxL1 ([B, L-1])."""
  inputs = tokens_BxL[:, :-1]
  teacher_logits = jax.lax.stop_gradient(forward_logits(teacher_graphdef, teacher_params, inputs))

  def loss_fn(params):
    return distill_loss(forward_logits(graphdef, params, inputs), teacher_logits,
                        loss_mask_BxL1, temperature)

  (_, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
  updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
  params = optax.apply_updates(state.params, updates)
  metrics["distill/grad_norm"] = optax.tree.norm(grads)
  return TrainState(state.step + 1, params, opt_state), metrics


def make_draft_train_step(graphdef: nnx.GraphDef, teacher_graphdef: nnx.GraphDef,
                          optimizer: optax.GradientTransformation, temperature: float = 1.0):
  """``draft_train_step`` jitted with the student state donated."""
  return jax.jit(functools.partial(draft_train_step, graphdef=graphdef,
                                   teacher_graphdef=teacher_graphdef, optimizer=optimizer,
                                   temperature=temperature), donate_argnums=0)


class DraftDistiller:
  """A draft kept close to a changing policy: ``steps`` distillation updates on
  the policy's latest samples every ``every`` trainer steps."""

  def __init__(self, graphdef: nnx.GraphDef, params: nnx.State, teacher_graphdef: nnx.GraphDef,
               optimizer: optax.GradientTransformation, every: int = 1, steps: int = 1,
               temperature: float = 1.0):
    if every < 1 or steps < 1:
      raise ValueError(f"distill every and steps must be >= 1, got every={every}, steps={steps}.")
    self.every, self.steps = every, steps
    self.state = init_train_state(params, optimizer)
    self._step = make_draft_train_step(graphdef, teacher_graphdef, optimizer, temperature)

  @property
  def params(self) -> nnx.State:
    return self.state.params

  def update(self, teacher_params: nnx.State, tokens_BxL, loss_mask_BxL1) -> dict:
    """Runs ``steps`` updates on one batch; returns the last step's metrics (host floats)."""
    tokens, mask = jnp.asarray(tokens_BxL, jnp.int32), jnp.asarray(loss_mask_BxL1, jnp.float32)
    metrics = {}
    for _ in range(self.steps):
      self.state, metrics = self._step(self.state, teacher_params, tokens, mask)
    return {k: float(v) for k, v in metrics.items()}

  def maybe_update(self, trainer_step: int, teacher_params: nnx.State, tokens_BxL,
                   loss_mask_BxL1) -> dict:
    """``update`` on trainer steps that are multiples of ``every``; {} otherwise."""
    if trainer_step % self.every:
      return {}
    return self.update(teacher_params, tokens_BxL, loss_mask_BxL1)
