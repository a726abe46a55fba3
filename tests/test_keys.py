"""run_key: a pure function of (seed, purpose, indices), distinct for each."""

import jax
import numpy as np
import pytest

from rlpt.keys import PURPOSES, run_key


def _data(key):
  return tuple(np.asarray(jax.random.key_data(key)).tolist())


def test_keys_are_pure_and_distinct():
  assert _data(run_key(0, "rollout", 3, 1)) == _data(run_key(0, "rollout", 3, 1))
  keys = [_data(run_key(seed, p, *idx)) for seed in (0, 1) for p in PURPOSES
          for idx in ((), (0,), (1,), (0, 1), (1, 0), (2**32 - 1,))]
  assert len(set(keys)) == len(keys)
  assert len(set(PURPOSES.values())) == len(PURPOSES)


def test_bad_purpose_or_index_is_named():
  with pytest.raises(ValueError, match="unknown key purpose 'evaluation'.*'eval'"):
    run_key(0, "evaluation")
  with pytest.raises(ValueError, match=r"index -1 is outside \[0, 2\*\*32\)"):
    run_key(0, "rollout", -1)
