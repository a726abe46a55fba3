"""Chunked token scoring (rlpt.scoring) equals the full [tokens x vocab] computation.

Reference: the same pass with ``chunk=0`` (the whole logits block at once).
The model has a 32,768-entry vocabulary, so a chunk's log-softmax is a real
reduction. Tolerances, from the quantities' scale (tests/numerics.py):
log-probs and entropies 1e-6 x their largest magnitude (each token's logits
are the same dot products; only blocking may differ), the loss 1e-6
relative, gradients 1e-5 normwise per leaf (the head's weight gradient is
summed over chunks in another order). Each comparison is shown to fail on a
real error: scores moved by one position.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlpt.config import RLConfig
from rlpt.device import with_rules
from rlpt.models import ModelConfig, Transformer
from rlpt.rl import LossConfig, loss_counts
from rlpt.sampling import SamplingParams
from rlpt.scoring import num_chunks, token_scores
from rlpt.sharding import DEFAULT_RULES, make_mesh, sequence_sharded, state_shardings
from rlpt.steps import RLBatch, SharedPrefix, forward_hidden, policy_loss, sequence_logprobs
from tests.numerics import assert_close_normwise, assert_close_to_scale

CFG = ModelConfig(vocab_size=32768, d_model=32, num_layers=2, num_heads=4, num_kv_heads=2,
                  head_dim=8, mlp_dim=64)
SAMPLINGS = {"t1": SamplingParams(1.0), "filtered": SamplingParams(0.7, top_k=500, top_p=0.9)}
LOSS = LossConfig(entropy_coef=0.01, kl_beta=0.04)


def _model(cfg=CFG, seed=0):
  return nnx.split(Transformer(cfg, nnx.Rngs(seed)))


def _batch(b, l, vocab, seed=0, prefix=0, group=1):
  rng = np.random.default_rng(seed)
  tokens = rng.integers(1, vocab, (b, l)).astype(np.int32)
  if prefix:
    tokens[:, :prefix] = np.repeat(tokens[::group, :prefix], group, axis=0)
  mask = (rng.random((b, l - 1)) < 0.8).astype(np.float32)
  return RLBatch(jnp.asarray(tokens), jnp.asarray(mask),
                 jnp.asarray(-rng.random((b, l - 1)) * 12, jnp.float32),
                 jnp.asarray(-rng.random((b, l - 1)) * 12, jnp.float32),
                 jnp.asarray(rng.standard_normal((b, l - 1)), jnp.float32))


def _loss_and_grads(graphdef, params, batch, sampling, chunk, shared=None):
  fn = functools.partial(policy_loss, graphdef=graphdef, loss_cfg=LOSS, sampling=sampling,
                         shared=shared, chunk=chunk)
  counts = loss_counts(batch.loss_mask)
  return jax.jit(jax.value_and_grad(lambda p: fn(p, batch, counts, jnp.float32(0.04)),
                                    has_aux=True))(params)


def _assert_same_update(got, want):
  (loss, metrics), grads = got
  (loss0, metrics0), grads0 = want
  assert_close_to_scale(loss, loss0, rtol=1e-6, scale=abs(float(loss0)) + 1e-3)
  for name in ("entropy", "kl"):
    if name in metrics0:
      assert_close_to_scale(metrics[name], metrics0[name], rtol=1e-6, err_msg=name)
  for (path, g), g0 in zip(jax.tree.leaves_with_path(grads), jax.tree.leaves(grads0)):
    assert_close_normwise(g, g0, rtol=1e-5, err_msg=jax.tree_util.keystr(path))


def test_num_chunks():
  assert [num_chunks(100, c) for c in (0, 100, 200, 99, 50, 7, 1)] == [1, 1, 1, 2, 2, 15, 100]
  with pytest.raises(ValueError, match="chunk must be >= 0"):
    num_chunks(10, -1)


@pytest.mark.parametrize("sampling", SAMPLINGS.values(), ids=SAMPLINGS.keys())
@pytest.mark.parametrize("chunk", [7, 16])  # 7: the 45 positions do not divide
def test_scores_equal_the_full_logits(sampling, chunk):
  graphdef, params = _model()
  tokens = jnp.asarray(_batch(3, 46, CFG.vocab_size).tokens)
  model, h = forward_hidden(graphdef, params, tokens[:, :-1])
  full = jax.jit(lambda h: token_scores(model.head, h, tokens[:, 1:], sampling, entropy=True))(h)
  got = jax.jit(lambda h: token_scores(model.head, h, tokens[:, 1:], sampling, chunk=chunk,
                                       entropy=True))(h)
  for name, a, b in zip(("log-probs", "entropy"), got, full):
    assert a.shape == (3, 45)
    assert_close_to_scale(a, b, rtol=1e-6, err_msg=name)
  with pytest.raises(AssertionError):  # a real error: scores one position off
    assert_close_to_scale(jnp.roll(got[0], 1, axis=1), full[0], rtol=1e-6)


@pytest.mark.parametrize("sampling", SAMPLINGS.values(), ids=SAMPLINGS.keys())
def test_update_loss_and_gradients_equal_the_full_logits(sampling):
  graphdef, params = _model(seed=1)
  batch = _batch(4, 40, CFG.vocab_size, seed=1)
  _assert_same_update(_loss_and_grads(graphdef, params, batch, sampling, 8),
                      _loss_and_grads(graphdef, params, batch, sampling, 0))


def test_shared_prefix_packed_and_tied_head_chunked():
  cfg = dataclasses.replace(CFG, tie_embeddings=True, final_logit_softcap=30.0)
  graphdef, params = _model(cfg, seed=2)
  sampling = SAMPLINGS["t1"]
  batch = _batch(6, 33, cfg.vocab_size, seed=2, prefix=12, group=3)
  shared = SharedPrefix(8, 3)
  _assert_same_update(_loss_and_grads(graphdef, params, batch, sampling, 5, shared),
                      _loss_and_grads(graphdef, params, batch, sampling, 0, shared))
  # Packed rows: two sequences per row, positions restarting in each.
  segments = jnp.asarray(np.where(np.arange(33) < 14, 1, 2)[None].repeat(6, 0), jnp.int32)
  packed = batch._replace(segments=segments)
  _assert_same_update(_loss_and_grads(graphdef, params, packed, sampling, 6),
                      _loss_and_grads(graphdef, params, packed, sampling, 0))
  logp = [sequence_logprobs(graphdef, params, batch.tokens, sampling, shared, segments, chunk=c)
          for c in (0, 4)]
  assert_close_to_scale(logp[1], logp[0], rtol=1e-6)


@pytest.mark.parametrize("layout", ["tensor", "sequence"])
def test_eight_devices(layout):
  """On the 8-device mesh: the vocabulary split over the tensor axis (2 x 2 x 2
  data x fsdp x tensor, dense attention), or a 128-token sequence split 8 ways
  (ring attention); chunked equals full on the same mesh, and the chunks keep
  the activations' layout (the step compiles with the same parameter shardings)."""
  if layout == "tensor":
    mesh, rules, cfg = make_mesh(dict(data=2, fsdp=2, tensor=2)), DEFAULT_RULES, CFG
    b, l, chunk = 4, 24, 6
  else:
    mesh, rules = make_mesh(dict(data=1, sequence=8)), sequence_sharded(DEFAULT_RULES)
    cfg = dataclasses.replace(CFG, attention_impl="ring", attention_block_size=8)
    b, l, chunk = 1, 129, 32
  graphdef, params = _model(cfg, seed=3)
  batch = _batch(b, l, cfg.vocab_size, seed=3)
  # No top-k / top-p here: their sort over a vocabulary split over devices is
  # slow on emulated CPU devices (the filter itself is tested on one device).
  sampling = SamplingParams(0.7)
  counts = loss_counts(batch.loss_mask)
  param_sh = state_shardings(params, mesh, rules)

  def run(chunk):
    def fn(p, batch):
      loss = functools.partial(policy_loss, graphdef=graphdef, loss_cfg=LOSS, sampling=sampling,
                               chunk=chunk)
      return jax.value_and_grad(lambda p: loss(p, batch, counts, jnp.float32(0.04)),
                                has_aux=True)(p)
    step = jax.jit(with_rules(fn, mesh, rules), in_shardings=(param_sh, None),
                   out_shardings=(None, param_sh))
    return step(jax.device_put(params, param_sh), batch)

  _assert_same_update(run(chunk), run(0))


def test_chunked_update_holds_a_chunk_of_logits_not_all():
  """XLA's plan of the compiled update (nothing allocated): the full pass holds
  several [tokens x vocab] fp32 blocks; the chunked one less than a quarter of that."""
  graphdef, params = _model(seed=4)
  batch = _batch(2, 513, CFG.vocab_size, seed=4)

  def temp_bytes(chunk):
    fn = functools.partial(policy_loss, graphdef=graphdef, loss_cfg=LOSS,
                           sampling=SAMPLINGS["t1"], chunk=chunk)
    step = jax.jit(jax.grad(lambda p: fn(p, batch, loss_counts(batch.loss_mask),
                                         jnp.float32(0.04))[0]))
    return step.lower(params).compile().memory_analysis().temp_size_in_bytes

  block = 2 * 512 * CFG.vocab_size * 4
  full, chunked = temp_bytes(0), temp_bytes(32)
  assert full > 2 * block, (full, block)
  assert chunked < full / 4, (chunked, full)


def test_config_names_a_bad_chunk():
  with pytest.raises(ValueError, match="rl.logprob_chunk must be >= 0"):
    RLConfig(logprob_chunk=-8)
