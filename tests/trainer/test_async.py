"""Asynchronous rollout through the trainer: the staleness bound, its correction, and
reproducibility (the version each batch is sampled with does not depend on timing)."""

import os

import numpy as np
import pytest

from benchmarks.slow_envs import SlowEnvPool
from experiments import grpo_default
from rlpt.config import TrainConfig, from_config_dict
from tests.bases import base_cache_dir

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(tmp, name, staleness, steps, latency=0.0, domain_staleness=None, dynamic=False):
  from rlpt.trainer import Trainer
  cd = grpo_default.get_config("smoke")
  if dynamic:
    cd.rl.update(dynamic_sampling=True, max_rollouts_per_step=2)
  cd.progress = False
  cd.checkpoint.every = 0
  cd.optim.warmup_steps = 0  # every update moves the policy
  cd.rollout.staleness = staleness
  if domain_staleness:
    cd.rollout.domain_staleness = domain_staleness
  cd.base.cache_dir = base_cache_dir()
  cfg = from_config_dict(TrainConfig, cd)
  t = Trainer(cfg, str(tmp / name), env_pool=SlowEnvPool.from_train(cfg, latency_s=latency))
  try:
    return [t.train_step() for _ in range(steps)]
  finally:
    t.close()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("async")
  os.chdir(ROOT)
  return (_run(tmp, "a", 2, 4, latency=0.01), _run(tmp, "b", 2, 4))


def test_staleness_ramps_to_the_bound_and_is_corrected(runs):
  a, _ = runs
  assert [m["async/staleness"] for m in a] == [0, 1, 2, 2]
  for m in a:
    assert np.isfinite(m["train/loss"]) and m["train/grad_norm"] > 0
    # Samples from older weights: importance weights near 1, never above the cap.
    assert 0.5 < m["rollout/is_weight_mean"] <= 2.0
    assert 0.0 <= m["accelerator/idle_fraction"] <= 1.0
    assert m["env/masked"] == 0
  # Stale batches come from weights that really differ from the current ones.
  assert any(abs(m["rollout/sampler_kl"]) > 0 for m in a[2:])


def test_asynchronous_runs_are_reproducible(runs):
  a, b = runs
  # Different environment latency (so different thread timing), same batches.
  assert [m["rollout/token_hash"] for m in a] == [m["rollout/token_hash"] for m in b]
  np.testing.assert_allclose([m["train/loss"] for m in a], [m["train/loss"] for m in b],
                             rtol=1e-5, atol=1e-7)


def test_asynchronous_dynamic_sampling_is_reproducible(tmp_path, monkeypatch):
  """A dynamic-sampling rollout runs in the producer without holding the
  curriculum lock through it (it takes the lock for each draw); the batches
  still do not depend on timing."""
  monkeypatch.chdir(ROOT)
  a = _run(tmp_path, "a", 1, 3, latency=0.01, dynamic=True)
  b = _run(tmp_path, "b", 1, 3, dynamic=True)
  assert [m["rollout/token_hash"] for m in a] == [m["rollout/token_hash"] for m in b]
  assert [m["dynamic_sampling/rollouts"] for m in a] == [m["dynamic_sampling/rollouts"] for m in b]
  assert all(m["dynamic_sampling/rollouts"] >= 1 for m in a)
  np.testing.assert_allclose([m["train/loss"] for m in a], [m["train/loss"] for m in b],
                             rtol=1e-5, atol=1e-7)


SANDBOX = ("rlpt/code-linear-easy-v0", "rlpt/terminal-rename-easy-v0",
           "rlpt/terminal-create-easy-v0")


