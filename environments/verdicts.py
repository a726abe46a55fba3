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
    VERIFIER_ERROR = "VERIFIER_ERROR"  # the verifier itself raised or ran past its time bound; not the model's fault
    TOOL = "TOOL"  # a non-scored turn of a tool-using domain: a tool ran (see ToolReply)


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
        """The grading failed, not the answer: the episode is masked, never scored."""
        return self.verdict in (Verdict.SANDBOX_ERROR, Verdict.VERIFIER_ERROR)


def passed(feedback: str = "correct") -> Grade:
    return Grade(Verdict.PASS, 1.0, feedback)


def failed(feedback: str, reward: float = 0.0) -> Grade:
    return Grade(Verdict.FAIL, reward, feedback)


def malformed(feedback: str) -> Grade:
    return Grade(Verdict.MALFORMED, 0.0, feedback)


def verifier_error(feedback: str) -> Grade:
    """The verifier, not the answer, failed (it raised, or ran past its time bound)."""
    return Grade(Verdict.VERIFIER_ERROR, 0.0, feedback)


@dataclasses.dataclass(frozen=True)
class ToolReply:
    """Non-scored reply to one turn of a tool-using domain (spec.max_turns set).

    It consumes a turn of the episode's turn budget but not an attempt, and
    earns reward 0 without ending the episode (unless the turn budget is spent).

    verdict: TOOL when a tool ran and `text` is its result; MALFORMED (not a
      tool call or answer at all) or ERROR (unknown tool, bad arguments, the
      tool failed) when `text` explains what to repair.
    text: result or feedback, one line; the env cuts it to FEEDBACK_MAX_CHARS.
    tool: name of the tool that was called, "" when none could be identified.
    task_text: the task's own next instruction (a multi-step task's next step),
      shown in full after the one-line `text` and followed by the retry cue. It
      comes from the task's author, never from the model's commands.
    """

    verdict: Verdict
    text: str
    tool: str = ""
    task_text: str = ""

    def __post_init__(self) -> None:
        if self.verdict not in (Verdict.TOOL, Verdict.MALFORMED, Verdict.ERROR):
            raise ValueError(f"a ToolReply's verdict must be TOOL, MALFORMED or ERROR, got {self.verdict}")


PROMPT_STYLES = ("bare", "instruct")


def check_prompt_style(style: Any) -> str:
    """`style` if it is one of PROMPT_STYLES, else ValueError naming it."""
    if not isinstance(style, str) or style not in PROMPT_STYLES:
        raise ValueError(f"unknown prompt_style {style!r}; expected one of {PROMPT_STYLES}")
    return style


@dataclasses.dataclass(frozen=True)
class Instruct:
    """The instruct-style form of a task (prompt_style="instruct"): the same
    task for a model fine-tuned to follow instructions.

    prompt: the task stated in words, then its answer format in words (a last
      line `Answer: ...`, one fenced block; `environments.answers`).
    demonstration: one correct reply as an instruct model writes it (brief
      reasoning if any, then the final answer line or block); it PASSes.
    retry_cue: as `Problem.retry_cue`; "" repeats the prompt's last line (its
      answer format).
    demonstration_turns: as `Problem.demonstration_turns`, written so.
    """

    prompt: str
    demonstration: str
    retry_cue: str = ""
    demonstration_turns: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Problem:
    """One problem instance.

    key: canonical content of the problem; train/eval splits are assigned by
      hashing it, so two tasks with equal keys always land in the same split.
    prompt: exact text shown to the model (the "bare" prompt style).
    demonstration: one correct answer, exactly as the model should emit it.
    hidden: grading data the model never sees (reference values, tests).
    retry_cue: text appended after feedback in multi-turn episodes so the model
      knows where to write its next attempt (e.g. "def f(x): return ").
    demonstration_turns: for tool-using domains, every model turn of one full
      solution (tool calls, then the final answer == `demonstration`); the
      env's replies to them are what the env returns when they are stepped.
    instruct: the same task in the "instruct" prompt style, or None for a
      domain that offers only the bare one. One task holds both styles, so
      its key, and so its split, is the same in either; a domain's `grade`
      reads the answers of both (`environments.answers`).
    """

    key: str
    prompt: str
    demonstration: str
    hidden: Any = None
    retry_cue: str = ""
    demonstration_turns: tuple[str, ...] = ()
    instruct: Instruct | None = None

    def styled(self, style: str) -> Instruct:
        """The prompt, demonstration, retry cue and demonstration turns shown in
        `style`, as an `Instruct` (the bare ones for "bare")."""
        if check_prompt_style(style) == "bare":
            return Instruct(self.prompt, self.demonstration, self.retry_cue, self.demonstration_turns)
        if self.instruct is None:
            raise ValueError(f"task {self.key[:40]!r} has no instruct form "
                             "(its domain offers only prompt_style='bare')")
        return self.instruct
