"""DAPO dynamic sampling and overlong handling against direct NumPy loops."""

import numpy as np
import pytest

from rlpt.rl import (fill_groups, groups_with_signal, overlong_filter_BxT, soft_overlong_penalty_B,
                     truncated_B)


def test_groups_with_signal_matches_a_loop():
  rng = np.random.default_rng(0)
  r = rng.integers(0, 2, size=(50, 4)).astype(np.float32)
  valid = (rng.random((50, 4)) > 0.2).astype(np.float32)
  got = groups_with_signal(r, valid)
  for g in range(50):
    vals = r[g][valid[g] > 0]
    assert got[g] == (len(vals) >= 2 and len(set(vals.tolist())) > 1)
  np.testing.assert_array_equal(groups_with_signal(r), r.std(axis=1) > 0)
  # A tolerance for continuous rewards.
  assert not groups_with_signal(np.array([[0.5, 0.5 + 1e-9]]), atol=1e-6)[0]
  with pytest.raises(ValueError, match=r"\[groups, group_size\]"):
    groups_with_signal(np.zeros(8))


def rollout(rng, groups, k, start):
  rewards = rng.integers(0, 2, size=(groups, k)).astype(np.float32)
  ids = start + np.arange(groups * k)
  return {"rewards": rewards.reshape(-1), "ids": ids, "tokens": np.stack([ids, ids], axis=1)}


def test_fill_groups_takes_informative_groups_in_order_until_the_target():
  rng = np.random.default_rng(1)
  k = 4
  cands = [rollout(rng, 6, k, 1000 * i) for i in range(4)]
  target = 9
  out = fill_groups(cands, target, k)
  # Reference: walk all groups of all rollouts in order, keep the first `target` with variance.
  kept_ids, used, seen = [], 0, 0
  for i, c in enumerate(cands):
    for g in range(6):
      if len(kept_ids) == target * k:
        break
      seen += 1
      r = c["rewards"][g * k:(g + 1) * k]
      if r.std() > 0:
        kept_ids += list(c["ids"][g * k:(g + 1) * k])
    used = i + 1
    if len(kept_ids) == target * k:
      break
  assert out.complete and out.num_groups == target
  assert out.rollouts_used == used and out.groups_seen == seen
  np.testing.assert_array_equal(out.arrays["ids"], kept_ids)
  np.testing.assert_array_equal(out.arrays["tokens"][:, 0], kept_ids)
  assert (out.arrays["rewards"].reshape(-1, k).std(axis=1) > 0).all()


def test_fill_groups_reports_an_incomplete_batch_and_bad_candidates():
  cands = [{"rewards": np.array([1, 1, 0, 1.0])}, {"rewards": np.array([0, 0, 0, 0.0])}]
  out = fill_groups(cands, 3, 2)
  assert not out.complete and out.num_groups == 1 and out.rollouts_used == 2
  np.testing.assert_array_equal(out.arrays["rewards"], [0, 1])
  with pytest.raises(ValueError, match="candidate 1 keys"):
    fill_groups([{"rewards": np.zeros(2)}, {"rewards": np.zeros(2), "x": np.zeros(2)}], 5, 2)
  with pytest.raises(ValueError, match="'x' has 3 rows, 'rewards' has 4"):
    fill_groups([{"rewards": np.zeros(4), "x": np.zeros(3)}], 1, 2)
  with pytest.raises(ValueError, match="6 rows, not a multiple of group_size 4"):
    fill_groups([{"rewards": np.zeros(6)}], 1, 4)


def test_truncation_mask_and_soft_overlong_penalty():
  lengths = np.array([3, 8, 8, 5])
  stopped = np.array([True, True, False, False])
  trunc = truncated_B(lengths, stopped, max_new_tokens=8)
  np.testing.assert_array_equal(trunc, [False, False, True, False])
  mask = np.ones((4, 8), np.float32)
  np.testing.assert_array_equal(overlong_filter_BxT(mask, trunc).sum(axis=1), [8, 8, 0, 8])

  max_len, buf, factor = 20, 5, 0.5
  n = np.arange(0, 26)
  got = soft_overlong_penalty_B(n, max_len, buf, factor)
  for length, p in zip(n, got):
    if length <= 15:
      want = 0.0
    elif length <= 20:
      want = (15 - length) / 5 * factor
    else:
      want = -factor
    assert p == pytest.approx(want, abs=1e-7), length
  with pytest.raises(ValueError, match=r"buffer must be in \(0, max_len=20\], got 30"):
    soft_overlong_penalty_B(n, 20, 30)
