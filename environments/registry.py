"""Registry of RL domains.

A *domain* is a procedural task generator plus its verifier (`Domain`). Every
domain is described by a `DomainSpec` and registered twice: here (for
filtering by family / difficulty / tag) and with `gymnasium.register`, so
`gymnasium.make(spec.id)` builds a `TaskEnv` for it. New domains are added by
registering, never by editing the env.
"""

from __future__ import annotations

import abc
import dataclasses
import difflib
import re

import gymnasium
import numpy as np

from environments.verdicts import PROMPT_STYLES, Grade, Problem, ToolReply, check_prompt_style

DIFFICULTIES = ("easy", "medium", "hard")
_ID_RE = re.compile(r"^rlpt/(?P<family>[a-z0-9]+)-[a-z0-9-]+-v\d+$")


@dataclasses.dataclass(frozen=True)
class DomainSpec:
    """Static description of one domain.

    id: gymnasium id, "rlpt/<family>-<variant>-<difficulty>-v<version>".
    max_prompt_chars: upper bound on len(prompt) in characters (the initial
      observation); multi-turn feedback observations are bounded separately by
      `environments.env.FEEDBACK_MAX_CHARS`.
    max_answer_chars: longest answer (after stripping surrounding whitespace)
      that is graded; longer answers are MALFORMED. Demonstrations are shorter.
      For tool-using domains this bounds every turn (tool call or answer).
    max_turns: None for ordinary domains. For tool-using domains, the default
      budget of model turns per episode (tool calls and final answers together);
      their `grade` may return a non-scored `ToolReply` (see environments.env).
    max_instruct_prompt_chars / max_instruct_answer_chars: the same bounds in
      the "instruct" prompt style (`Problem.instruct`: the task in words, and
      replies with their reasoning before the final answer); None for a
      domain that offers only the "bare" style. Both or neither.
    """

    id: str
    family: str
    difficulty: str
    tags: tuple[str, ...]
    max_prompt_chars: int
    max_answer_chars: int
    description: str = ""
    max_turns: int | None = None
    max_instruct_prompt_chars: int | None = None
    max_instruct_answer_chars: int | None = None

    def __post_init__(self) -> None:
        match = _ID_RE.match(self.id)
        if match is None:
            raise ValueError(f"domain id {self.id!r} must look like 'rlpt/<family>-<name>-v<N>'")
        if match["family"] != self.family:
            raise ValueError(f"domain id {self.id!r} does not start with its family {self.family!r}")
        if self.difficulty not in DIFFICULTIES:
            raise ValueError(f"difficulty of {self.id!r} is {self.difficulty!r}; allowed: {DIFFICULTIES}")
        if not isinstance(self.tags, tuple) or not all(isinstance(t, str) for t in self.tags):
            raise ValueError(f"tags of {self.id!r} must be a tuple of str, got {self.tags!r}")
        if self.max_prompt_chars <= 0 or self.max_answer_chars <= 0:
            raise ValueError(f"max_prompt_chars/max_answer_chars of {self.id!r} must be positive")
        if self.max_turns is not None and (not isinstance(self.max_turns, int) or self.max_turns < 1):
            raise ValueError(f"max_turns of {self.id!r} must be None or an int >= 1, got {self.max_turns!r}")
        instruct = (self.max_instruct_prompt_chars, self.max_instruct_answer_chars)
        if instruct != (None, None) and not all(isinstance(v, int) and v > 0 for v in instruct):
            raise ValueError(f"max_instruct_prompt_chars/max_instruct_answer_chars of {self.id!r} must both be "
                             f"positive ints (the instruct style) or both None (bare only), got {instruct}")

    @property
    def prompt_styles(self) -> tuple[str, ...]:
        """The prompt styles this domain offers: "bare", and "instruct" where its bounds are set."""
        return PROMPT_STYLES if self.max_instruct_prompt_chars is not None else ("bare",)

    def bounds(self, prompt_style: str) -> tuple[int, int]:
        """(max prompt chars, max answer chars) in `prompt_style`; ValueError for
        an unknown style or one this domain does not offer."""
        check_prompt_style(prompt_style)
        if prompt_style not in self.prompt_styles:
            raise ValueError(f"domain {self.id!r} offers prompt_style {self.prompt_styles}, not {prompt_style!r}")
        if prompt_style == "instruct":
            return self.max_instruct_prompt_chars, self.max_instruct_answer_chars
        return self.max_prompt_chars, self.max_answer_chars


