"""reasoning-gym generators as rlpt domains: "rlpt/rg-<name>-<difficulty>-v0".

Every procedural dataset in `reasoning_gym.factory.DATASETS` (pinned
reasoning-gym==0.1.25) becomes one domain per difficulty, except those in
`LEFT_OUT`. Difficulties come from reasoning-gym's own curricula: with `top`
the highest level any curriculum attribute defines, easy = level 0, medium =
level top // 2, hard = level top (a two-level curriculum gives easy and hard
only); a generator without a curriculum (or with a single level) gives one
"medium" domain with its default config.

Tasks: one lazily built, cached dataset per domain (fixed seed, virtual size
`SIZE`); `sample` draws an index from the rng, so resets are deterministic. The
prompt is reasoning-gym's question (answer-format instructions included), the
demonstration its reference answer, and the verifier its own
`score_answer(answer, entry)`: PASS iff the score is >= PASS_SCORE, else FAIL
with the score as partial credit. A scorer that raises is the task's fault, not
the model's: SANDBOX_ERROR (masked). Entries whose question is non-ASCII or
longer than MAX_PROMPT_CHARS, or whose answer is empty or longer than
MAX_ANSWER_CHARS, are redrawn. The train/eval split is the registry default
(content hash of the question).
"""

from __future__ import annotations

import dataclasses
import threading
import zlib
from typing import Any

import numpy as np

from environments import registry
from environments.verdicts import Grade, Task, Verdict, failed, malformed, passed

FAMILY = "rg"
VERSION = 0
# Virtual dataset size; items are generated on demand from seed + index, which some
# generators pass to numpy (must stay < 2**32): seeds are < 2**31 as well.
SIZE = 2**31
MAX_PROMPT_CHARS = 32_768  # hard matrix/grid generators reach ~21k
MAX_ANSWER_CHARS = 24_576  # hard matrix answers reach ~19k; grade also bounds it per task (ANSWER_SLACK)
# An answer longer than max(ANSWER_FLOOR, ANSWER_SLACK * len(reference)) is MALFORMED without
# being scored: it bounds the work a (sympy-parsing) scorer can be handed.
ANSWER_FLOOR = 1_024
ANSWER_SLACK = 4
PASS_SCORE = 0.999
MAX_REDRAWS = 64  # entries rejected by the ASCII/length filters before giving up
# reasoning-gym's generators and scorers run under one lock per process: they
# are pure Python (the GIL serialises them anyway), not written for threads,
# and CPython 3.11's ast.parse, which several of them call, can raise a
# spurious SystemError when threads parse at once (python/cpython#106905).
_LOCK = threading.Lock()

# Generators not registered, with the reason (found by probing every generator:
# determinism, reference answer scores 1, wrong answers score < 1 without
# raising, ASCII prompts, < ~50 ms per task, no network).
LEFT_OUT: dict[str, str] = {
    'acre': 'too slow: probe of 6 tasks per level did not finish in 40 s',
    'advanced_geometry': 'non-ASCII questions (every probed question)',
    'bf': 'generation crashed the probe process (interpreting generated Brainf*ck programs)',
    'boxnet': 'no reference answer (answer is None)',
    'caesar_cipher': 'curriculum config fails validation (rotation must be in [1, 25])',
    'circuit_logic': 'non-ASCII questions (every probed question)',
    'codeio': 'not deterministic (same seed and index give different questions); non-ASCII questions',
    'coin_flip': 'task space too small: the easy level yields no eval-split question in 2000 draws',
    'composite': 'a meta-dataset: needs an explicit list of datasets, no default config',
    'countdown': 'too slow: mean generation + scoring time over 50 ms per task at some level',
    'emoji_mystery': 'non-ASCII questions (every probed question)',
    'futoshiki': 'non-ASCII questions; too slow: mean generation + scoring time over 50 ms per task at some level',
    'game_of_life': 'too slow: mean generation + scoring time over 50 ms per task at some level',
    'game_of_life_halting': "scorer gives 1.0 to wrong answers such as '@@@ ???'",
    'graph_color': 'no reference answer (answer is None)',
    'gsm_symbolic': 'too slow: probe of 6 tasks per level did not finish in 40 s',
    'intermediate_integration': 'non-ASCII questions; too slow: mean generation + scoring time over 50 ms per task at some level',
    'isomorphic_strings': 'not reproducible across processes: questions depend on PYTHONHASHSEED (set order)',
    'jugs': 'too slow: probe of 6 tasks per level did not finish in 40 s',
    'kakurasu': 'too slow: mean generation + scoring time over 50 ms per task at some level',
    'knight_swap': 'curriculum config fails validation (min_nodes must be >= 6)',
    'list_functions': 'too slow: probe of 6 tasks per level did not finish in 40 s',
    'modulo_grid': 'non-ASCII questions (every probed question)',
    'n_queens': 'too slow: mean generation + scoring time over 50 ms per task at some level (and 4.4 s to build the hard dataset)',
    'needle_haystack': 'non-ASCII questions (most probed ones; at hard no ASCII question in 64 draws)',
    'number_sequence': 'too slow: probe of 6 tasks per level did not finish in 40 s',
    'polynomial_equations': 'too slow: mean generation + scoring time over 50 ms per task at some level',
    'polynomial_multiplication': 'too slow: mean generation + scoring time over 50 ms per task at some level',
    'prime_factorization': 'non-ASCII questions; scorer raises ValueError on unparseable answers',
    'propositional_logic': 'no reference answer (answer is None)',
    'puzzle24': 'too slow: mean generation + scoring time over 50 ms per task at some level',
    'quantum_lock': 'non-ASCII questions; too slow: mean generation + scoring time over 50 ms per task at some level',
    'rearc': 'too slow: mean generation + scoring time over 50 ms per task at some level',
    'ransom_note': 'not reproducible across processes: questions depend on PYTHONHASHSEED (set order)',
    'rectangle_count': 'non-ASCII questions (every probed question)',
    'rubiks_cube': 'no reference answer (answer is None); hard curriculum config fails validation (cube_size must be < 7)',
    'rush_hour': 'no reference answer (answer is None)',
    'simple_geometry': 'non-ASCII questions (every probed question)',
    'simple_integration': 'non-ASCII questions (every probed question)',
    'sokoban': 'too slow: probe of 6 tasks per level did not finish in 40 s',
    'survo': 'curriculum config fails validation (max_empty must be <= 9)',
    'tsumego': 'generation fails (RuntimeError: Failed to generate a capture problem)',
    'word_ladder': 'dataset refuses the virtual size (Dataset size too large for this algorithm and constraints)',
    'zebra_puzzles': 'too slow: probe of 6 tasks per level did not finish in 40 s',
}


