"""A verifier's own failure is infrastructure: an exception or a time-out inside
grade() is VERIFIER_ERROR (masked, the episode truncated), never FAIL."""

import threading
import time
import uuid

import gymnasium
import numpy as np
import pytest

import environments  # noqa: F401  (registers domains)
from environments import env as env_module
from environments import registry
from environments.verdicts import Problem, Verdict, passed


class _Flaky(registry.Domain):
    """Grades "ok" PASS; "raise" makes the verifier raise; "hang" makes it block until released."""

    def __init__(self, spec, release):
        self.spec = spec
        self.release = release

    def sample(self, rng: np.random.Generator) -> Problem:
        return Problem(key=f"k{int(rng.integers(1000))}", prompt="say ok", demonstration="ok")

    def grade(self, task, answer):
        if answer == "raise":
            raise ZeroDivisionError("the verifier divided by zero")
        if answer == "hang":
            self.release.wait(30)
        return passed()


def _register(tags=("strings",)):
    release = threading.Event()
    spec = registry.DomainSpec(id=f"rlpt/flaky-v{uuid.uuid4().int % 10**9}-easy-v0", family="flaky",
                               difficulty="easy", tags=tags, max_prompt_chars=16, max_answer_chars=16)
    registry.register(_Flaky(spec, release))
    return spec.id, release


def _step(env, answer):
    env.reset(seed=0)
    return env.step(answer)


def test_a_verifier_that_raises_is_an_infrastructure_error_not_a_fail():
    domain_id, _ = _register()
    env = gymnasium.make(domain_id, max_attempts=3)
    obs, reward, terminated, truncated, info = _step(env, "raise")
    assert info["verdict"] == Verdict.VERIFIER_ERROR.value
    assert info["infra_error"] and not info["success"] and reward == 0.0
    assert truncated and not terminated  # ended without an outcome: masked, not retried as the model's attempt
    assert "ZeroDivisionError" in info["feedback"]
    assert _step(env, "ok")[4]["verdict"] == "PASS"


def test_a_verifier_past_its_time_bound_is_an_infrastructure_error():
    domain_id, release = _register()
    env = gymnasium.make(domain_id, grade_timeout_s=0.2)
    start = time.monotonic()
    info = _step(env, "hang")[4]
    assert time.monotonic() - start < 5
    release.set()
    assert info["verdict"] == "VERIFIER_ERROR" and info["infra_error"]
    assert "longer than 0.2 s" in info["feedback"]


def test_time_bound_defaults_by_where_the_verifier_runs():
    in_process, _ = _register()
    sandboxed, _ = _register(tags=("code", "sandbox"))
    assert gymnasium.make(in_process).unwrapped.grade_timeout_s == env_module.GRADE_TIMEOUT_S
    assert gymnasium.make(sandboxed).unwrapped.grade_timeout_s is None  # its jobs carry their own limits
    assert gymnasium.make(in_process, grade_timeout_s=None).unwrapped.grade_timeout_s is None
    for bad in (0, -1.0, "10", True):
        with pytest.raises(ValueError, match=f"grade_timeout_s must be .* got {bad!r}"):
            gymnasium.make(in_process, grade_timeout_s=bad)


def test_call_with_deadline_returns_and_reraises_in_the_caller():
    assert env_module.call_with_deadline(lambda: 7, 1.0) == 7
    assert env_module.call_with_deadline(lambda: 7, None) == 7
    with pytest.raises(KeyError, match="inner"):
        env_module.call_with_deadline(lambda: {}["inner"], 1.0)