class Domain(abc.ABC):
    """A task generator and its verifier. Subclasses must be stateless after __init__
    (one instance is shared by every env of the domain, across threads)."""

    spec: DomainSpec

    @abc.abstractmethod
    def sample(self, rng: np.random.Generator) -> Problem:
        """Draws one task. Must use only `rng` for randomness (reset determinism)."""

    @abc.abstractmethod
    def grade(self, task: Problem, answer: str) -> Grade | ToolReply:
        """Grades `answer`, which the env has already stripped of surrounding
        whitespace, checked to be valid UTF-8 text and at most
        `spec.max_answer_chars` long. Only domains whose spec sets `max_turns`
        may return a `ToolReply` (a non-scored turn, e.g. a tool's result)."""

    def sample_in_split(self, rng: np.random.Generator, split: str) -> Problem | None:
        """Optional: draws a task of `split` ("train"/"eval") directly, using only
        `rng`. Domains over a fixed task list with their own split assignment
        (e.g. dataset files, `environments.datasets`) override it. The default,
        None, means `environments.splits.draw` rejection-samples `sample` on the
        content hash of the task key."""
        return None


_DOMAINS: dict[str, Domain] = {}


def register(domain: Domain) -> Domain:
    """Registers `domain` here and with gymnasium. Duplicate ids raise ValueError."""
    spec = domain.spec
    if spec.id in _DOMAINS:
        raise ValueError(f"domain {spec.id!r} is already registered")
    _DOMAINS[spec.id] = domain
    gymnasium.register(
        id=spec.id,
        entry_point="environments.env:TaskEnv",
        kwargs={"domain_id": spec.id},
        # The env raises its own RuntimeError for step-before-reset; gymnasium's
        # OrderEnforcing would raise ResetNeeded first, which is not a RuntimeError.
        order_enforce=False,
    )
    return domain


def unregister(domain_id: str) -> None:
    """Removes `domain_id` here and from gymnasium (a notebook re-registering an
    edited file under its id, a test cleaning up); an unknown id raises ValueError."""
    if domain_id not in _DOMAINS:
        raise _unknown(domain_id)
    del _DOMAINS[domain_id]
    gymnasium.registry.pop(domain_id, None)


def list_domains(
    family: str | None = None, difficulty: str | None = None, tag: str | None = None
) -> list[DomainSpec]:
    """Specs of all registered domains matching every given filter, sorted by id."""
    if difficulty is not None and difficulty not in DIFFICULTIES:
        raise ValueError(f"difficulty {difficulty!r} is not one of {DIFFICULTIES}")
    specs = [d.spec for d in _DOMAINS.values()]
    if family is not None:
        specs = [s for s in specs if s.family == family]
    if difficulty is not None:
        specs = [s for s in specs if s.difficulty == difficulty]
    if tag is not None:
        specs = [s for s in specs if tag in s.tags]
    return sorted(specs, key=lambda s: s.id)


def families() -> list[str]:
    return sorted({d.spec.family for d in _DOMAINS.values()})


def _core(domain_id: str) -> str:
    """The part of an id that tells domains apart ("rlpt/x-easy-v0" -> "x-easy")."""
    core = domain_id.removeprefix("rlpt/")
    head, sep, version = core.rpartition("-v")
    return head if sep and version.isdigit() else core


def close_matches(domain_id: str, n: int = 5) -> list[str]:
    """Registered ids that look like `domain_id`, compared without the "rlpt/" and
    "-vN" that every id shares (else everything looks close to everything)."""
    by_core = {}
    for d in _DOMAINS:
        by_core.setdefault(_core(d), d)
    return [by_core[c] for c in difflib.get_close_matches(_core(domain_id), list(by_core), n=n, cutoff=0.6)]


def close_matches_hint(domain_id: str) -> str:
    close = close_matches(domain_id)
    return f"; close matches: {close}" if close else f" (none of the {len(_DOMAINS)} registered ids is close)"


def _unknown(domain_id: str) -> ValueError:
    return ValueError(f"unknown domain id {domain_id!r}{close_matches_hint(domain_id)}")


def is_registered(domain_id: str) -> bool:
    return domain_id in _DOMAINS


def get(domain_id: str) -> DomainSpec:
    """Spec of `domain_id`; unknown ids raise ValueError listing close matches."""
    return domain(domain_id).spec


def domain(domain_id: str) -> Domain:
    """The `Domain` object (generator + verifier) registered as `domain_id`."""
    try:
        return _DOMAINS[domain_id]
    except KeyError:
        raise _unknown(domain_id) from None
