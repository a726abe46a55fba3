"""Distillation loss and draft training step."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlpt.config import OptimConfig
from rlpt.distill import DraftDistiller, distill_loss, forward_kl
from rlpt.models import ModelConfig, Transformer
from rlpt.steps import forward_logits, make_optimizer

TEACHER = ModelConfig(vocab_size=24, d_model=32, num_layers=2, num_heads=4, num_kv_heads=2,
                      head_dim=8, mlp_dim=48)
STUDENT = ModelConfig(vocab_size=24, d_model=16, num_layers=1, num_heads=2, num_kv_heads=1,
                      head_dim=8, mlp_dim=32)


def test_forward_kl_matches_definition_and_mask():
  t = jax.random.normal(jax.random.key(0), (2, 5, 7)) * 2
  s = jax.random.normal(jax.random.key(1), (2, 5, 7))
  p, q = jax.nn.softmax(t), jax.nn.softmax(s)
  want = np.sum(np.asarray(p) * np.log(np.asarray(p) / np.asarray(q)), -1)
  np.testing.assert_allclose(np.asarray(forward_kl(s, t)), want, rtol=1e-5, atol=1e-6)
  assert float(jnp.abs(forward_kl(t, t)).max()) < 1e-6
  mask = jnp.zeros((2, 5)).at[0, 1].set(1.0).at[1, 3].set(1.0)
  loss, m = distill_loss(s, t, mask)
  np.testing.assert_allclose(float(loss), (want[0, 1] + want[1, 3]) / 2, rtol=1e-5)
  acc = np.minimum(np.asarray(p), np.asarray(q)).sum(-1)
  np.testing.assert_allclose(float(m["distill/acceptance"]), (acc[0, 1] + acc[1, 3]) / 2, rtol=1e-5)
  # Only the student gets a gradient.
  g_t = jax.grad(lambda t_: distill_loss(s, t_, mask)[0])(t)
  assert float(jnp.abs(g_t).max()) == 0.0
  with pytest.raises(ValueError, match="temperature"):
    forward_kl(s, t, 0.0)


def test_draft_training_reduces_kl_and_raises_acceptance():
  tg, tp = nnx.split(Transformer(TEACHER, nnx.Rngs(0)))
  sg, sp = nnx.split(Transformer(STUDENT, nnx.Rngs(1)))
  tokens = jax.random.randint(jax.random.key(2), (8, 16), 0, 24)
  mask = jnp.ones((8, 15)).at[:, :4].set(0.0)  # prompt positions are not trained
  d = DraftDistiller(sg, sp, tg, make_optimizer(OptimConfig(learning_rate=3e-3), 100),
                     every=2, steps=15)
  _, first = distill_loss(forward_logits(sg, sp, tokens[:, :-1]),
                          forward_logits(tg, tp, tokens[:, :-1]), mask)
  assert d.maybe_update(1, tp, tokens, mask) == {}
  d.maybe_update(0, tp, tokens, mask)
  last = d.update(tp, tokens, mask)
  assert int(d.state.step) == 30
  assert last["distill/kl"] < 0.5 * float(first["distill/kl"])
  assert last["distill/acceptance"] > float(first["distill/acceptance"])
  assert np.isfinite(last["distill/grad_norm"])
  with pytest.raises(ValueError, match="every"):
    DraftDistiller(sg, sp, tg, make_optimizer(OptimConfig(), 1), every=0)
