"""rlpt.update: the host side of an RL update, called without a trainer."""

import numpy as np
import pytest

from rlpt.packing import Packing
from rlpt.steps import RLBatch, SharedPrefix
from rlpt.update import ROW_FIELDS, minibatch, minibatch_orders, plan_update, rows

PAD = 0


def _batch(b=8, length=10, seed=0):
  rng = np.random.default_rng(seed)
  lengths = rng.integers(3, length + 1, b)
  tokens = np.zeros((b, length), np.int32)
  mask = np.zeros((b, length - 1), np.float32)
  for i, n in enumerate(lengths):
    tokens[i, :n] = rng.integers(1, 50, n)
    mask[i, 1:n - 1] = 1.0
  f = lambda: rng.normal(size=(b, length - 1)).astype(np.float32) * mask
  return RLBatch(tokens=tokens, loss_mask=mask, old_logp=f(), ref_logp=f(), advantages=f())


def test_minibatch_orders_are_a_function_of_seed_and_step():
  assert all((o == np.arange(8)).all() for o in minibatch_orders(0, 3, 8, 1, 2, None))
  a = minibatch_orders(0, 3, 8, 2, 2, None)
  assert len(a) == 2 and all(sorted(o) == list(range(8)) for o in a)
  assert all((x == y).all() for x, y in zip(a, minibatch_orders(0, 3, 8, 2, 2, None)))  # the same step again
  assert any((x != y).any() for x, y in zip(a, minibatch_orders(0, 4, 8, 2, 2, None)))  # another step
  assert any((x != y).any() for x, y in zip(a, minibatch_orders(1, 3, 8, 2, 2, None)))  # another seed
  for order in minibatch_orders(0, 3, 12, 2, 3, group=4):  # whole groups stay together
    groups = order.reshape(3, 4)
    assert all((g == g[0] + np.arange(4)).all() and g[0] % 4 == 0 for g in groups)


@pytest.mark.parametrize("packs", [False, True])
def test_a_plan_splits_the_batch_into_its_minibatches_by_name(packs):
  batch = _batch()
  packing = (lambda t, m: Packing.plan(t, m, PAD)) if packs else (lambda t, m: None)
  plan = plan_update(batch.tokens, batch.loss_mask, 5, seed=0, minibatches=2, epochs=2,
                     packing=packing, shared_prefix=lambda t: None)
  assert plan.metrics["batch/shared_prefix"] == 0.0 and ("batch/packed_rows" in plan.metrics) == packs
  seen = []
  for epoch in range(2):
    for k in range(2):
      mini, idx = minibatch(batch, plan, epoch, k, PAD, packing)
      assert len(idx) == 4 and (idx == plan.orders[epoch][4 * k:4 * k + 4]).all()
      expect = rows(batch, idx)
      for f in ROW_FIELDS:
        np.testing.assert_array_equal(getattr(expect, f), getattr(batch, f)[idx])
      if packs:
        p = Packing.plan(expect.tokens, expect.loss_mask, PAD)
        np.testing.assert_array_equal(mini.tokens, p.tokens(expect.tokens, PAD))
        np.testing.assert_array_equal(mini.advantages, p.pack(expect.advantages))
        np.testing.assert_array_equal(mini.segments, p.segments())
        # Packing keeps every trained token: the loss mask's sum is unchanged.
        assert mini.loss_mask.sum() == expect.loss_mask.sum()
      else:
        assert mini.segments is None
        np.testing.assert_array_equal(mini.old_logp, expect.old_logp)
      seen += list(idx)
  assert sorted(seen) == sorted(list(range(8)) * 2)  # every row once per epoch


def test_a_shared_prefix_is_planned_when_rows_do_not_pack():
  batch = _batch()
  plan = plan_update(batch.tokens, batch.loss_mask, 1, seed=0, minibatches=1, epochs=1,
                     packing=lambda t, m: None, shared_prefix=lambda t: SharedPrefix(3, 4))
  assert plan.shared == SharedPrefix(3, 4) and plan.metrics["batch/shared_prefix"] == 3.0
  assert plan.metrics["batch/pass_tokens"] == batch.tokens.size
  mini, idx = minibatch(batch, plan, 0, 0, PAD, lambda t, m: None)
  assert (idx == np.arange(8)).all() and (mini.tokens == batch.tokens).all()


def test_packed_groups_keep_their_prompt_once_in_every_minibatch():
  """Packing with groups (rl.shared_prefix with packed rows): minibatches are
  whole groups, each packed with its group's prompt once."""
  rng = np.random.default_rng(1)
  tokens = np.zeros((8, 12), np.int32)
  mask = np.zeros((8, 11), np.float32)
  for g in range(2):
    prompt = rng.integers(1, 50, 5)
    for j in range(4):
      i = 4 * g + j
      tokens[i, :5], tokens[i, 5:9] = prompt, rng.integers(1, 50, 4)
      mask[i, 4:8] = 1.0
  batch = RLBatch(tokens, mask, mask * 0.5, mask * 0.25, mask)
  packing = lambda t, m: Packing.plan(t, m, PAD, width=32, group=4)
  plan = plan_update(tokens, mask, 2, seed=0, minibatches=2, epochs=1, packing=packing,
                     shared_prefix=lambda t: None, group=4)
  # Prompts of 5 tokens: 4 held once (the 5th predicts each sample's first token).
  assert plan.metrics["batch/shared_prefix"] == 4.0
  assert plan.packing.real_tokens == 8 * 9 - 2 * 3 * 4
  for k in range(2):
    mini, idx = minibatch(batch, plan, 0, k, PAD, packing)
    assert sorted(idx // 4) == [idx[0] // 4] * 4  # one whole group
    assert (mini.segments > 0).sum() == 4 + 4 * 5 and mini.loss_mask.sum() == 16
