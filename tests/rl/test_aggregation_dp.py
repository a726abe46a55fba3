"""Loss aggregations do not change with data-parallel size or minibatch split.

The same batch is reduced (a) on one device, (b) sharded over a mesh of the
8 emulated CPU devices, (c) as a sum over minibatches, each normalised by the
whole batch's counts. All agree within 1e-6 relative (float32 sums in a
different order).
"""

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from rlpt.rl import AGGREGATIONS, LossConfig, aggregate, loss_counts, policy_objective

RTOL = 1e-6
B, T = 32, 48


@pytest.fixture(scope="module")
def mesh():
  assert jax.device_count() == 8, "tests/conftest.py should force 8 host devices"
  return jax.make_mesh((8,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))


def data(seed=0):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(B, T)).astype(np.float32)
  lengths = rng.integers(0, T + 1, size=B)
  lengths[[2, 17]] = 0  # empty rows on two different shards
  mask = (np.arange(T)[None, :] < lengths[:, None]).astype(np.float32)
  return x, mask


def place(mesh, *arrays):
  """Shards the batch dim over 'data' and checks that each device holds B/8 rows."""
  sh = NamedSharding(mesh, P("data"))
  out = [jax.device_put(a, sh) for a in arrays]
  for a in out:
    assert len(a.addressable_shards) == 8
    assert a.sharding.shard_shape(a.shape)[0] == B // 8
  return out


@pytest.mark.parametrize("name", sorted(AGGREGATIONS))
def test_aggregation_is_invariant_to_dp_size_and_minibatches(mesh, name):
  x, mask = data()
  counts = loss_counts(mask)
  fn = jax.jit(lambda x, m, nt, ns: aggregate(name, x, m, nt, ns, max_len=64))
  one = jax.devices()[0]
  single = float(fn(jax.device_put(x, one), jax.device_put(mask, one), *counts))
  sharded = float(fn(*place(mesh, x, mask), *counts))
  minibatches = sum(float(fn(x[i:i + 8], mask[i:i + 8], *counts)) for i in range(0, B, 8))
  np.testing.assert_allclose(sharded, single, rtol=RTOL)
  np.testing.assert_allclose(minibatches, single, rtol=RTOL)


@pytest.mark.parametrize("policy_loss,agg", [("ppo_clip", "token-mean"),
                                             ("gspo", "seq-mean-token-mean")])
def test_policy_objective_and_gradient_are_dp_invariant(mesh, policy_loss, agg):
  x, mask = data(1)
  rng = np.random.default_rng(1)
  old = (x * 0.1 - 2.0).astype(np.float32)
  logp = (old + rng.normal(0, 0.2, (B, T))).astype(np.float32)
  ref = (old + rng.normal(0, 0.2, (B, T))).astype(np.float32)
  # Mostly positive advantages: with zero-mean ones the loss is a cancellation of
  # O(1) terms and a relative tolerance would measure that cancellation.
  adv = (rng.normal(size=B) + 1.5).astype(np.float32)
  assert (adv < 0).any()
  cfg = LossConfig(policy_loss=policy_loss, aggregation=agg)
  counts = loss_counts(mask)

  @jax.jit
  def f(logp, old, ref, adv, mask, nt, ns):
    objective = lambda lp: policy_objective(lp, old, ref, adv, mask, cfg, nt, ns)[0]
    return jax.value_and_grad(objective)(logp)

  one = jax.devices()[0]
  loss1, g1 = f(*(jax.device_put(a, one) for a in (logp, old, ref, adv, mask)), *counts)
  loss8, g8 = f(*place(mesh, logp, old, ref, adv, mask), *counts)
  assert g8.sharding.is_equivalent_to(NamedSharding(mesh, P("data")), 2)
  np.testing.assert_allclose(float(loss8), float(loss1), rtol=RTOL)
  np.testing.assert_allclose(np.asarray(g8), np.asarray(g1), rtol=RTOL, atol=1e-9)
  loss_mb = sum(float(f(*(a[i:i + 8] for a in (logp, old, ref, adv, mask)), *counts)[0])
                for i in range(0, B, 8))
  np.testing.assert_allclose(loss_mb, float(loss1), rtol=RTOL)