def _domain_name(name: str) -> str:
    return name.lower().replace("_", "-")


def levels(name: str) -> dict[str, int | None]:
    """difficulty -> curriculum global level (None: the dataset's default config)."""
    from reasoning_gym import factory

    if name not in factory.CURRICULA:
        return {"medium": None}
    curriculum = factory.create_curriculum(name)
    top = max((len(a.levels) for a in curriculum.attributes.values()), default=1) - 1
    if top <= 0:
        return {"medium": None}
    if top == 1:
        return {"easy": 0, "hard": 1}
    return {"easy": 0, "medium": top // 2, "hard": top}


def make_dataset(name: str, level: int | None, seed: int) -> Any:
    """reasoning-gym dataset `name` at curriculum `level` (None: default config)."""
    from reasoning_gym import factory

    dataset_cls, config_cls = factory.DATASETS[name]
    if level is None:
        config = config_cls(seed=seed, size=SIZE)
    else:
        curriculum = factory.create_curriculum(name)
        curriculum.set_global_level(level)
        config = curriculum.generate_configuration(defaults={"seed": seed, "size": SIZE})
    return dataset_cls(config=config)


class ReasoningGymDomain(registry.Domain):
    def __init__(self, spec: registry.DomainSpec, name: str, level: int | None,
                 seed: int | None = None) -> None:
        self.spec = spec
        self.name = name
        self.level = level
        self.seed = zlib.crc32(spec.id.encode("utf-8")) % 2**31 if seed is None else seed
        self._lock = threading.Lock()
        self._cached: Any = None

    def dataset(self) -> Any:
        # Built on first use: constructing ~300 datasets at import would be slow.
        if self._cached is None:
            with self._lock:
                if self._cached is None:
                    self._cached = make_dataset(self.name, self.level, self.seed)
        return self._cached

    def _usable(self, entry: dict[str, Any]) -> bool:
        question, answer = entry.get("question"), entry.get("answer")
        return (
            isinstance(question, str)
            and isinstance(answer, str)
            and question.isascii()
            and 0 < len(question) <= self.spec.max_prompt_chars
            and 0 < len(answer.strip()) <= self.spec.max_answer_chars
        )

    def sample(self, rng: np.random.Generator) -> Task:
        dataset = self.dataset()
        for _ in range(MAX_REDRAWS):
            with _LOCK:
                entry = dataset[int(rng.integers(SIZE))]
            if self._usable(entry):
                return Task(key=entry["question"], prompt=entry["question"], demonstration=entry["answer"].strip(), hidden=entry)
        raise RuntimeError(f"{self.spec.id}: no usable reasoning-gym entry in {MAX_REDRAWS} draws")

    def bounded(self, spec: registry.DomainSpec) -> "ReasoningGymDomain":
        """This domain's tasks whose question fits `spec.max_prompt_chars`
        (`environments.bounded.register_bounded`): the same generator, seed and
        split assignment; longer entries are redrawn within the dataset."""
        return ReasoningGymDomain(spec, self.name, self.level, seed=self.seed)

    def grade(self, task: Task, answer: str) -> Grade:
        limit = max(ANSWER_FLOOR, ANSWER_SLACK * len(task.demonstration))
        if len(answer) > limit:
            return malformed(f"answer has {len(answer)} characters; at most {limit} are graded for this task")
        try:
            dataset = self.dataset()
            with _LOCK:
                score = dataset.score_answer(answer, task.hidden)
            score = float(score if score is not None else 0.0)
        except Exception as e:  # the generator's scorer failed: not the model's fault
            return Grade(Verdict.SANDBOX_ERROR, 0.0, f"reasoning-gym scorer raised {type(e).__name__}")
        score = min(max(score, 0.0), 1.0) if score == score else 0.0  # NaN -> 0
        if score >= PASS_SCORE:
            return passed()
        return failed("incorrect" if score == 0.0 else f"partially correct (score {score:.3f})", reward=score)


def _register() -> None:
    try:
        from reasoning_gym import factory
    except ImportError:  # optional dependency: the family is simply absent
        return
    for name in sorted(factory.DATASETS):
        if name in LEFT_OUT:
            continue
        for difficulty, level in levels(name).items():
            spec = registry.DomainSpec(
                id=f"rlpt/{FAMILY}-{_domain_name(name)}-{difficulty}-v{VERSION}",
                family=FAMILY,
                difficulty=difficulty,
                tags=("reasoning-gym", "procedural", name),
                max_prompt_chars=MAX_PROMPT_CHARS,
                max_answer_chars=MAX_ANSWER_CHARS,
                description=f"reasoning-gym {name!r} ({'default config' if level is None else f'curriculum level {level}'})",
            )
            registry.register(ReasoningGymDomain(spec, name, level))


_register()
