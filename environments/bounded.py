"""Any domain, cut to the tasks that fit a context: `register_bounded`.

A small model's context holds prompts of a few hundred characters and
answers of a few dozen; many domains draw longer ones now and then (or
always). `register_bounded(id, n)` registers "<id minus -vN>-p<n>-vN": the
same generator, verifier and split assignment, with tasks whose prompt is
longer than `n` characters redrawn, so its tasks are a subset of the
original's (same content, same split, same grading). `max_demo_chars=m` also
redraws tasks whose demonstration (one correct answer) is longer than `m`
("-p<n>-d<m>-vN"): a model that writes at most m characters could not solve
them. A domain whose spec already bounds its prompts by `n` (and that has no
demonstration bound to apply) is returned as it is. A family may give its
domains their own prompt cut (`Domain.bounded`: reasoning-gym redraws within
its dataset); every other cut is a `BoundedDomain`.

    spec = register_bounded("rlpt/rg-chain-sum-medium-v0", 126)
    gymnasium.make(spec.id)                   # prompts of at most 126 characters
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from environments import registry
from environments.verdicts import Grade, Problem, ToolReply

PROBES = 64            # draws that check a bound leaves enough of a domain's tasks
MIN_SHARE = 1 / 8      # ... at least this share of them
# Early refusals: none of the first n draws fits and the shortest prompt is more
# than m times the bound. The farther over, the fewer draws it takes.
QUICK_REFUSALS = ((4, 2.0), (16, 1.25))
# Redraws before a reset gives up: at a 1-in-8 share, (7/8)^1024 ~ 1e-59.
MAX_REDRAWS = 1024


class BoundedDomain(registry.Domain):
    """`base`'s tasks whose prompt has at most `spec.max_prompt_chars` characters
    (and whose demonstration has at most `max_demo_chars`, if given)."""

    def __init__(self, spec: registry.DomainSpec, base: registry.Domain,
                 max_demo_chars: int | None = None):
        self.spec, self.base, self.max_demo_chars = spec, base, max_demo_chars

    def _fits(self, task: Problem | None) -> bool:
        return task is not None and fits(task, self.spec.max_prompt_chars, self.max_demo_chars)

    def sample(self, rng: np.random.Generator) -> Problem:
        for _ in range(MAX_REDRAWS):
            task = self.base.sample(rng)
            if self._fits(task):
                return task
        raise RuntimeError(f"{self.spec.id}: no prompt of at most {self.spec.max_prompt_chars} "
                           f"characters in {MAX_REDRAWS} draws")

    def sample_in_split(self, rng: np.random.Generator, split: str) -> Problem | None:
        task = self.base.sample_in_split(rng, split)
        if task is None:
            return None  # the base splits by content hash: `splits.draw` redraws `sample`
        for _ in range(MAX_REDRAWS):
            if self._fits(task):
                return task
            task = self.base.sample_in_split(rng, split)
        raise RuntimeError(f"{self.spec.id}: no {split!r} prompt of at most "
                           f"{self.spec.max_prompt_chars} characters in {MAX_REDRAWS} draws")

    def grade(self, task: Problem, answer: str) -> Grade | ToolReply:
        return self.base.grade(task, answer)


def fits(task: Problem, max_prompt_chars: int, max_demo_chars: int | None = None) -> bool:
    # Counted in UTF-8 bytes: never fewer than the characters, and what a byte
    # tokenizer's context must hold (a non-ASCII prompt has more bytes than characters).
    return (_utf8_len(task.prompt) <= max_prompt_chars
            and (max_demo_chars is None or _utf8_len(task.demonstration) <= max_demo_chars))


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", errors="surrogatepass"))


_BOUNDED_ID_RE = re.compile(r"-p(\d+)(?:-d(\d+))?-v(\d+)$")


def is_bounded_id(domain_id: str) -> bool:
    """True for an id `bounded_id` makes (a cut of another domain, not an original)."""
    return _BOUNDED_ID_RE.search(domain_id) is not None


def bounded_id(domain_id: str, max_prompt_chars: int, max_demo_chars: int | None = None) -> str:
    stem, sep, version = domain_id.rpartition("-v")
    if not (sep and version.isdigit()):
        raise ValueError(f"domain id {domain_id!r} does not end in -v<N>")
    demo = f"-d{max_demo_chars}" if max_demo_chars is not None else ""
    return f"{stem}-p{max_prompt_chars}{demo}-v{version}"


def register_id(domain_id: str) -> registry.DomainSpec:
    """The spec of `domain_id`, registering it first when it is a `bounded_id`
    cut not registered in this process yet (a process that grades a run's
    domains without loading its config: ``rlpt/rg-chain-sum-easy-p400-v0`` is
    ``register_bounded("rlpt/rg-chain-sum-easy-v0", 400)``)."""
    if registry.is_registered(domain_id):
        return registry.get(domain_id)
    match = _BOUNDED_ID_RE.search(domain_id)
    if match is None:
        return registry.get(domain_id)  # raises, naming close matches
    prompt, demo, version = match.groups()
    base = f"{domain_id[:match.start()]}-v{version}"
    try:
        return register_bounded(base, int(prompt), int(demo) if demo is not None else None)
    except (KeyError, ValueError) as e:
        raise ValueError(f"{domain_id!r} is a bounded cut of {base!r}, which cannot be "
                         f"registered: {e}") from None


def probe(domain: registry.Domain, max_prompt_chars: int, max_demo_chars: int | None = None,
          probes: int = PROBES) -> tuple[int, list[Problem]]:
    """(how many fit, the tasks drawn) of up to `probes` tasks drawn with a
    fixed rng, stopping once the verdict is settled: at MIN_SHARE * probes
    tasks that fit (the bound is kept), or when too few draws are left to
    reach that (it is refused), the same verdict all `probes` draws give.
    One shortcut: when none of the first n tasks fits and the shortest of
    them is more than m times the bound, for an (n, m) of QUICK_REFUSALS (4
    tasks at twice the bound, 16 at 1.25 times), the bound is refused there
    (a domain whose prompts are that long leaves almost no task under it;
    some generators take seconds per draw)."""
    rng = np.random.default_rng(0)
    need = int(np.ceil(MIN_SHARE * probes))
    ok, tasks = 0, []
    for i in range(probes):
        task = domain.sample(rng)
        tasks.append(task)
        ok += fits(task, max_prompt_chars, max_demo_chars)
        if ok >= need or ok + (probes - i - 1) < need:
            break
        if ok == 0 and any(len(tasks) == n and min(_utf8_len(t.prompt) for t in tasks)
                           > margin * max_prompt_chars for n, margin in QUICK_REFUSALS):
            break
    return ok, tasks


def _median(xs: list[int]) -> int:
    return sorted(xs)[len(xs) // 2]


def register_bounded(domain_id: str, max_prompt_chars: int,
                     max_demo_chars: int | None = None) -> registry.DomainSpec:
    """The spec of a registered domain with `domain_id`'s tasks of at most
    `max_prompt_chars` prompt characters (and `max_demo_chars` demonstration
    characters; see the module doc). Registering the same bounds again returns
    the domain already registered. Bounds that leave fewer than 1 in 8 of the
    probed tasks raise ValueError with the lengths seen."""
    for name, v in (("max_prompt_chars", max_prompt_chars), ("max_demo_chars", max_demo_chars)):
        if v is not None and (not isinstance(v, int) or v <= 0):
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    base = registry.domain(domain_id)
    if max_demo_chars is not None and base.spec.max_answer_chars <= max_demo_chars:
        max_demo_chars = None  # its graded answers, demonstrations included, are that short
    if base.spec.max_prompt_chars <= max_prompt_chars and max_demo_chars is None:
        return base.spec
    new_id = bounded_id(domain_id, max_prompt_chars, max_demo_chars)
    if registry.is_registered(new_id):
        return registry.get(new_id)
    floor = getattr(base, "min_prompt_chars", 0)  # a domain that knows its prompts' least length
    if floor > max_prompt_chars:
        raise ValueError(f"{domain_id!r}: its prompts have at least {floor} characters, more than "
                         f"{max_prompt_chars}; raise the bound or choose another domain")
    ok, tasks = probe(base, max_prompt_chars, max_demo_chars)
    if ok < MIN_SHARE * PROBES:
        prompts, demos = [len(t.prompt) for t in tasks], [len(t.demonstration) for t in tasks]
        demo = (f" and demonstrations of at most {max_demo_chars}"
                if max_demo_chars is not None else "")
        raise ValueError(
            f"{domain_id!r}: only {ok} of {len(tasks)} drawn tasks have prompts of at most "
            f"{max_prompt_chars} characters{demo} (prompt lengths: min {min(prompts)}, median "
            f"{_median(prompts)}, max {max(prompts)}; demonstrations: min {min(demos)}, median "
            f"{_median(demos)}, max {max(demos)}); raise the bounds or choose an easier level")
    demo = f" and answers of at most {max_demo_chars}" if max_demo_chars is not None else ""
    spec = dataclasses.replace(base.spec, id=new_id,
                               max_prompt_chars=min(max_prompt_chars, base.spec.max_prompt_chars),
                               description=f"{base.spec.description}, prompts of at most "
                                           f"{max_prompt_chars} characters{demo}")
    own = getattr(base, "bounded", None)
    if own is not None and max_demo_chars is None:
        registry.register(own(spec))
    else:
        registry.register(BoundedDomain(spec, base, max_demo_chars))
    return spec
