"""EnvPool episodes: environments held across turns, released when done, failures masked."""

import pytest

from rlpt.config import EnvConfig
from rlpt.data import Task
from rlpt.rollout import EnvPool

REVERSE = "rlpt/strings-reverse-easy-v0"
CALC = "rlpt/tools-calc-easy-v0"


def _free(pool, domain):
  return pool.idle()[domain]


def test_repair_after_feedback_in_the_same_episode():
  pool = EnvPool([REVERSE], EnvConfig(workers=2), max_attempts=3)
  try:
    task = Task(REVERSE, 5, "train")
    ep, = pool.start([task])
    demo = ep.info["demonstration"]
    step, = pool.step([ep], ["zzzz"])
    assert not step.done and not step.graded.success and step.graded.reward == 0.0
    # The next observation carries the verdict, the feedback and the retry cue.
    assert step.graded.verdict in step.observation and step.observation.endswith(
        ep.prompt.rsplit("\n", 1)[-1])
    assert _free(pool, REVERSE) == 0  # held between turns
    step, = pool.step([ep], [demo])
    assert step.done and step.graded.success and step.graded.reward == 1.0 and ep.turns == 2
    assert _free(pool, REVERSE) == 1  # released at the end
    with pytest.raises(RuntimeError, match="already ended"):
      pool.step([ep], [demo])
  finally:
    pool.close()


def test_attempt_budget_truncates_unsolved():
  pool = EnvPool([REVERSE], EnvConfig(workers=2), max_attempts=2)
  try:
    ep, = pool.start([Task(REVERSE, 1, "train")])
    assert not pool.step([ep], ["q"])[0].done
    last, = pool.step([ep], ["q"])
    assert last.done and not last.graded.success and last.observation == ""
  finally:
    pool.close()


def test_single_attempt_default_ends_after_one_step():
  pool = EnvPool([REVERSE], EnvConfig(workers=2))
  try:
    eps = pool.start([Task(REVERSE, s, "eval") for s in range(4)])
    steps = pool.step(eps, ["abc"] * 4)
    assert all(s.done for s in steps) and _free(pool, REVERSE) >= 1
  finally:
    pool.close()


def test_tool_turns_then_graded_answer():
  pool = EnvPool([CALC], EnvConfig(workers=1), max_turns=3)
  try:
    ep, = pool.start([Task(CALC, 3, "train")])
    turns = ep.info["demonstration_turns"]
    assert len(turns) >= 2
    for call in turns[:-1]:
      step, = pool.step([ep], [call])
      assert not step.done and step.observation.startswith("\nresult: ")
    step, = pool.step([ep], [turns[-1]])
    assert step.done and step.graded.success and step.graded.reward == 1.0
  finally:
    pool.close()


def test_abandon_returns_the_environment():
  pool = EnvPool([REVERSE], EnvConfig(workers=1), max_attempts=4)
  try:
    ep, = pool.start([Task(REVERSE, 2, "train")])
    pool.step([ep], ["q"])
    pool.abandon([ep])
    assert ep.done and _free(pool, REVERSE) == 1
  finally:
    pool.close()


def test_environment_exception_without_retries_is_masked_not_a_wrong_answer():
  pool = EnvPool([REVERSE], EnvConfig(workers=1, retries=0))
  try:
    ep, = pool.start([Task(REVERSE, 2, "train")])
    closed = []

    def boom(action):
      raise OSError("worker vanished")
    ep.env.step = boom
    ep.env.close = lambda: closed.append(True)
    step, = pool.step([ep], ["abc"])
    assert step.done and step.graded.infra_error and step.graded.verdict == "SANDBOX_ERROR"
    assert "worker vanished" in step.graded.info["feedback"]
    assert closed and _free(pool, REVERSE) == 0  # the broken instance is not reused
    assert pool.stats()["env/masked"] == 1
  finally:
    pool.close()


def test_a_verifier_that_raises_is_masked_not_a_wrong_answer():
  pool = EnvPool([REVERSE], EnvConfig(workers=1, retries=0))
  try:
    ep, = pool.start([Task(REVERSE, 3, "train")])
    domain = ep.env.unwrapped._domain

    def grade(task, answer):
      raise RecursionError("the verifier recursed too deep")
    ep.env.unwrapped._domain = type("Broken", (), {"grade": staticmethod(grade), "spec": domain.spec})()
    step, = pool.step([ep], ["abc"])
    assert step.done and step.graded.infra_error and not step.graded.success
    assert step.graded.verdict == "VERIFIER_ERROR" and "recursed too deep" in step.graded.info["feedback"]
    assert pool.stats()["env/masked"] == 1
  finally:
    pool.close()


def test_turn_budget_is_passed_only_to_tool_domains():
  pool = EnvPool([REVERSE, CALC], EnvConfig(workers=1), max_attempts=2, max_turns=5)
  try:
    a, b = pool.start([Task(REVERSE, 0, "train"), Task(CALC, 0, "train")])
    assert a.env.unwrapped.max_turns is None and a.env.unwrapped.max_attempts == 2
    assert b.env.unwrapped.max_turns == 5
    pool.abandon([a, b])
  finally:
    pool.close()