def test_per_domain_staleness_budgets(tmp_path, monkeypatch):
  """staleness 0 with the sandbox domains at 2: their samples lag up to 2 updates,
  every other domain's are on-policy; the versions, and so the batches, do not
  depend on timing."""
  monkeypatch.chdir(ROOT)
  budgets = {d: 2 for d in SANDBOX}
  a = _run(tmp_path, "a", 0, 4, latency=0.01, domain_staleness=budgets)
  b = _run(tmp_path, "b", 0, 4, domain_staleness=budgets)
  seen_slow = False
  for step, m in enumerate(a):
    for key, lag in m.items():
      if key.startswith("async/staleness/"):
        domain = key.split("/", 2)[2]
        want = min(step, 2) if domain in SANDBOX else 0
        assert lag == want, (step, domain, lag)
        seen_slow |= domain in SANDBOX and lag == 2
    assert m["async/staleness_max"] <= 2 and np.isfinite(m["train/loss"])
    shares = [m[f"async/staleness_share/{k}"] for k in range(3)]
    assert abs(sum(shares) - 1) < 1e-9 and shares[int(m["async/staleness_max"])] > 0
  assert seen_slow
  assert [m["rollout/token_hash"] for m in a] == [m["rollout/token_hash"] for m in b]


def test_weights_in_the_step_equal_the_recomputing_pass(tmp_path, monkeypatch):
  """With one update per batch the truncated importance weights are taken in the
  train step (no scoring pass); the same run with the scoring pass gives the same
  losses, weights and parameters (1e-6)."""
  import jax

  from rlpt.trainer import Trainer
  monkeypatch.chdir(ROOT)
  out = []
  for in_step in (True, False):
    cd = grpo_default.get_config("smoke")
    cd.progress = False
    cd.checkpoint.every = 0
    cd.optim.warmup_steps = 0
    cd.rollout.staleness = 1
    cd.base.cache_dir = base_cache_dir()
    cd.rl.tis_in_step = in_step
    cfg = from_config_dict(TrainConfig, cd)
    assert cfg.recomputes_old_logp and cfg.tis_in_step == in_step
    assert (cfg.loss_config().behaviour_tis_cap > 0) == in_step
    t = Trainer(cfg, str(tmp_path / f"r{in_step}"))
    try:
      ms = [t.train_step() for _ in range(3)]
      out.append((ms, jax.tree.map(np.asarray, t.actor.policy_params())))
    finally:
      t.close()
  (a, pa), (b, pb) = out
  assert [m["rollout/token_hash"] for m in a] == [m["rollout/token_hash"] for m in b]
  for key in ("train/loss", "train/kl", "rollout/is_weight_mean", "rollout/sampler_kl"):
    np.testing.assert_allclose([m[key] for m in a], [m[key] for m in b], rtol=1e-5, atol=1e-6)
  assert a[2]["rollout/sampler_kl"] != 0
  for x, y in zip(jax.tree.leaves(pa), jax.tree.leaves(pb)):
    np.testing.assert_allclose(x, y, atol=1e-6, rtol=0)


def test_asynchronous_checkpoint_keeps_the_curriculum_updates_not_yet_applied(tmp_path,
                                                                             monkeypatch):
  from rlpt.trainer import Trainer
  monkeypatch.chdir(ROOT)

  def make(steps):
    cd = grpo_default.get_config("smoke")
    cd.progress = False
    cd.steps = steps
    cd.rollout.staleness = 2
    cd.checkpoint.update(every=1, export=False)
    cd.curriculum.strategy = "learning_progress"
    cd.base.cache_dir = base_cache_dir()
    return Trainer(from_config_dict(TrainConfig, cd), str(tmp_path / "run"))

  t = make(3)
  t.run()
  state = t.state_dict()
  t.close()
  # Wave 3 was drawn with the curriculum of version 0: steps 1-3 are still to apply.
  assert state["curriculum_applied"] == 0
  assert sorted(state["curriculum_log"]) == ["1", "2", "3"]
  t = make(5)
  try:
    assert t.restore() == 3
    assert t.rollout.curriculum_applied == 0 and sorted(t.rollout.curriculum_log) == [1, 2, 3]
    t.run()
    assert t.step == 5
  finally:
    t.close()
