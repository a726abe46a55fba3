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
  cd.base.cache_dir = str(tmp / "bases")
  t = Trainer(from_config_dict(TrainConfig, cd), str(tmp / "run"))
  yield t
  t.close()
  os.chdir(old)


def test_conversation_layout_and_exact_logprobs(trainer):
  t = trainer
  tasks = t.task_stream.next_tasks(t.domain_sampler)
  tasks_b = [x for x in tasks for _ in range(t.cfg.rollout.group_size)]
  seq, graded, stats, _ = t._episodes(tasks_b, t.sampling)
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
  logp = np.asarray(t._logprobs(t.policy_params(), tokens))
  m = seq.loss_mask > 0
  np.testing.assert_allclose(logp[m], seq.logp[m], atol=2e-4)


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
  cd.base.cache_dir = str(tmp_path / "bases")
  t = Trainer(from_config_dict(TrainConfig, cd), str(tmp_path / "run"))
  try:
    tasks = t.task_stream.next_tasks(t.domain_sampler)
    tasks_b = [x for x in tasks for _ in range(t.cfg.rollout.group_size)]
    seq, graded, stats, _ = t._episodes(tasks_b, t.sampling)
    failed = [i for i, g in enumerate(graded) if not g.success]
    assert failed and all(stats["overflow"][i] for i in failed)
    assert all(not g.infra_error for g in graded)
    assert seq.tokens.shape[1] <= 64 + t.cfg.rollout.max_new_tokens + 16
    # Every environment came back to the pool.
    assert sum(len(q) for q in t.pool._free.values()) == len(tasks_b)
  finally:
    t.close()
