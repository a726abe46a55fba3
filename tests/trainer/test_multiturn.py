"""Multi-turn episodes through the trainer: attempts with feedback, tool turns, exact log-probs.

The smoke base emits near-random bytes, so first attempts fail and every
episode runs to its attempt budget: the conversation holds each sampled turn
(loss on) followed by the environment's feedback (loss off), and the
trainer's log-probs over the whole conversation equal the sampler's at every
sampled token.
"""

import os

import jax
import numpy as np
import pytest

from experiments import grpo_default
from rlpt.config import TrainConfig, from_config_dict
from tests.bases import base_cache_dir

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOMAINS = ["rlpt/strings-reverse-easy-v0", "rlpt/code-linear-easy-v0", "rlpt/tools-calc-easy-v0"]


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
  from rlpt.trainer import Trainer
  tmp = tmp_path_factory.mktemp("multiturn")
  old = os.getcwd()
  os.chdir(ROOT)
  cd = grpo_default.get_config("smoke")
  cd.progress = False
  cd.checkpoint.every = 0
  cd.domains.ids = DOMAINS
  cd.rollout.update(max_attempts=3, max_turns=4, max_prompt_len=1536)
  cd.base.cache_dir = base_cache_dir()
  t = Trainer(from_config_dict(TrainConfig, cd), str(tmp / "run"))
  yield t
  t.close()
  os.chdir(old)


def test_conversation_layout_and_exact_logprobs(trainer):
  t = trainer
  tasks = t.rollout.task_stream.next_tasks(t.rollout.domain_sampler)
  tasks_b = [x for x in tasks for _ in range(t.cfg.rollout.group_size)]
  seq, graded, stats, _ = t.rollout.episodes(tasks_b, t.rollout.sampling)
  n_new = t.cfg.rollout.max_new_tokens
  pad = t.tokenizer.pad_id
  for i, task in enumerate(tasks_b):
    turns = stats["turns"][i]
    assert 1 <= turns <= (4 if "tools" in task.domain else 3)
    if not graded[i].success and not stats["overflow"][i]:
      # An unsolved episode spends its whole budget.
      assert turns == (4 if "tools" in task.domain else 3) or graded[i].infra_error
    mask = seq.loss_mask[i]
    # Sampled tokens: the sum of every turn's completion.
    assert mask.sum() == stats["generated"][i] <= turns * n_new
    # Loss-bearing spans are separated by observation tokens (no loss).
    spans = np.flatnonzero(np.diff(np.concatenate([[0], mask, [0]])) == 1)
    assert len(spans) == turns
  # Feedback reached the conversation: the text after turn 1 holds a verdict.
  i = int(np.argmax(stats["turns"]))
  text = t.tokenizer.decode([x for x in seq.tokens[i] if x != pad])
  assert any(v in text for v in ("MALFORMED", "FAIL", "ERROR", "result:"))

  tokens = jax.device_put(seq.tokens)
  logp = np.asarray(t.actor.logprobs(t.actor.policy_params(), tokens))
  m = seq.loss_mask > 0
  np.testing.assert_allclose(logp[m], seq.logp[m], atol=2e-4)


def test_interleaved_turns_keep_exact_logprobs(trainer):
  """rollout.interleave_turns: later turns are sampled for whichever episodes are
  ready, in partial batches (padded to a row bucket); every sampled token's
  log-prob still equals the trainer's."""
  t = trainer
  tasks = t.rollout.task_stream.next_tasks(t.rollout.domain_sampler)
  tasks_b = [x for x in tasks for _ in range(t.cfg.rollout.group_size)]
  t.rollout.episode_runner.interleave = True
  try:
    out = t.rollout.episodes(tasks_b, t.rollout.sampling, grouped=True)
  finally:
    t.rollout.episode_runner.interleave = False
  assert out.metrics["rollout/sampler_calls"] >= max(out.stats["turns"])
  assert all(g is not None for g in out.final)
  logp = np.asarray(t.actor.logprobs(t.actor.policy_params(), jax.device_put(out.seq.tokens)))
  m = out.seq.loss_mask > 0
  assert m.sum() == out.stats["generated"].sum()
  np.testing.assert_allclose(logp[m], out.seq.logp[m], atol=2e-4)


