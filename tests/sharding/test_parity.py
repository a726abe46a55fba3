"""A 2x2x2 (data x fsdp x tensor) mesh computes what one device computes:
the RL loss and its gradients, one optimizer update and sampled tokens, within
fp32 tolerance."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from rlpt.models import ModelConfig, Transformer
from rlpt.rl import LossConfig, policy_objective
from rlpt.runtime import (batch_sharding, host_to_global, jit_sampler, jit_step,
                          place_train_state, replicated, to_host, with_rules)
from rlpt.sampling import Sampler, SamplingParams
from rlpt.sharding import DEFAULT_RULES, SAMPLE_RULES, make_mesh, state_shardings
from rlpt.steps import RLBatch, sequence_logprobs, sft_train_step

CFG = ModelConfig(vocab_size=264, d_model=32, num_layers=2, num_heads=4, num_kv_heads=2,
                  head_dim=8, mlp_dim=64)
SAMPLING = SamplingParams(1.0, 0, 1.0)
LOSS = LossConfig()
OPT = optax.adamw(1e-2)
TOL = dict(rtol=2e-5, atol=2e-6)


def _batch(b=8, l=12):
  rng = np.random.default_rng(0)
  return RLBatch(rng.integers(3, 259, (b, l)).astype(np.int32),
                 (rng.random((b, l - 1)) < 0.7).astype(np.float32),
                 -rng.random((b, l - 1)).astype(np.float32) * 3,
                 -rng.random((b, l - 1)).astype(np.float32) * 3,
                 rng.standard_normal(b).astype(np.float32))


def _loss_fn(params, batch, graphdef):
  logp = sequence_logprobs(graphdef, params, batch.tokens, SAMPLING)
  return policy_objective(logp, batch.old_logp, batch.ref_logp, batch.advantages,
                          batch.loss_mask, LOSS, jnp.float32(batch.loss_mask.size))[0]


def _run(mesh, graphdef, params, batch):
  rules = DEFAULT_RULES
  bs2, bs1 = batch_sharding(mesh, rules, 2), batch_sharding(mesh, rules, 1)
  batch_sh = RLBatch(bs2, bs2, bs2, bs2, bs1)
  param_sh = state_shardings(params, mesh, rules)
  grad_fn = jax.jit(with_rules(jax.value_and_grad(functools.partial(_loss_fn, graphdef=graphdef)),
                               mesh, rules),
                    in_shardings=(param_sh, batch_sh), out_shardings=(replicated(mesh), param_sh))
  placed = host_to_global(params, param_sh)
  loss, grads = grad_fn(placed, host_to_global(batch, batch_sh))
  assert all(g.sharding.is_equivalent_to(s, g.ndim)
             for g, s in zip(jax.tree.leaves(grads), jax.tree.leaves(param_sh)))

  state, state_sh = place_train_state(params, OPT, mesh, rules)
  # One full donated, sharded optimizer update (supervised loss: its signature
  # is stable while the RL step grows).
  step = jit_step(sft_train_step, state_sh, (bs2, bs2), mesh, rules, graphdef=graphdef,
                  optimizer=OPT)
  state, metrics = step(state, host_to_global(batch.tokens, bs2),
                        host_to_global(batch.loss_mask, bs2))

  sampler = Sampler(graphdef, CFG, 8, 6, 0, (1,))
  sample_sh = state_shardings(params, mesh, SAMPLE_RULES)
  generate = jit_sampler(sampler, SAMPLING, sample_sh, mesh, SAMPLE_RULES)
  prompts = batch.tokens[:, :8]
  lengths = np.array([8, 5, 3, 8, 2, 7, 6, 4], np.int32)
  key = np.asarray(jax.random.key_data(jax.random.key(7)))
  out = generate(host_to_global(params, sample_sh),
                 host_to_global(prompts, batch_sharding(mesh, SAMPLE_RULES, 2)),
                 host_to_global(lengths, batch_sharding(mesh, SAMPLE_RULES, 1)),
                 host_to_global(key, replicated(mesh)))
  assert out.tokens.sharding.is_equivalent_to(batch_sharding(mesh, SAMPLE_RULES, 2), 2)
  return to_host((loss, grads, metrics, state.params, out))


def test_2x2x2_mesh_matches_one_device():
  graphdef, params = nnx.split(Transformer(CFG, nnx.Rngs(0)))
  params = jax.device_get(params)
  batch = _batch()
  one = _run(make_mesh({"data": 1}, devices=jax.devices()[:1]), graphdef, params, batch)
  mesh = make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
  assert dict(mesh.shape) == {"data": 2, "fsdp": 2, "sequence": 1, "tensor": 2}
  many = _run(mesh, graphdef, params, batch)
  (loss1, grads1, m1, p1, out1), (loss8, grads8, m8, p8, out8) = one, many
  assert abs(float(loss1)) > 1e-3  # a real loss, not a degenerate zero
  np.testing.assert_allclose(loss8, loss1, **TOL)
  leaves1, leaves8 = jax.tree.leaves(grads1), jax.tree.leaves(grads8)
  assert len(leaves1) == len(leaves8) == len(nnx.to_flat_state(params))
  for g1, g8 in zip(leaves1, leaves8):
    assert np.abs(g1).max() > 0
    np.testing.assert_allclose(g8, g1, rtol=1e-4, atol=1e-6)
  for k in m1:
    np.testing.assert_allclose(m8[k], m1[k], rtol=1e-4, atol=1e-6, err_msg=k)
  for a, b in zip(jax.tree.leaves(p1), jax.tree.leaves(p8)):
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
  np.testing.assert_array_equal(out8.tokens, out1.tokens)
  np.testing.assert_array_equal(out8.lengths, out1.lengths)
  np.testing.assert_allclose(out8.logprobs, out1.logprobs, rtol=1e-4, atol=1e-5)
  assert (out1.lengths > 0).all()
