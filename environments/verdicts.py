"""Verdicts, grades and tasks: the data every domain exchanges with the env."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any


class Verdict(str, enum.Enum):
    """Outcome of grading one answer. The `str` value is what `info["verdict"]` holds."""

    PASS = "PASS"  # correct
    FAIL = "FAIL"  # well-formed but wrong (or partially right: see Grade.reward)
    MALFORMED = "MALFORMED"  # unparseable, empty, too long, not valid text
    TIMEOUT = "TIMEOUT"  # candidate code ran past its wall-clock or CPU limit
    OOM = "OOM"  # candidate code ran out of its memory limit
    ERROR = "ERROR"  # candidate code raised or exited without producing results
    SANDBOX_ERROR = "SANDBOX_ERROR"  # the grading infrastructure failed; not the model's fault


@dataclasses.dataclass(frozen=True)
class Grade:
    """Verdict for one answer.

    reward: in [0, 1]; 1.0 means fully correct. Partial-credit domains (e.g. IoU)
      may give FAIL with reward in (0, 1).
    feedback: short human/model-readable explanation; never contains the hidden
      reference answer unless the domain deliberately reveals a failing test.
    """

    verdict: Verdict
    reward: float
    feedback: str

    def __post_init__(self) -> None:
        if not 0.0 <= self.reward <= 1.0:
            raise ValueError(f"reward must be in [0, 1], got {self.reward}")

    @property
    def success(self) -> bool:
        return self.verdict is Verdict.PASS

    @property
    def infra_error(self) -> bool:
        return self.verdict is Verdict.SANDBOX_ERROR


def passed(feedback: str = "correct") -> Grade:
    return Grade(Verdict.PASS, 1.0, feedback)


def failed(feedback: str, reward: float = 0.0) -> Grade:
    return Grade(Verdict.FAIL, reward, feedback)


def malformed(feedback: str) -> Grade:
    return Grade(Verdict.MALFORMED, 0.0, feedback)


@dataclasses.dataclass(frozen=True)
class Task:
    """One problem instance.

    key: canonical content of the problem; train/eval splits are assigned by
      hashing it, so two tasks with equal keys always land in the same split.
    prompt: exact text shown to the model.
    demonstration: one correct answer, exactly as the model should emit it.
    hidden: grading data the model never sees (reference values, tests).
    retry_cue: text appended after feedback in multi-turn episodes so the model
      knows where to write its next attempt (e.g. "def f(x): return ").
    """

    key: str
    prompt: str
    demonstration: str
    hidden: Any = None
    retry_cue: str = ""
