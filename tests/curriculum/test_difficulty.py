"""Adaptive difficulty (rlpt.curriculum.difficulty): ladders from the ids, moves
up on mastery and down on collapse, shares on the current rung, resumable."""

import json

import numpy as np
import pytest

from rlpt.config import CurriculumConfig, DomainsConfig
from rlpt.curriculum import make_domain_sampler, sampler_from_config
from rlpt.curriculum.difficulty import DifficultyLadders, ladder_of

IDS = ("rlpt/strings-reverse-easy-v0", "rlpt/strings-reverse-medium-v0",
       "rlpt/strings-reverse-hard-v0", "rlpt/rg-ab-easy-p126-d31-v0", "rlpt/rg-ab-hard-p126-d31-v0",
       "rlpt/dataset-arith-v0")


def _ladders(**kw):
  return DifficultyLadders(lambda keys: make_domain_sampler("uniform", keys), IDS,
                           **{"up": 0.8, "down": 0.1, "alpha": 0.5, "min_samples": 4, **kw})


def test_ladder_keys_and_levels():
  assert ladder_of("rlpt/strings-reverse-medium-v0") == ("rlpt/strings-reverse-*-v0", 1)
  assert ladder_of("rlpt/rg-ab-hard-p126-d31-v0") == ("rlpt/rg-ab-*-p126-d31-v0", 2)
  assert ladder_of("rlpt/dataset-arith-v0") == ("rlpt/dataset-arith-v0", 0)
  s = _ladders()
  assert s.ladders == ("rlpt/strings-reverse-*-v0", "rlpt/rg-ab-*-p126-d31-v0",
                       "rlpt/dataset-arith-v0")
  with pytest.raises(ValueError, match="same rung of difficulty ladder"):
    DifficultyLadders(lambda k: make_domain_sampler("uniform", k),
                      ["rlpt/a-x-easy-v0", "rlpt/a-x-easy-v0"])


def test_moves_up_on_mastery_and_down_on_collapse():
  s = _ladders()
  strings = "rlpt/strings-reverse-*-v0"
  assert s.current(strings) == IDS[0]
  # Weights: each ladder's share on its current rung only.
  w = s.weights()
  assert w[IDS[0]] == pytest.approx(1 / 3) and w[IDS[1]] == w[IDS[2]] == 0.0
  s.update({IDS[0]: [1.0, 1.0, 1.0]})          # 3 < min_samples: no move yet
  assert s.current(strings) == IDS[0]
  s.update({IDS[0]: [1.0]})                    # 4 samples, EMA 1 >= 0.8: up
  assert s.current(strings) == IDS[1] and s.metrics()["difficulty/moves"] == 1
  s.update({IDS[0]: [1.0] * 8})                # results of the old rung do not move it
  assert s.current(strings) == IDS[1]
  s.update({IDS[1]: [1.0] * 4})
  assert s.current(strings) == IDS[2]
  s.update({IDS[2]: [1.0] * 8})                # the top rung: stays
  assert s.current(strings) == IDS[2]
  s.update({IDS[2]: [0.0] * 4})                # collapse: down one
  assert s.current(strings) == IDS[1]
  for _ in range(3):
    s.update({IDS[1]: [0.0] * 4})
  assert s.current(strings) == IDS[0]          # never below the easiest
  s.update({IDS[0]: [0.0] * 8})
  assert s.current(strings) == IDS[0]
  assert all(d in (IDS[0],) or "strings" not in d for d in s.sample(50, np.random.default_rng(0)))
  m = s.metrics()
  assert m["difficulty/level/rlpt/strings-reverse-*-v0"] == 0.0
  assert "difficulty/level/rlpt/dataset-arith-v0" not in m  # a one-rung ladder
  with pytest.raises(ValueError, match="unknown domains"):
    s.update({"rlpt/x-v0": [1.0]})


def test_state_round_trips_and_resumes_identically():
  rng = np.random.default_rng(0)
  a = _ladders()
  feed = [{d: rng.integers(0, 2, 3).astype(float).tolist() for d in IDS} for _ in range(12)]
  for f in feed[:6]:
    a.update(f)
  b = _ladders()
  b.load_state_dict(json.loads(json.dumps(a.state_dict())))
  for f in feed[6:]:
    a.update(f)
    b.update(f)
    assert a.weights() == b.weights() and a.metrics() == b.metrics()
  assert a.sample(20, np.random.default_rng(1)) == b.sample(20, np.random.default_rng(1))
  with pytest.raises(ValueError, match="curriculum.adaptive_difficulty differs"):
    a.load_state_dict(make_domain_sampler("uniform", IDS).state_dict())
  with pytest.raises(ValueError, match="checkpoint is of strategy 'difficulty_ladders'"):
    make_domain_sampler("uniform", IDS).load_state_dict(a.state_dict())


def test_from_the_config():
  doms = DomainsConfig(ids=IDS)
  s = sampler_from_config(CurriculumConfig(strategy="learning_progress", adaptive_difficulty=True,
                                           difficulty={"up": 0.7}), doms)
  assert isinstance(s, DifficultyLadders) and s.up == 0.7 and s.inner.name == "learning_progress"
  with pytest.raises(ValueError, match="works with curriculum.strategy in"):
    sampler_from_config(CurriculumConfig(strategy="temperature", adaptive_difficulty=True), doms)
  with pytest.raises(ValueError, match=r"does not take \['upp'\]"):
    sampler_from_config(CurriculumConfig(adaptive_difficulty=True, difficulty={"upp": 1}), doms)
  with pytest.raises(ValueError, match="curriculum: adaptive difficulty needs 0 <= down < up"):
    sampler_from_config(CurriculumConfig(adaptive_difficulty=True, difficulty={"up": 0.1,
                                                                                "down": 0.5}), doms)
  assert not isinstance(sampler_from_config(CurriculumConfig(), doms), DifficultyLadders)
