"""`TaskEnv`: the gymnasium environment shared by every registered domain.

Episode protocol (text in, text out):

* `reset(seed, options={"split": "train"|"eval"})` -> (prompt, info) with
  info = {"domain", "task_id", "demonstration"}; deterministic in (seed, split).
* `step(answer)` -> (obs, reward, terminated, truncated, info) with
  info = {"verdict", "success", "feedback", "infra_error", "domain", "attempt"}.

Prompt styles (`gymnasium.make(id, prompt_style=...)`, per environment, never
per sample): "bare" (the default) shows each task's compact prompt ("47+38=")
and demonstrates its bare answer, as the tiny byte-level base learned them;
"instruct" shows the same task (same key, so the same split) stated in words
with its answer format ("... Put your final answer on a last line of the form
`Answer: <integer>`."), and demonstrates a reply an instruct model would
write (`Problem.instruct`). Observation and answer bounds are the style's
(`DomainSpec.bounds`). Grading is the same in both: every domain takes the
final answer from where instruct models put it (`environments.answers`), and a
bare answer is its own final answer. reset info holds "prompt_style".

Single-turn (`max_attempts=1`, the default): every step terminates.
Multi-turn (`gymnasium.make(id, max_attempts=k)`): a failed attempt with attempts
left returns terminated=False, truncated=False and an observation holding the
feedback plus a cue for the next attempt, to be appended to the conversation.
Success terminates. Running out of attempts truncates (the task was not
solved; the episode was cut by the attempt budget). A SANDBOX_ERROR also
truncates: the infrastructure failed, so the episode ends without a terminal
outcome and the trainer masks it (`info["infra_error"]`). So does a
VERIFIER_ERROR: the domain's verifier raised, or ran past its time bound
(`grade_timeout_s`: GRADE_TIMEOUT_S by default for verifiers that run in this
process; none for domains tagged "sandbox", whose jobs carry their own
limits). Either way the answer is never scored FAIL for the verifier's fault.

Tool-using domains (`spec.max_turns` set, e.g. the "tools" family): a turn may
be a non-scored `ToolReply` instead of a graded answer (a tool call's result,
or MALFORMED/ERROR feedback on a call that cannot run). Such a step returns
reward 0, terminated=False, truncated=False and the observation
"\\n<label>: <text>\\n" (label "result" for a tool result, else the verdict;
then, when the domain moves on to a next instruction, that text) to append to
the conversation; it consumes a turn but not an attempt. Only the
final answer is graded, under the attempt rules above. Every step consumes one
turn of the budget (`gymnasium.make(id, max_turns=n)`, default
`spec.max_turns`); spending it without success truncates with reward 0.
Actions the env rejects before domain code (empty, over-long, invalid UTF-8)
are MALFORMED replies there, so the model can repair them. Step info then also
holds "turns", "tool_calls" and "tool_errors" (counts so far) and "tool", and
reset info holds "demonstration_turns" (all model turns of one solution).

Actions may be `str` or `bytes` (a byte-level model's raw output). Invalid
UTF-8, lone surrogates, empty or over-long answers are graded MALFORMED here,
before any domain code runs, so verifiers only ever see bounded valid text.
In the other direction every observation and feedback string is valid UTF-8
(a lone surrogate in a verifier's text, e.g. a candidate's exception message,
is shown as its backslash escape).
"""

from __future__ import annotations

import threading
from typing import Any, Callable, TypeVar

import gymnasium

from environments import registry, splits
from environments.sandbox import SandboxRequired
from environments.sandbox.worker import valid_text as _valid_text
from environments.spaces import AnyText
from environments.verdicts import Grade, Instruct, Problem, ToolReply, Verdict, malformed, verifier_error

# Feedback text is cut to this many characters before it reaches the model.
FEEDBACK_MAX_CHARS = 256
# Time bound of one in-process grade() call (math, strings, reasoning-gym scorers...).
GRADE_TIMEOUT_S = 60.0

_T = TypeVar("_T")


class VerifierTimeout(Exception):
    """grade() ran past its time bound."""


