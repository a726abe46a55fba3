"""The model's attention config: every impl gives the dense model's logits; windows agree
between the training path (rlpt.attention) and the cached sampling path (dense + mask)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlpt.attention import attention_mask
from rlpt.models import ModelConfig, Transformer, causal_mask, init_cache

CFG = ModelConfig(vocab_size=64, d_model=32, num_layers=2, num_heads=4, num_kv_heads=2,
                  head_dim=8, mlp_dim=48, attention_block_size=8)
T = 24


def _logits(cfg, params_from, tokens, mask=None):
  graphdef, params = nnx.split(Transformer(cfg, nnx.Rngs(0)))
  model = nnx.merge(graphdef, nnx.state(params_from))
  b, t = tokens.shape
  pos = jnp.broadcast_to(jnp.arange(t), (b, t))
  return model(tokens, pos, causal_mask(pos, pos) if mask is None else mask(pos))[0]


@pytest.mark.parametrize("impl,window,sinks", [("blockwise", 0, 0), ("sparse", 10, 2)])
def test_impls_match_the_dense_model(impl, window, sinks):
  tokens = jax.random.randint(jax.random.key(1), (2, T), 0, CFG.vocab_size)
  base = Transformer(CFG, nnx.Rngs(0))
  cfg = dataclasses.replace(CFG, attention_impl=impl, attention_window=window,
                            attention_sinks=sinks)
  got = jax.jit(lambda t: _logits(cfg, base, t))(tokens)
  # The dense model with the equivalent explicit mask.
  mask = lambda pos: attention_mask(pos, pos, None, window or None, sinks)
  want = jax.jit(lambda t: _logits(CFG, base, t, mask))(tokens)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=2e-5, rtol=0)


def test_windowed_cached_decode_matches_windowed_forward():
  cfg = dataclasses.replace(CFG, attention_window=6, attention_sinks=1)
  model = Transformer(cfg, nnx.Rngs(0))
  tokens = jax.random.randint(jax.random.key(2), (1, 12), 0, cfg.vocab_size)
  full = jax.jit(lambda t: _logits(cfg, model, t))(tokens)
  graphdef, params = nnx.split(model)

  @jax.jit
  def step(token, t, cache):
    pos = jnp.reshape(t, (1, 1))
    mask = causal_mask(pos, jnp.arange(12)[None])
    return nnx.merge(graphdef, params)(token, pos, mask, cache, jnp.reshape(t, (1,)))

  cache = init_cache(cfg, 1, 12)
  for t in range(12):
    logits, cache = step(tokens[:, t:t + 1], jnp.int32(t), cache)
    np.testing.assert_allclose(np.asarray(logits[:, 0]), np.asarray(full[:, t]), atol=2e-5,
                               rtol=0)


@pytest.mark.parametrize("kw,match", [
    (dict(attention_impl="flash"), "attention_impl must be one of"),
    (dict(attention_block_size=0), "attention_block_size must be positive"),
    (dict(attention_window=-1), "attention_window must be >= 0"),
    (dict(attention_sinks=2), "only applies with a sliding window"),
    (dict(attention_impl="sparse"), "needs model.attention_window > 0"),
])
def test_bad_attention_config_raises(kw, match):
  with pytest.raises(ValueError, match=match):
    dataclasses.replace(CFG, **kw)
