"""The rollout on the continuous-batching engine (``engine.enabled``).

Multi-turn episodes on the smoke base (near-random bytes: first attempts fail
and episodes run to their budgets). Every sampled token's log-prob equals the
trainer's (2e-4, as tests/trainer/test_multiturn.py), and the tokens do not
depend on the environments' timing: the same tasks and key give the same
conversations with instant environments and with slow ones whose latencies
reorder the turns.
"""

import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks.slow_envs import SlowEnvPool
from experiments import grpo_default
from rlpt.config import TrainConfig, from_config_dict
from tests.bases import base_cache_dir

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOMAINS = ["rlpt/strings-reverse-easy-v0", "rlpt/code-linear-easy-v0", "rlpt/tools-calc-easy-v0"]


def _cfg():
  cd = grpo_default.get_config("smoke")
  cd.progress = False
  cd.checkpoint.update(every=0, export=False)
  cd.domains.ids = DOMAINS
  cd.rollout.update(max_attempts=3, max_turns=4, max_prompt_len=1536)
  # A slot per episode: none is released while its environment runs.
  cd.engine.update(enabled=True, slots=cd.rollout.batch_size, chunk_steps=8)
  cd.base.cache_dir = base_cache_dir()
  return from_config_dict(TrainConfig, cd)


@pytest.fixture(scope="module")
def trainers(tmp_path_factory):
  from rlpt.trainer import Trainer
  tmp = tmp_path_factory.mktemp("engine")
  old = os.getcwd()
  os.chdir(ROOT)
  cfg = _cfg()
  fast = Trainer(cfg, str(tmp / "fast"))
  slow = Trainer(cfg, str(tmp / "slow"),
                 env_pool=SlowEnvPool.from_train(cfg, latency_s=0.05, dist="exponential"))
  yield fast, slow
  fast.close()
  slow.close()
  os.chdir(old)


def _play(t, tasks):
  return t.rollout.episodes(tasks, t.rollout.sampling, key=jax.random.key(3))


@pytest.mark.slow
def test_engine_episodes_are_exact_and_do_not_depend_on_env_timing(trainers):
  fast, slow = trainers
  tasks = fast.rollout.task_stream.next_tasks(fast.rollout.domain_sampler)
  tasks = [x for x in tasks for _ in range(fast.cfg.rollout.group_size)]
  seq, graded, stats, metrics = _play(fast, tasks)
  assert max(stats["turns"]) > 1 and metrics["rollout/sampler_calls"] > 1
  mask = seq.loss_mask > 0
  logp = np.asarray(fast.actor.logprobs(fast.actor.policy_params(), jax.device_put(seq.tokens)))
  np.testing.assert_allclose(logp[mask], seq.logp[mask], atol=2e-4)
  engine = fast.rollout.samplers.engine
  # Prefill fed each prompt and observation token once: no re-prefill of earlier turns.
  assert engine.stats["reprefill_tokens"] == 0
  assert engine.running == 0
  again = _play(slow, tasks)
  np.testing.assert_array_equal(again.seq.tokens, seq.tokens)
  np.testing.assert_array_equal(again.seq.loss_mask, seq.loss_mask)
  assert [g.reward for g in again.final] == [g.reward for g in graded]


@pytest.mark.slow
def test_a_training_step_on_the_engine(trainers):
  fast, _ = trainers
  metrics = fast.train_step()
  assert np.isfinite(metrics["train/loss"]) and np.isfinite(metrics["reward/mean"])
  # The engine's counters: every sampled token decoded in a slot, nothing recomputed.
  assert 0 < metrics["engine/decoded_tokens"] <= metrics["engine/slot_steps"]
  assert metrics["engine/refresh_tokens"] == metrics["engine/reprefill_tokens"] == 0
  assert metrics["rollout/sampler_calls"] >= 1