def call_with_deadline(fn: Callable[[], _T], timeout_s: float | None) -> _T:
    """fn(), or VerifierTimeout once `timeout_s` seconds pass (None: no bound).

    fn runs on a daemon thread; past the deadline it is abandoned, not killed
    (Python cannot stop a thread), so the bound is a backstop behind each
    verifier's own guards (the math verifier bounds expression size before it
    evaluates anything), not a sandbox."""
    if timeout_s is None:
        return fn()
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001  re-raised in the caller's thread
            box["error"] = e

    thread = threading.Thread(target=run, name="rlpt-grade", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise VerifierTimeout(f"grading took longer than {timeout_s:g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def _truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


class TaskEnv(gymnasium.Env[str, str]):
    """Text environment for one registered domain. See the module docstring."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, domain_id: str, max_attempts: int = 1, max_turns: int | None = None,
                 grade_timeout_s: float | None | str = "default", prompt_style: str = "bare") -> None:
        if not isinstance(max_attempts, int) or max_attempts < 1:
            raise ValueError(f"max_attempts must be an int >= 1, got {max_attempts!r}")
        self._domain = registry.domain(domain_id)
        self.domain_spec = self._domain.spec
        prompt_chars, answer_chars = self.domain_spec.bounds(prompt_style)  # ValueError naming a bad style
        self.prompt_style = prompt_style
        if grade_timeout_s == "default":
            grade_timeout_s = None if "sandbox" in self.domain_spec.tags else GRADE_TIMEOUT_S
        if grade_timeout_s is not None and (isinstance(grade_timeout_s, bool) or not isinstance(
                grade_timeout_s, (int, float)) or not grade_timeout_s > 0):
            raise ValueError(f"grade_timeout_s must be a number of seconds > 0 or None, got {grade_timeout_s!r}")
        self.grade_timeout_s = grade_timeout_s
        self.max_attempts = max_attempts
        if max_turns is not None:
            if self.domain_spec.max_turns is None:
                raise ValueError(f"max_turns applies only to tool-using domains; {domain_id!r} has none")
            if not isinstance(max_turns, int) or max_turns < 1:
                raise ValueError(f"max_turns must be an int >= 1, got {max_turns!r}")
        # None: an ordinary domain, whose every step is a graded attempt.
        self.max_turns = max_turns if max_turns is not None else self.domain_spec.max_turns
        obs_chars = prompt_chars
        if max_attempts > 1 or self.max_turns is not None:
            # Feedback observation: "\n<VERDICT>: <feedback>\n<retry cue>".
            obs_chars = max(obs_chars, FEEDBACK_MAX_CHARS + 32 + prompt_chars)
        self.observation_space = AnyText(obs_chars)
        self.action_space = AnyText(answer_chars)
        self._task: Problem | None = None
        self._shown: Instruct | None = None  # the task as this env's prompt style shows it
        self._attempt = 0
        self._turn = 0
        self._tool_calls = 0
        self._tool_errors = 0
        self._done = False

    @property
    def task(self) -> Problem | None:
        """The current task (hidden grading data included); None before reset."""
        return self._task

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        options = dict(options or {})
        split = splits.check_split(options.pop("split", "train"))
        if options:
            raise ValueError(f"unknown reset options {sorted(options)}; allowed: ['split']")
        task = splits.draw(self._domain, self.np_random, split)
        try:
            shown = task.styled(self.prompt_style)
        except ValueError as e:
            raise ValueError(f"{self.domain_spec.id}: {e}") from None
        self._task, self._shown = task, shown
        self._attempt = self._turn = self._tool_calls = self._tool_errors = 0
        self._done = False
        info = {
            "domain": self.domain_spec.id,
            "task_id": splits.task_id(task.key),
            "demonstration": shown.demonstration,
            "prompt_style": self.prompt_style,
        }
        if self.max_turns is not None:
            info["demonstration_turns"] = list(shown.demonstration_turns)
        return shown.prompt, info

    def step(self, action: str | bytes) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._task is None:
            raise RuntimeError(f"{self.domain_spec.id}: step() called before reset()")
        if self._done:
            raise RuntimeError(f"{self.domain_spec.id}: step() called after the episode ended; call reset()")
        answer = self._decode(action)
        if isinstance(answer, Grade):
            # In a tool-using episode a rejected action is repairable, like a bad tool call.
            grade = answer if self.max_turns is None else ToolReply(answer.verdict, answer.feedback)
        else:
            grade = self._grade(answer)
        self._turn += 1
        turns_spent = self.max_turns is not None and self._turn >= self.max_turns
        if isinstance(grade, ToolReply):
            return self._tool_step(grade, turns_spent)
        self._attempt += 1

        terminated = truncated = False
        if self.max_attempts == 1 or grade.success:
            terminated = True
        elif grade.infra_error or self._attempt >= self.max_attempts or turns_spent:
            truncated = True
        self._done = terminated or truncated

        feedback = _truncate(_valid_text(grade.feedback), FEEDBACK_MAX_CHARS)
        obs = _valid_text(f"\n{grade.verdict.value}: {feedback}\n{self._retry_cue()}") if not grade.success else ""
        info = {
            "verdict": grade.verdict.value,
            "success": grade.success,
            "feedback": feedback,
            "infra_error": grade.infra_error,
            "domain": self.domain_spec.id,
            "attempt": self._attempt,
        }
        if self.max_turns is not None:
            info.update(self._turn_metrics())
        return _truncate(obs, self.observation_space.max_length), float(grade.reward), terminated, truncated, info

    def _grade(self, answer: str) -> Grade | ToolReply:
        """The domain's grade of `answer`; VERIFIER_ERROR if the verifier raises or times out."""
        task = self._task
        try:
            return call_with_deadline(lambda: self._domain.grade(task, answer), self.grade_timeout_s)
        except SandboxRequired:
            raise  # the run's set-up cannot grade this domain at all: stop, do not mask
        except Exception as e:  # noqa: BLE001  the verifier's failure, never the answer's
            return verifier_error(f"the verifier failed ({type(e).__name__}: {e}); not scored")

    def _tool_step(self, reply: ToolReply, turns_spent: bool) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.max_turns is None:
            raise TypeError(f"{self.domain_spec.id}: grade() returned a ToolReply but the spec sets no max_turns")
        if reply.verdict is Verdict.TOOL:
            self._tool_calls += 1
        else:
            self._tool_errors += 1
        self._done = turns_spent
        # One line, so the reply cannot forge further turns of the conversation.
        text = _truncate(_valid_text(reply.text).replace("\n", " "), FEEDBACK_MAX_CHARS)
        label = "result" if reply.verdict is Verdict.TOOL else reply.verdict.value
        info = {
            "verdict": reply.verdict.value,
            "success": False,
            "feedback": text,
            "infra_error": False,
            "domain": self.domain_spec.id,
            "attempt": self._attempt,
            **self._turn_metrics(reply.tool),
        }
        obs = f"\n{label}: {text}\n" + (f"\n{_valid_text(reply.task_text)}" if reply.task_text else "")
        return _truncate(obs, self.observation_space.max_length), 0.0, False, turns_spent, info

    def _turn_metrics(self, tool: str = "") -> dict[str, Any]:
        """Per-episode counts so far, and the tool called this turn ("" if none)."""
        return {"turns": self._turn, "tool_calls": self._tool_calls, "tool_errors": self._tool_errors, "tool": tool}

    def _retry_cue(self) -> str:
        assert self._shown is not None
        return self._shown.retry_cue or self._shown.prompt.rsplit("\n", 1)[-1]

    def _decode(self, action: Any) -> str | Grade:
        """Valid, stripped, length-checked answer text, or a MALFORMED grade."""
        if isinstance(action, (bytes, bytearray, memoryview)):
            raw = bytes(action)
            try:
                action = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                return malformed(f"answer is not valid UTF-8 (bad byte at offset {e.start})")
        elif not isinstance(action, str):
            raise TypeError(f"action must be str or bytes, got {type(action).__name__}")
        text = action.strip()
        limit = self.action_space.max_length
        hint = getattr(self._domain, "answer_format", "")
        if not text:
            return malformed(f"empty answer; expected {hint}" if hint else "empty answer")
        if len(text) > limit:
            return malformed(f"answer has {len(text)} characters; at most {limit} are allowed")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            return malformed(f"answer contains an unencodable code point at position {e.start}")
        return text
