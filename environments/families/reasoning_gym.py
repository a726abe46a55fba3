"""reasoning-gym generators as rlpt domains: "rlpt/rg-<name>-<difficulty>-v0".

Every procedural dataset in `reasoning_gym.factory.DATASETS` (pinned
reasoning-gym==0.1.25) becomes one domain per difficulty, except those in
`LEFT_OUT` (and single levels in `LEVELS_LEFT_OUT`), each with the reason
measured by benchmarks/reasoning_gym_probe.py (docs/reasoning_gym.md has the
table). Difficulties come from reasoning-gym's own curricula: with `top` the
highest level any curriculum attribute defines, easy = level 0, medium =
level top // 2, hard = level top (a two-level curriculum gives easy and hard
only); a generator without a curriculum (or with a single level) gives one
"medium" domain with its default config. Where a curriculum asks for a config
its own validation refuses, the offending field is clamped to the valid range
(`_CLAMPS`).

Tasks: one lazily built, cached dataset per domain (fixed seed, virtual size
`size(name)`: `SIZE`, or the size a generator accepts); `sample` draws an index
from the rng, so resets are deterministic. The prompt is reasoning-gym's
question verbatim (answer-format instructions included; UTF-8 text, e.g.
"\u00d7" or "\u2192", like any prompt), the demonstration its reference answer
(or, for a generator without one, an answer its scorer passes: `DEMONSTRATION`),
and the verifier its own `score_answer(answer, entry)` (or `SCORERS`' where
that one is broken): PASS iff the score is >= PASS_SCORE, else FAIL with the
score as partial credit. A scorer that raises on an answer while it passes the
task's demonstration could not read that answer: MALFORMED. One that raises on
the demonstration too is broken: VERIFIER_ERROR (infrastructure, masked).
Entries whose question is longer than MAX_PROMPT_CHARS UTF-8 bytes, whose answer
is missing, empty, longer than MAX_ANSWER_CHARS or not passed by the scorer, or
whose generation raises are redrawn. The train/eval split is the registry default (content hash of the
question).

The instruct prompt style shows the question and then the answer format in
words ("Put your final answer on a last line of the form `Answer:
<answer>`.", or, for an answer of several lines, a line `Answer:` followed by
it); its demonstration is that answer line. Both styles are graded alike: the
scorer is given the reply's final answer (`environments.answers`: after the
last answer statement, else the last box, else the whole reply; a reply
giving several different answers is MALFORMED), written as it is or, if that
does not pass, without emphasis, $...$ or a trailing period. A reference that
would not be its own final answer (one holding an "Answer:" statement, say)
is redrawn: none of 1,180 probed across every generator does.
"""

from __future__ import annotations

import json
import threading
from fractions import Fraction
import zlib
from typing import Any

import numpy as np

from environments import answers, registry
from environments.verdicts import Grade, Instruct, Problem, failed, malformed, passed, verifier_error

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
INSTRUCT_EXTRA_CHARS = 160  # the instruct prompt's answer format, beyond the question
INSTRUCT_ANSWER_SLACK = 4096  # an instruct reply's reasoning, beyond the longest answer
LINE = answers.AnswerLine("<answer>")
MAX_REDRAWS = 64  # unusable entries (see the module doc) redrawn before giving up
# reasoning-gym's generators and scorers run under one lock per process: they
# are pure Python (the GIL serialises them anyway), not written for threads,
# and CPython 3.11's ast.parse, which several of them call, can raise a
# spurious SystemError when threads parse at once (python/cpython#106905).
_LOCK = threading.Lock()

# Generators not registered, with the reason (measured by
# benchmarks/reasoning_gym_probe.py; docs/reasoning_gym.md).
LEFT_OUT: dict[str, str] = {
    "codeio": ("runs LLM-written code snippets from its data file with exec() inside the "
               "environment process (reasoning-gym's own warning), and keeps the loaded snippets "
               "in a class attribute, so building one level's dataset changes the other levels' tasks"),
    "composite": "a meta-dataset that mixes other generators: no default config (needs a list of datasets)",
}