@pytest.mark.slow
@pytest.mark.parametrize("in_flight", ["finish", "continue"])
def test_weights_published_while_a_batch_plays(trainers, monkeypatch, in_flight):
  """New weights arrive while the batch's first answers are graded: under
  "finish" every token is the old policy's; under "continue" the rounds after
  it sample with the new weights, each token's log-prob is the trainer's
  under the policy that sampled it, and a sample's version is its oldest token's."""
  fast, _ = trainers
  src, actor = fast.rollout, fast.actor
  engine = src.samplers.engine
  monkeypatch.setattr(engine, "cfg", dataclasses.replace(engine.cfg, in_flight=in_flight))
  old = actor.policy_params()
  new = jax.tree.map(lambda x: x * 1.5 if jnp.issubdtype(x.dtype, jnp.floating) else x, old)
  v0, submit = src.step, src.pool.submit

  def publishing_submit(episodes, answers):
    if src.latest[0] == v0:  # the loop publishes update v0 + 1 meanwhile
      src.set_weights(actor._to_sample_layout(new), v0 + 1)
    return submit(episodes, answers)
  monkeypatch.setattr(src.pool, "submit", publishing_submit)
  try:
    batch, _ = src.rollout_once(fast.cfg.rollout.prompts_per_step, v0, key=jax.random.key(5))
  finally:
    src.set_weights(actor.sampling_weights(), v0)
  assert src.latest[0] == v0
  mask = batch.loss_mask > 0
  near = {name: np.abs(np.asarray(actor.logprobs(p, jax.device_put(batch.tokens)))
                       - batch.old_logp) < 2e-4 for name, p in (("old", old), ("new", new))}
  assert (near["old"] | near["new"])[mask].all()
  if in_flight == "finish":
    assert near["old"][mask].all()
    assert (batch.version == v0).all()
  else:
    assert (mask & near["new"] & ~near["old"]).any()   # tokens only the new policy explains
    assert set(batch.version.tolist()) <= {v0, v0 + 1} and (batch.version == v0).any()
    later = batch.version == v0 + 1                   # started after the new weights came
    assert (near["new"] | ~mask)[later].all()
    # Within a sample, the old policy's tokens come first, then the new one's.
    only_new = np.where(mask & near["new"] & ~near["old"], np.arange(mask.shape[1]), mask.shape[1])
    only_old = np.where(mask & near["old"] & ~near["new"], np.arange(mask.shape[1]), -1)
    assert (only_old.max(axis=1) < only_new.min(axis=1)).all()
    assert src.samplers.engine.stats["refresh_tokens"] > 0


def _async_run(tmp, name, latency):
  from rlpt.trainer import Trainer
  cd = grpo_default.get_config("smoke")
  cd.progress = False
  cd.checkpoint.update(every=0, export=False)
  cd.optim.warmup_steps = 0
  cd.rollout.staleness = 1
  cd.rollout.domain_staleness = {"rlpt/code-linear-easy-v0": 2}   # a wave in two parts
  cd.engine.update(enabled=True, slots=cd.rollout.batch_size)
  cd.base.cache_dir = base_cache_dir()
  cfg = from_config_dict(TrainConfig, cd)
  t = Trainer(cfg, str(tmp / name), env_pool=SlowEnvPool.from_train(cfg, latency_s=latency))
  try:
    return [t.train_step() for _ in range(3)]
  finally:
    t.close()


@pytest.mark.slow
def test_asynchronous_waves_share_the_engine_and_do_not_depend_on_env_timing(tmp_path,
                                                                             monkeypatch):
  """Waves and their per-domain parts run concurrently and take turns on the
  engine; the metrics do not depend on the environments' latency."""
  from rlpt.metrics import WALL_CLOCK_PREFIXES
  monkeypatch.chdir(ROOT)
  a, b = _async_run(tmp_path, "a", 0.02), _async_run(tmp_path, "b", 0.0)
  assert [m["async/staleness"] for m in a] == [0, 1, 1]
  for ma, mb in zip(a, b):
    assert np.isfinite(ma["train/loss"])
    values = lambda m: {k: v for k, v in m.items() if not k.startswith(WALL_CLOCK_PREFIXES)}
    assert values(ma) == values(mb)