def test_shared_prefix_scoring_and_update_equal_plain(trainer):
  """The trainer's shared-prefix reference pass and update (rl.shared_prefix)
  equal the plain ones on a grouped multi-turn batch (log-probs 2e-5, updated
  parameters 1e-6: the update moves them by about lr = 1e-5 times Adam's unit step)."""
  import jax.numpy as jnp

  from rlpt.steps import LossCounts, RLBatch, check_shared_prefix

  t = trainer
  tasks = t.rollout.task_stream.next_tasks(t.rollout.domain_sampler)
  tasks_b = [x for x in tasks for _ in range(t.cfg.rollout.group_size)]
  seq, _, _, _ = t.rollout.episodes(tasks_b, t.rollout.sampling, grouped=True)
  shared = t.actor.shared_prefix(seq.tokens)
  assert shared is not None and shared.length >= 8 and shared.group == t.cfg.rollout.group_size
  check_shared_prefix(seq.tokens, shared)
  plain = np.asarray(t.actor.logprobs(t.actor.ref_params, seq.tokens))
  got = np.asarray(t.actor.logprobs(t.actor.ref_params, seq.tokens, shared))
  np.testing.assert_allclose(got, plain, atol=2e-5, rtol=0)

  mask = np.asarray(seq.loss_mask, np.float32)
  adv = np.random.default_rng(0).normal(size=(len(mask), 1)).astype(np.float32) * mask
  batch = RLBatch(seq.tokens, mask, plain, plain - 0.01, adv)
  counts = LossCounts(jnp.float32(mask.sum()), jnp.float32(len(mask)))
  out = {}
  start = jax.tree.map(jnp.copy, t.actor.state)
  for key in (None, shared):
    t.actor.state = jax.tree.map(jnp.copy, start)
    metrics = t.actor.train_on(batch, counts, 0.04, key)
    out[key] = (t.actor.state.params, metrics)
  for a, b in zip(jax.tree.leaves(out[None][0]), jax.tree.leaves(out[shared][0])):
    np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=1e-6, rtol=0)
  assert abs(float(out[shared][1]["grad_norm"]) / float(out[None][1]["grad_norm"]) - 1) < 1e-4


def test_packed_groups_score_their_prompt_once_and_equal_plain(trainer):
  """The update's packed rows hold each group's prompt once (rl.shared_prefix
  with rl.pack_sequences): the reference pass on them gives every trained
  token of a grouped multi-turn batch its plain log-prob (2e-5)."""
  t = trainer
  tasks = t.rollout.task_stream.next_tasks(t.rollout.domain_sampler)
  tasks_b = [x for x in tasks for _ in range(t.cfg.rollout.group_size)]
  seq, _, _, _ = t.rollout.episodes(tasks_b, t.rollout.sampling, grouped=True)
  mask = np.asarray(seq.loss_mask, np.float32)
  packing = t.actor._packing(seq.tokens, mask)
  assert (packing.branch_B > 0).any() and packing.real_tokens < packing.length_B.sum()
  plain = np.asarray(t.actor.logprobs(t.actor.ref_params, seq.tokens))
  got = packing.unpack(np.asarray(t.actor.logprobs(
      t.actor.ref_params, packing.tokens(seq.tokens, t.actor.cfg.pad_id), segments_BxL=packing.segments())))
  m = mask > 0
  np.testing.assert_allclose(got[m], plain[m], atol=2e-5, rtol=0)


def test_train_step_reports_turns(trainer):
  m = trainer.train_step()
  assert m["rollout/turns"] > 1.0
  assert 0.0 <= m["rollout/context_overflow"] <= 1.0
  assert np.isfinite(m["train/loss"])


def test_context_limit_ends_episodes_unsolved(tmp_path, monkeypatch):
  from rlpt.trainer import Trainer
  monkeypatch.chdir(ROOT)
  cd = grpo_default.get_config("smoke")
  cd.progress = False
  cd.checkpoint.every = 0
  cd.domains.ids = ["rlpt/strings-reverse-easy-v0"]
  # Room for the prompt and one completion, not for the feedback after it.
  cd.rollout.update(max_attempts=5, max_prompt_len=64)
  cd.base.cache_dir = base_cache_dir()
  t = Trainer(from_config_dict(TrainConfig, cd), str(tmp_path / "run"))
  try:
    tasks = t.rollout.task_stream.next_tasks(t.rollout.domain_sampler)
    tasks_b = [x for x in tasks for _ in range(t.cfg.rollout.group_size)]
    seq, graded, stats, _ = t.rollout.episodes(tasks_b, t.rollout.sampling)
    failed = [i for i, g in enumerate(graded) if not g.success]
    assert failed and all(stats["overflow"][i] for i in failed)
    assert all(not g.infra_error for g in graded)
    assert seq.tokens.shape[1] <= 64 + t.cfg.rollout.max_new_tokens + 16
    # Every environment came back to the pool.
    assert sum(t.rollout.pool.idle().values()) == len(tasks_b)
  finally:
    t.close()
