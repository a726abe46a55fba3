"""Model invariants: causality, GQA against a NumPy reference, value head shape."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlpt.models import ModelConfig, Transformer, ValueModel, causal_mask
from rlpt.models.transformer import apply_rope, dense_attention

CFG = ModelConfig(vocab_size=64, d_model=32, num_layers=2, num_heads=4, num_kv_heads=2,
                  head_dim=8, mlp_dim=48, tie_embeddings=False)


def _forward(model, tokens):
  b, t = tokens.shape
  pos = jnp.broadcast_to(jnp.arange(t), (b, t))
  return model(tokens, pos, causal_mask(pos, pos))[0]


def test_causality_gradient_of_position_t_wrt_later_inputs_is_zero():
  model = Transformer(CFG, nnx.Rngs(0))
  tokens = jax.random.randint(jax.random.key(1), (2, 10), 0, CFG.vocab_size)
  embeds = jnp.take(model.decoder.embed[...], tokens, axis=0)
  graphdef, params = nnx.split(model)

  def loss_at(t, x):
    m = nnx.merge(graphdef, params)
    h = x  # embeddings in, so the gradient is w.r.t. each position's input
    pos = jnp.broadcast_to(jnp.arange(10), (2, 10))
    mask = causal_mask(pos, pos)
    for block in m.decoder.blocks:
      h, _ = block(h, pos, mask, None, None)
    return jnp.sum(m.decoder.final_norm(h)[:, t] ** 2)

  for t in (0, 4, 8):
    g = jax.grad(functools.partial(loss_at, t))(embeds)
    assert np.all(np.asarray(g[:, t + 1:]) == 0.0), f"position {t} depends on later inputs"
    assert np.abs(np.asarray(g[:, :t + 1])).sum() > 0


def test_logits_do_not_depend_on_future_tokens():
  model = Transformer(CFG, nnx.Rngs(0))
  a = jax.random.randint(jax.random.key(2), (1, 12), 0, CFG.vocab_size)
  b = a.at[:, 7:].set((a[:, 7:] + 5) % CFG.vocab_size)
  la, lb = _forward(model, a), _forward(model, b)
  np.testing.assert_array_equal(np.asarray(la[:, :7]), np.asarray(lb[:, :7]))
  assert not np.allclose(np.asarray(la[:, 7:]), np.asarray(lb[:, 7:]))


def _np_attention(q, k, v, mask):
  b, t, n, h = q.shape
  kh = k.shape[2]
  k = np.repeat(k, n // kh, axis=2)
  v = np.repeat(v, n // kh, axis=2)
  s = np.einsum("btnh,bsnh->bnts", q, k) / np.sqrt(h)
  s = np.where(mask[:, None], s, -np.inf)
  p = np.exp(s - s.max(-1, keepdims=True))
  p /= p.sum(-1, keepdims=True)
  return np.einsum("bnts,bsnh->btnh", p, v)


def test_grouped_query_attention_matches_numpy_reference():
  rng = np.random.default_rng(0)
  q = rng.standard_normal((2, 5, 4, 8)).astype(np.float32)
  k = rng.standard_normal((2, 7, 2, 8)).astype(np.float32)
  v = rng.standard_normal((2, 7, 2, 8)).astype(np.float32)
  pos = np.broadcast_to(np.arange(2, 7), (2, 5))
  mask = np.asarray(causal_mask(jnp.asarray(pos), jnp.broadcast_to(jnp.arange(7), (2, 7))))
  out = dense_attention(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), jnp.asarray(mask))
  np.testing.assert_allclose(np.asarray(out), _np_attention(q, k, v, mask), rtol=1e-5, atol=1e-5)


def test_rope_preserves_norm_and_relative_positions():
  rng = np.random.default_rng(1)
  q = jnp.asarray(rng.standard_normal((1, 1, 1, 8)), jnp.float32)
  k = jnp.asarray(rng.standard_normal((1, 1, 1, 8)), jnp.float32)
  def dot(pq, pk):
    rq = apply_rope(q, jnp.array([[pq]]), 10_000.0)
    rk = apply_rope(k, jnp.array([[pk]]), 10_000.0)
    return float(jnp.sum(rq * rk))
  np.testing.assert_allclose(dot(3, 1), dot(10, 8), rtol=1e-5)
  r = apply_rope(q, jnp.array([[5]]), 10_000.0)
  np.testing.assert_allclose(float(jnp.linalg.norm(r)), float(jnp.linalg.norm(q)), rtol=1e-6)


def test_tied_and_untied_heads_and_param_count():
  for tie in (True, False):
    cfg = ModelConfig(**{**CFG.__dict__, "tie_embeddings": tie})
    model = Transformer(cfg, nnx.Rngs(0))
    _, state = nnx.split(model)
    assert sum(x.size for x in jax.tree.leaves(state)) == cfg.num_params()
    assert hasattr(model, "lm_head") != tie


def test_value_model_returns_one_scalar_per_token():
  vm = ValueModel(CFG, nnx.Rngs(0))
  tokens = jnp.zeros((3, 6), jnp.int32)
  pos = jnp.broadcast_to(jnp.arange(6), (3, 6))
  assert vm(tokens, pos, causal_mask(pos, pos)).shape == (3, 6)


def test_config_rejects_bad_gqa():
  with pytest.raises(ValueError, match="num_kv_heads"):
    ModelConfig(num_heads=4, num_kv_heads=3)
