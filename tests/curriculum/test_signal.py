"""Signal accounting (rlpt.curriculum.signal) against a direct count."""

import numpy as np
import pytest

from rlpt.curriculum.signal import (domain_family, flat_sums, pop_sums, signal_metrics,
                                    signal_sums)
from rlpt.rollout.batch import RolloutBatch, merge_parts

G = 4


def _records(rng, domains, groups):
  out = []
  for _ in range(groups):
    d = domains[rng.integers(len(domains))]
    kind = rng.integers(3)  # all fail, all pass, mixed
    for _ in range(G):
      reward = {0: 0.0, 1: 1.0}.get(int(kind), float(rng.integers(2)))
      out.append(dict(domain=d, reward=reward, infra_error=bool(rng.random() < 0.1),
                      length=int(rng.integers(1, 30)), env_s=float(rng.random())))
  return out


def _batch(records):
  n = len(records)
  return RolloutBatch(tokens=np.ones((n, 5), np.int32), loss_mask=np.ones((n, 4), np.float32),
                      old_logp=np.zeros((n, 4), np.float32),
                      rewards=np.array([r["reward"] for r in records], np.float32),
                      valid=np.ones(n, np.float32), lengths=np.ones(n, np.int32),
                      stopped=np.ones(n, bool), records=tuple(records))


def _direct(records):
  """Per domain: groups, groups whose valid rewards are not all equal (and at
  least two valid), tokens and seconds in total and in groups without signal."""
  out = {}
  for g in range(len(records) // G):
    rows = records[g * G:(g + 1) * G]
    valid = [r["reward"] for r in rows if not r["infra_error"]]
    signal = len(valid) >= 2 and max(valid) != min(valid)
    s = out.setdefault(rows[0]["domain"], dict(groups=0, informative=0, tokens=0, no_tokens=0,
                                               env_s=0.0, no_env_s=0.0))
    tokens, seconds = sum(r["length"] for r in rows), sum(r["env_s"] for r in rows)
    s["groups"] += 1
    s["informative"] += signal
    s["tokens"] += tokens
    s["env_s"] += seconds
    if not signal:
      s["no_tokens"] += tokens
      s["no_env_s"] += seconds
  return out


def test_sums_and_shares_equal_a_direct_count():
  rng = np.random.default_rng(0)
  domains = ["rlpt/math-mul-easy-v0", "rlpt/rg-ab-easy-v0", "rlpt/rg-aiw-hard-v0"]
  records = _records(rng, domains, 40)
  want = _direct(records)
  m = signal_metrics(signal_sums(records, G))
  for d, w in want.items():
    assert m[f"groups/{d}"] == w["groups"]
    assert m[f"informative/{d}"] == pytest.approx(w["informative"] / w["groups"])
    assert m[f"sampled_tokens/{d}"] == w["tokens"]
    assert m[f"env_seconds/{d}"] == pytest.approx(w["env_s"])
  tot = {k: sum(w[k] for w in want.values()) for k in next(iter(want.values()))}
  assert m["signal/groups"] == 40
  assert m["signal/informative_share"] == pytest.approx(tot["informative"] / 40)
  assert m["signal/no_signal_token_share"] == pytest.approx(tot["no_tokens"] / tot["tokens"])
  assert m["env_seconds/no_signal_share"] == pytest.approx(tot["no_env_s"] / tot["env_s"])
  rg = [d for d in domains if "/rg-" in d]
  assert m["family_informative/rg"] == pytest.approx(
      sum(want[d]["informative"] for d in rg if d in want)
      / sum(want[d]["groups"] for d in rg if d in want))
  assert 0 < m["signal/informative_share"] < 1


def _close(got, want):
  assert got.keys() == want.keys()
  for d in want:
    assert got[d] == pytest.approx(want[d]), d


def test_sums_add_across_rollouts_and_wave_parts():
  """Dynamic sampling's attempts add their flat sums; a wave's parts are summed,
  not weighted by rows (merge_parts)."""
  rng = np.random.default_rng(1)
  a, b = (_records(rng, ["rlpt/x-a-easy-v0", "rlpt/y-b-easy-v0"], 6) for _ in range(2))
  whole = signal_sums(a + b, G)
  ma, mb = flat_sums(signal_sums(a, G)), flat_sums(signal_sums(b, G))
  added = {k: ma.get(k, 0.0) + mb.get(k, 0.0) for k in {*ma, *mb}}
  _close(pop_sums(dict(added)), whole)

  _, merged = merge_parts([(list(range(6)), _batch(a), {**ma, "time/x": 1.0}),
                           (list(range(6, 12)), _batch(b), {**mb, "time/x": 2.0})], G, 0)
  merged = dict(merged)
  assert merged.pop("time/x") == 3.0
  _close(pop_sums(merged), whole)


def test_malformed_groups_are_named():
  rec = dict(reward=1.0, infra_error=False, length=3, env_s=0.0)
  with pytest.raises(ValueError, match="5 records do not split into groups of 4"):
    signal_sums([dict(rec, domain="a")] * 5, G)
  with pytest.raises(ValueError, match=r"group 0 mixes domains \['a', 'b'\]"):
    signal_sums([dict(rec, domain="a")] * 3 + [dict(rec, domain="b")], G)


def test_domain_family():
  assert domain_family("rlpt/rg-ab-easy-v0") == "rg"
  assert domain_family("rlpt/terminal-rename-easy-v0") == "terminal"
  assert domain_family("ns/MyEnv-v1") == "MyEnv"
  assert domain_family("CartPole") == "CartPole"