# Single levels not registered, with the reason (the generator's other levels are).
LEVELS_LEFT_OUT: dict[str, dict[str, str]] = {
    "bf": {"hard": "generation does not finish for some indices: the generated program loops "
                   "`while (acc < target)` with target up to 626 in a one-byte cell, which bfi "
                   "interprets forever (> 40 CPU s on the 3rd of 6 probed tasks, then stopped)"},
    "rubiks_cube": {
        level: f"no demonstration: reasoning-gym's example solution is empty above 3x3x3 (this level is "
               f"{size}x{size}x{size}), and its scorer drops the layer-prefixed moves ('2R', '1Bw') that "
               f"undoing the scramble needs"
        for level, size in (("medium", 5), ("hard", 7))},
    "jugs": {"hard": "too slow: the first task (7 jugs, difficulty 20) took > 100 CPU s to generate "
                     "(a breadth-first search for the fewest moves); even level 2 takes 0.4-9.2 CPU s a task"},
    "game_of_life_halting": {"hard": "the question hides the board: numpy prints the 100x100 grid with "
                                     "'...' elisions (2 distinct questions in 400 draws)"},
    "propositional_logic": {"easy": "4 distinct questions (400 draws), none in the eval split"},
    "sokoban": {"easy": "too slow: 10.8 CPU s a task on average (6 probed; one took 34 CPU s): "
                        "4-10 boxes on a 6x6 board are hard to place"},
    "zebra_puzzles": {"hard": "too slow: 8.2 CPU s a task on average (6 probed)"},
    **{"number_sequence": {
        level: "too slow, without bound: rules that square repeatedly grow the terms doubly "
               "exponentially; one of 1000 medium draws ran > 60 CPU s, and the 12th hard draw took "
               "12 CPU s, a later one > 100 CPU s (both stopped)" for level in ("medium", "hard")}},
    "coin_flip": {"easy": "3 flips only: 8 distinct questions (3000 draws), none in the eval split"},
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


def _clamp_survo(config: Any) -> None:
    config.max_empty = min(config.max_empty, (config.min_board_size - 1) ** 2)
    config.min_empty = min(config.min_empty, config.max_empty)


# reasoning-gym's curricula step some attributes past the range their own
# config validates (0.1.25): the config at that level is clamped to the valid
# range, keeping every other attribute at the level asked for. Each entry
# fixes the assertion named in its comment.
_CLAMPS: dict[str, Any] = {
    # "rotation must be in range [1,25]": the hard level asks for up to 50.
    "caesar_cipher": lambda c: setattr(c, "max_rotation", min(c.max_rotation, 25)),
    # "min_nodes must be >= 6": every level's lower bound is 4.
    "knight_swap": lambda c: (setattr(c, "min_nodes", max(c.min_nodes, 6)),
                              setattr(c, "max_nodes", max(c.max_nodes, 6))),
    # "max_empty must be <= (min_board_size - 1)^2": the hard level asks for 25 on a 4x4 board.
    "survo": _clamp_survo,
}
# Datasets that refuse the default virtual size, or build something per item
# when constructed: a size they accept, built in a few CPU seconds at most
# (benchmarks/reasoning_gym_probe.py measures it).
_SIZES = {
    "word_ladder": 20_000,  # refuses sizes above 20000 ("Dataset size too large")
    "acre": 20_000,  # generates every question up front: ~0.2 CPU ms each
    "gsm_symbolic": 2**20,  # draws one template index per item up front
    "list_functions": 2**20,  # ditto
}


class _OrderedLetters(frozenset):
    """A set of letters that iterates in sorted order, and whose differences do too.

    `isomorphic_strings` and `ransom_note` draw letters with `rng.choice(list(letters))`
    and `rng.choice(list(letters - other))`, where `letters` is a set of str: its order,
    and so the question drawn for a seed, depends on PYTHONHASHSEED. Sorted order keeps
    the same distribution (a uniform choice among the same letters) and makes the draw
    a function of seed and index alone."""

    def __iter__(self):
        return iter(sorted(frozenset.__iter__(self)))

    def __sub__(self, other):
        return _OrderedLetters(frozenset.__sub__(self, other))


def _ordered_letters(dataset: Any) -> None:
    dataset.letters = _OrderedLetters(dataset.letters)


def _sorted_monomials(dataset: Any) -> None:
    """polynomial_multiplication draws terms with `rng.choice(list(itermonomials(...)))`:
    sympy returns a set, whose order depends on PYTHONHASHSEED. Sorted (sympy's
    canonical order), the same choice gives the same term in every process."""
    import sympy

    draw = dataset._get_monomials
    dataset._get_monomials = lambda rng: sorted(draw(rng), key=sympy.default_sort_key)


# Applied to a dataset once built.
_ADAPT: dict[str, Any] = {"isomorphic_strings": _ordered_letters, "ransom_note": _ordered_letters,
                          "polynomial_multiplication": _sorted_monomials}

# Indices a generator cannot give deterministically, by generator: they are redrawn.
# list_functions' rule 14 ("1 if divisible by 10, 0 if by 5") draws its odd multiples
# of 5 from the unseeded global `random` module (create_random_odd_numbers), so the
# same index gives other questions in every process; its 16 other rules use the seed.
_SKIP: dict[str, Any] = {"list_functions": lambda dataset, index: dataset.task_indices[index] == 14}


def _json_coloring(entry: dict[str, Any]) -> str:
    return json.dumps({str(k): v for k, v in entry["metadata"]["possible_answer"].items()})


def _rush_hour_moves(entry: dict[str, Any]) -> str:
    """A shortest solution of a rush_hour board (breadth-first search over the
    pieces' positions), in the question's move format ("A+2 C-1 ...": piece
    letter, then cells right/down or left/up)."""
    n = 6  # reasoning_gym.games.rush_hour.BOARD_SIZE; the red car is piece "A" on row 2
    desc = entry["metadata"]["board_config"]
    cells: dict[str, list[int]] = {}
    for i, c in enumerate(desc):
        if c not in "ox":
            cells.setdefault(c, []).append(i)
    names = sorted(cells)  # the scorer's piece i is letter chr(ord("A") + i)
    shape = [(len(cells[c]), cells[c][1] - cells[c][0]) for c in names]  # (length, stride 1 or n)
    walls = {i for i, c in enumerate(desc) if c == "x"}
    start, goal = tuple(cells[c][0] for c in names), 2 * n + n - 2
    parent: dict[tuple[int, ...], tuple[tuple[int, ...], str] | None] = {start: None}
    frontier = [start]
    while frontier:
        following = []
        for state in frontier:
            if state[0] == goal:
                moves = []
                while parent[state] is not None:
                    state, move = parent[state]
                    moves.append(move)
                return " ".join(reversed(moves))
            taken = set(walls)
            for p, (length, stride) in zip(state, shape):
                taken.update(range(p, p + length * stride, stride))
            for i, (p, (length, stride)) in enumerate(zip(state, shape)):
                for sign in (1, -1):
                    for k in range(1, n):
                        q = p + sign * k * stride
                        enters = q if sign < 0 else q + (length - 1) * stride
                        inside = (0 <= q and q + (length - 1) * n < n * n) if stride == n else \
                            (q // n == p // n and (q + length - 1) // n == p // n and q >= 0)
                        if not inside or enters in taken:
                            break
                        nxt = state[:i] + (q,) + state[i + 1:]
                        if nxt not in parent:
                            parent[nxt] = (state, f"{chr(ord('A') + i)}{'+' if sign > 0 else '-'}{k}")
                            following.append(nxt)
        frontier = following
    return ""  # unsolvable: no demonstration, the task is redrawn


def _boxnet_plan(entry: dict[str, Any]) -> str:
    """An action plan that delivers every boxnet box: one box at a time, moved
    square by square (rows first) to a free target of its colour, one action a step."""
    state = {k: list(v) for k, v in entry["metadata"]["initial_state"].items()}
    free = [(k, item[len("target_"):]) for k, items in state.items() for item in items if item.startswith("target_")]
    plan = []
    for square, items in state.items():
        for box in (item for item in items if item.startswith("box_")):
            colour = box[len("box_"):]
            target = next(t for t in free if t[1] == colour)
            free.remove(target)
            (r, c), (tr, tc) = (tuple(map(float, k.split("_"))) for k in (square, target[0]))
            while (r, c) != (tr, tc):
                nr, nc = (r + (1 if tr > r else -1), c) if r != tr else (r, c + (1 if tc > c else -1))
                plan.append({f"Agent[{r}, {c}]": f"move({box}, square[{nr}, {nc}])"})
                r, c = nr, nc
            plan.append({f"Agent[{r}, {c}]": f"move({box}, target_{colour})"})
    return json.dumps(plan)


# Generators whose `answer` is None: any answer `score_answer` accepts passes
# (a proper coloring, a valid conclusion, a move list that solves the board).
# The demonstration is one such answer, taken from the entry's metadata or
# found by a solver here, and used only once the scorer gives it full marks
# (checked per task in `sample`; a task without one is redrawn).
DEMONSTRATION: dict[str, Any] = {
    "graph_color": _json_coloring,
    "propositional_logic": lambda e: str(e["metadata"]["example_answer"]),
    "rubiks_cube": lambda e: str(e["metadata"]["example_correct_answer"]),
    "rush_hour": _rush_hour_moves,
    "boxnet": _boxnet_plan,
}


def _true_or_false(answer: str, entry: dict[str, Any]) -> float:
    return float(answer.strip().lower() == str(entry["answer"]).lower())


def _coin_flip(answer: str, entry: dict[str, Any], tol: float = 1e-4) -> float:
    """coin_flip's scorer with its partial credit over the reference's digits:
    reasoning-gym divides the matching prefix by the shorter string, so "0"
    (a prefix of every probability below 1) scores 1.0 against "0.0703125"."""
    try:
        got, want = (float(Fraction(x.replace(",", ""))) for x in (answer, str(entry["answer"])))
    except (ValueError, ZeroDivisionError):
        return 0.0
    if abs(got - want) <= tol:
        return 1.0
    a, b = f"{got:.10g}", f"{want:.10g}"
    prefix = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return prefix / len(b)


# Scorers used instead of the generator's own, where that one is broken.
# game_of_life_halting (0.1.25) compares bool(answer) == bool(entry["answer"]):
# both are non-empty strings ("True"/"False"), so every non-empty answer scores 1.
# Its question asks for 'True' or 'False'; that word is compared (case aside).
SCORERS: dict[str, Any] = {"game_of_life_halting": _true_or_false, "coin_flip": _coin_flip}


def size(name: str) -> int:
    """The virtual dataset size of generator `name` (tasks are indices below it)."""
    return _SIZES.get(name, SIZE)


def make_dataset(name: str, level: int | None, seed: int) -> Any:
    """reasoning-gym dataset `name` at curriculum `level` (None: default config),
    its config clamped to the range it validates (`_CLAMPS`)."""
    from reasoning_gym import factory

    dataset_cls, config_cls = factory.DATASETS[name]
    if level is None:
        config = config_cls(seed=seed, size=size(name))
    else:
        curriculum = factory.create_curriculum(name)
        curriculum.set_global_level(level)
        config = curriculum.generate_configuration(defaults={"seed": seed, "size": size(name)})
    if name in _CLAMPS:
        _CLAMPS[name](config)
    dataset = dataset_cls(config=config)
    if name in _ADAPT:
        _ADAPT[name](dataset)
    return dataset


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

    def _score(self, answer: str, entry: dict[str, Any]) -> float:
        """reasoning-gym's score of `answer` in [0, 1] (None and NaN are 0); raises what the scorer raises."""
        scorer = SCORERS.get(self.name) or self.dataset().score_answer
        with _LOCK:
            score = scorer(answer, entry)
        score = float(score if score is not None else 0.0)
        return min(max(score, 0.0), 1.0) if score == score else 0.0

    def _demonstration(self, entry: dict[str, Any]) -> str | None:
        """One correct answer to `entry` if it is usable, else None (redrawn): the
        question must be text of at most `spec.max_prompt_chars` UTF-8 bytes (so
        also characters, and tokens of the byte tokenizer) and the answer, the
        entry's reference or, for a generator without one, `DEMONSTRATION`'s
        answer, must be passed by the scorer, non-empty and at most
        `spec.max_answer_chars` characters."""
        question, answer = entry.get("question"), entry.get("answer")
        if not isinstance(question, str) or not 0 < len(question.encode("utf-8")) <= self.spec.max_prompt_chars:
            return None
        if answer is None and self.name in DEMONSTRATION:
            answer = DEMONSTRATION[self.name](entry)
        if not isinstance(answer, str) or not 0 < len(answer.strip()) <= self.spec.max_answer_chars:
            return None
        if answers.final_answer(answer, number_line=False, multiline="\n" in answer).source != "text":
            return None  # the reference holds an answer statement or a box: graded replies could not give it
        # Some references fail their own scorer (jugs gives "No solution" for a puzzle
        # it says takes 10 moves): such a task has no known answer.
        try:
            if self._score(answer.strip(), entry) < PASS_SCORE:
                return None
        except Exception:  # noqa: BLE001  a scorer that cannot read the reference: same
            return None
        return answer.strip()

    def sample(self, rng: np.random.Generator) -> Problem:
        dataset = self.dataset()
        error = ""
        for _ in range(MAX_REDRAWS):
            index = int(rng.integers(size(self.name)))
            if self.name in _SKIP and _SKIP[self.name](dataset, index):
                continue
            try:
                with _LOCK:
                    entry = dataset[index]
            except Exception as e:  # noqa: BLE001
                # Some generators give up on some indices (tsumego: "Failed to generate a
                # capture problem"), always the same ones: that index has no task.
                error = f"; the last generator error: {type(e).__name__}: {e}"
                continue
            demonstration = self._demonstration(entry)
            if demonstration is not None:
                question, lines = entry["question"], "\n" in demonstration
                instruct = Instruct(f"{question}\n\n{LINE.instruction(multiline=lines)}",
                                    LINE.demonstrate(demonstration))
                return Problem(key=question, prompt=question, demonstration=demonstration, hidden=entry,
                               instruct=instruct)
        raise RuntimeError(f"{self.spec.id}: no usable reasoning-gym entry in {MAX_REDRAWS} draws{error}")

    def bounded(self, spec: registry.DomainSpec) -> "ReasoningGymDomain":
        """This domain's tasks whose question fits `spec.max_prompt_chars`
        (`environments.bounded.register_bounded`): the same generator, seed and
        split assignment; longer entries are redrawn within the dataset."""
        return ReasoningGymDomain(spec, self.name, self.level, seed=self.seed)

    def grade(self, task: Problem, answer: str) -> Grade:
        found = answers.final_answer(answer, number_line=False, multiline="\n" in task.demonstration)
        many = answers.several(found)
        if many:
            return malformed(answers.several_feedback(many))
        answer = (answers.last_boxed(found.text) or "").strip() if found.source == "boxed" else found.text.strip()
        limit = max(ANSWER_FLOOR, ANSWER_SLACK * len(task.demonstration))
        if len(answer) > limit:
            return malformed(f"answer has {len(answer)} characters; at most {limit} are graded for this task")
        if not answer:
            return malformed("the final answer is empty")
        try:
            score = self._score(answer, task.hidden)
            plain = answers.clean(answer)
            if score < PASS_SCORE and found.source != "text" and plain and plain != answer:
                score = max(score, self._score(plain, task.hidden))  # "**42**", "$42$", "42."
        except Exception as e:
            # Several scorers parse the answer and let the parser's error escape
            # (e.g. prime_factorization's int()). If the scorer passes this task's
            # demonstration, the raise was about this answer: it could not be
            # read. If not, the scorer itself is broken: not the model's fault.
            try:
                reference_passes = self._score(task.demonstration, task.hidden) >= PASS_SCORE
            except Exception:
                reference_passes = False
            if not reference_passes:
                return verifier_error(f"reasoning-gym scorer raised {type(e).__name__} and does not pass the reference")
            return malformed(f"the answer could not be read (reasoning-gym's scorer raised {type(e).__name__})")
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
            if difficulty in LEVELS_LEFT_OUT.get(name, {}):
                continue
            spec = registry.DomainSpec(
                id=f"rlpt/{FAMILY}-{_domain_name(name)}-{difficulty}-v{VERSION}",
                family=FAMILY,
                difficulty=difficulty,
                tags=("reasoning-gym", "procedural", name),
                max_prompt_chars=MAX_PROMPT_CHARS,
                max_answer_chars=MAX_ANSWER_CHARS,
                description=f"reasoning-gym {name!r} ({'default config' if level is None else f'curriculum level {level}'})",
                max_instruct_prompt_chars=MAX_PROMPT_CHARS + INSTRUCT_EXTRA_CHARS,
                max_instruct_answer_chars=MAX_ANSWER_CHARS + INSTRUCT_ANSWER_SLACK,
            )
            registry.register(ReasoningGymDomain(spec, name, level))


_register()
