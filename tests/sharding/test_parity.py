"""A 2x2x2 (data x fsdp x tensor) mesh computes what one device computes:
the RL loss and its gradients, one optimizer update and sampled tokens, within
fp32 tolerance."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from rlpt.models import ModelConfig, Transformer
from rlpt.rl import LossConfig, policy_objective
from rlpt.device import (ProgramPool, batch_sharding, host_to_global, jit_sampler, jit_step,
                          place_train_state, replicated, to_host, with_rules)
from rlpt.sampling import Sampler, SamplingParams
from rlpt.sharding import DEFAULT_RULES, SAMPLE_RULES, make_mesh, state_shardings
from rlpt.steps import RLBatch, sequence_logprobs, sft_train_step
from tests.numerics import assert_close_normwise, assert_close_to_scale

CFG = ModelConfig(vocab_size=264, d_model=32, num_layers=2, num_heads=4, num_kv_heads=2,
                  head_dim=8, mlp_dim=64)
SAMPLING = SamplingParams(1.0, 0, 1.0)
LOSS = LossConfig()
OPT = optax.adamw(1e-2)


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
  step = jit_step(ProgramPool(), sft_train_step, state_sh, (bs2, bs2), mesh, rules, graphdef=graphdef,
                  optimizer=OPT)
  state, metrics = step(state, host_to_global(batch.tokens, bs2),
                        host_to_global(batch.loss_mask, bs2))

  sampler = Sampler(graphdef, CFG, 8, 6, 0, (1,))
  sample_sh = state_shardings(params, mesh, SAMPLE_RULES)
  generate = jit_sampler(ProgramPool(), sampler, SAMPLING, sample_sh, mesh, SAMPLE_RULES)
  prompts = batch.tokens[:, :8]
  lengths = np.array([8, 5, 3, 8, 2, 7, 6, 4], np.int32)
  key = np.asarray(jax.random.key_data(jax.random.key(7)))
  out = generate(host_to_global(params, sample_sh),
                 host_to_global(prompts, batch_sharding(mesh, SAMPLE_RULES, 2)),
                 host_to_global(lengths, batch_sharding(mesh, SAMPLE_RULES, 1)),
                 host_to_global(key, replicated(mesh)))
  assert out.tokens.sharding.is_equivalent_to(batch_sharding(mesh, SAMPLE_RULES, 2), 2)
  return to_host((loss, grads, metrics, state.params, out))


@pytest.fixture(scope="module")
def runs():
  """(params, batch, one-device run, 2x2x2-mesh run)."""
  graphdef, params = nnx.split(Transformer(CFG, nnx.Rngs(0)))
  params = jax.device_get(params)
  batch = _batch()
  one = _run(make_mesh({"data": 1}, devices=jax.devices()[:1]), graphdef, params, batch)
  mesh = make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
  assert dict(mesh.shape) == {"data": 2, "fsdp": 2, "sequence": 1, "tensor": 2}
  return graphdef, params, batch, one, _run(mesh, graphdef, params, batch)


def _assert_same_computation(params, one, many):
  """The 8-device run computes what the one-device run computes, up to float32
  rounding measured against each quantity's own scale (tests/numerics.py).

  Observed on 2-core x86 machines (AVX-512, and XLA limited to AVX2):
  gradients within 1e-6 of their leaf's max |g|; one AdamW step's update within
  1e-5 normwise; sampler log-probs within 1e-7 of max |logp|. Each tolerance
  below leaves 10x or more above that, and a wrong shard or a dropped
  term exceeds it by orders of magnitude (the tests after this one).
  """
  (loss1, grads1, m1, p1, out1), (loss8, grads8, m8, p8, out8) = one, many
  assert abs(float(loss1)) > 1e-3  # a real loss, not a degenerate zero
  np.testing.assert_allclose(loss8, loss1, rtol=2e-5)
  leaves1, leaves8 = jax.tree.leaves(grads1), jax.tree.leaves(grads8)
  assert len(leaves1) == len(leaves8) == len(nnx.to_flat_state(params))
  for i, (g1, g8) in enumerate(zip(leaves1, leaves8)):
    assert np.abs(g1).max() > 0
    assert_close_to_scale(g8, g1, rtol=2e-5, err_msg=f"gradient leaf {i}")
  for k in m1:
    np.testing.assert_allclose(m8[k], m1[k], rtol=2e-5, err_msg=k)
  # Adam's first step moves each parameter by lr * g / (|g| + eps): for an
  # element whose gradient is tiny (sums that cancel) that ratio magnifies the
  # gradient's rounding, up to lr itself. The update is compared normwise.
  for i, (p0, a, b) in enumerate(zip(jax.tree.leaves(params), jax.tree.leaves(p1),
                                     jax.tree.leaves(p8))):
    p0 = np.asarray(p0, np.float64)
    assert_close_normwise(np.asarray(b) - p0, np.asarray(a) - p0, rtol=1e-4,
                          err_msg=f"update of parameter leaf {i}")
  np.testing.assert_array_equal(out8.tokens, out1.tokens)
  np.testing.assert_array_equal(out8.lengths, out1.lengths)
  assert_close_to_scale(out8.logprobs, out1.logprobs, rtol=2e-6, err_msg="sampler log-probs")
  assert (out1.lengths > 0).all()


def test_2x2x2_mesh_matches_one_device(runs):
  _, params, _, one, many = runs
  _assert_same_computation(params, one, many)


def test_parity_check_catches_a_wrong_shard(runs):
  """A gradient block placed on the wrong device (two of a leaf's four fsdp x
  tensor blocks swapped) fails the comparison."""
  _, params, _, one, many = runs
  loss, grads, m, p, out = many
  leaves, treedef = jax.tree.flatten(grads)
  i = max(range(len(leaves)), key=lambda j: leaves[j].size)
  g = np.asarray(leaves[i]).copy()
  half = g.shape[0] // 2
  g[:half], g[half:2 * half] = g[half:2 * half].copy(), g[:half].copy()
  leaves[i] = g
  with pytest.raises(AssertionError, match=f"gradient leaf {i}"):
    _assert_same_computation(params, one, (loss, jax.tree.unflatten(treedef, leaves), m, p, out))


def test_parity_check_catches_a_dropped_term(runs):
  """One row of the 8 (what one data shard would hold, were its contribution
  to the gradient all-reduce lost) left out of the loss on the mesh: fails."""
  graphdef, params, batch, one, _ = runs
  mask = np.array(batch.loss_mask)
  mask[-1] = 0.0
  dropped = _run(make_mesh({"data": 2, "fsdp": 2, "tensor": 2}), graphdef, params,
                 batch._replace(loss_mask=mask))
  with pytest.raises(AssertionError):
    _assert_same_computation(params, one, dropped)
