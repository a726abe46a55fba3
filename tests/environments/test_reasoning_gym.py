"""reasoning-gym generators as "rg" domains (environments/families/reasoning_gym.py)."""

import json
import os
import re
import subprocess
import sys

import gymnasium
import numpy as np
import pytest

import environments  # noqa: F401  (registers domains)
from environments import registry, splits
from environments.bounded import register_bounded
from environments.families import reasoning_gym as rgf
from environments.verdicts import Problem, Verdict

factory = pytest.importorskip("reasoning_gym.factory")

SPECS = registry.list_domains(family="rg")
# A fixed, spread-out sample keeps the file fast; test_families covers every domain.
SAMPLE = [s.id for s in SPECS[:: max(1, len(SPECS) // 12)]]


def test_every_generator_is_registered_or_left_out_with_a_reason():
    names = set(factory.DATASETS)
    registered = {s.tags[2] for s in SPECS}
    assert registered | set(rgf.LEFT_OUT) == names
    assert not registered & set(rgf.LEFT_OUT)
    assert all(isinstance(r, str) and r.strip() for r in rgf.LEFT_OUT.values())
    assert len(registered) >= 95
    assert len(SPECS) >= 280
    assert {s.difficulty for s in SPECS} == set(registry.DIFFICULTIES)


def test_naming_and_levels():
    pattern = re.compile(r"^rlpt/rg-[a-z0-9-]+-(easy|medium|hard)-v0$")
    for spec in SPECS:
        assert pattern.match(spec.id), spec.id
        name = spec.tags[2]
        assert spec.id == f"rlpt/rg-{name.lower().replace('_', '-')}-{spec.difficulty}-v0"
        assert registry.domain(spec.id).level == rgf.levels(name)[spec.difficulty]
    # A curriculum-less generator gets one default-config "medium" domain.
    for name in set(factory.DATASETS) - set(factory.CURRICULA) - set(rgf.LEFT_OUT):
        ids = [s.id for s in SPECS if s.tags[2] == name]
        assert ids == [f"rlpt/rg-{name.replace('_', '-')}-medium-v0"]


@pytest.mark.parametrize("domain_id", SAMPLE)
def test_reset_is_deterministic_and_splits_are_disjoint(domain_id):
    first = gymnasium.make(domain_id)
    obs_a, info_a = first.reset(seed=7)
    for _ in range(3):  # a dataset that has already served other items still gives the same task
        first.reset(seed=11)
    obs_b, info_b = first.reset(seed=7)
    obs_c, _ = gymnasium.make(domain_id).reset(seed=7)
    assert obs_a == obs_b == obs_c and info_a["task_id"] == info_b["task_id"]
    domain = registry.domain(domain_id)
    keys = {split: {splits.draw(domain, np.random.default_rng(i), split).key for i in range(4)} for split in splits.SPLITS}
    assert not keys["train"] & keys["eval"]
    assert all(splits.split_of(k) == split for split, ks in keys.items() for k in ks)


@pytest.mark.parametrize("domain_id", SAMPLE)
def test_reference_passes_and_wrong_answers_do_not(domain_id):
    env = gymnasium.make(domain_id)
    obs, info = env.reset(seed=3)
    assert len(obs.encode("utf-8")) <= registry.get(domain_id).max_prompt_chars
    assert obs == env.unwrapped.task.hidden["question"]  # reasoning-gym's question verbatim
    _, reward, terminated, _, step = env.step(info["demonstration"])
    assert (reward, terminated, step["verdict"]) == (1.0, True, "PASS")
    for wrong in ("@@@ ???", "qqqq"):
        env.reset(seed=3)
        _, reward, _, _, step = env.step(wrong)
        assert step["verdict"] in ("FAIL", "MALFORMED") and 0.0 <= reward < 1.0 and not step["infra_error"]


def test_partial_credit_and_crashing_scorer():
    domain = registry.domain(SPECS[0].id)
    task = domain.sample(np.random.default_rng(0))

    class Scorer:
        """Scores `result`, or raises it if it is an exception (also on the
        reference, unless `reference_ok`)."""

        def __init__(self, result, reference_ok=False):
            self.result, self.reference_ok = result, reference_ok

        def score_answer(self, answer, entry):
            if self.reference_ok and answer == task.demonstration:
                return 1.0
            if isinstance(self.result, Exception):
                raise self.result
            return self.result

    real = domain._cached
    try:
        domain._cached = Scorer(0.5)
        grade = domain.grade(task, "x")
        assert (grade.verdict, grade.reward) == (Verdict.FAIL, 0.5)
        # Raises on this answer and passes the reference: the answer could not be read.
        domain._cached = Scorer(ValueError("invalid literal for int()"), reference_ok=True)
        grade = domain.grade(task, "x")
        assert (grade.verdict, grade.reward, grade.infra_error) == (Verdict.MALFORMED, 0.0, False)
        assert "ValueError" in grade.feedback
        # Raises on the reference too: the scorer is broken, not the answer.
        domain._cached = Scorer(ValueError("bad entry"))
        grade = domain.grade(task, "x")
        assert grade.verdict is Verdict.VERIFIER_ERROR and grade.infra_error and grade.reward == 0.0
        domain._cached = Scorer(float("nan"))
        assert domain.grade(task, "x").reward == 0.0
    finally:
        domain._cached = real


def test_a_scorer_that_raises_on_a_malformed_answer_grades_it_malformed():
    """prime_factorization's scorer calls int() on the answer's factors and lets
    the ValueError escape: that is the answer being unreadable (the reference
    scores 1), not an infrastructure failure."""
    domain_id = "rlpt/rg-prime-factorization-medium-v0"
    env = gymnasium.make(domain_id)
    for seed in range(3):
        _, info = env.reset(seed=seed)
        with pytest.raises(ValueError):  # the generator's own scorer raises on this answer
            registry.domain(domain_id).dataset().score_answer("2 \u00d7 q", env.unwrapped.task.hidden)
        _, reward, terminated, _, step = env.step("2 \u00d7 q")
        assert (reward, terminated, step["verdict"], step["infra_error"]) == (0.0, True, "MALFORMED", False)
        env.reset(seed=seed)
        assert env.step(info["demonstration"])[4]["verdict"] == "PASS"


def test_a_non_ascii_question_domain_runs_through_gymnasium():
    """Questions are UTF-8 text like any other (the byte tokenizer and Hugging
    Face tokenizers take it): prime_factorization writes "\u00d7" in every question."""
    env = gymnasium.make("rlpt/rg-prime-factorization-easy-v0")
    for seed, split in ((0, "train"), (1, "eval")):
        obs, info = env.reset(seed=seed, options={"split": split})
        assert not obs.isascii() and "\u00d7" in obs and splits.split_of(obs) == split
        _, reward, terminated, _, step = env.step(info["demonstration"])
        assert (reward, terminated, step["verdict"]) == (1.0, True, "PASS")
        env.reset(seed=seed, options={"split": split})
        assert env.step(info["demonstration"] + " \u00d7 2")[4]["verdict"] != "PASS"
        env.reset(seed=seed, options={"split": split})
        assert env.step(info["demonstration"].encode("utf-8"))[1] == 1.0  # a byte-level model's output


def test_a_generator_without_reference_grades_with_its_scorer():
    """graph_color has no reference answer: any proper coloring passes (the one in
    its metadata is the demonstration), an improper one fails."""
    env = gymnasium.make("rlpt/rg-graph-color-medium-v0")
    for seed in range(4):
        _, info = env.reset(seed=seed)
        entry = env.unwrapped.task.hidden
        assert entry["answer"] is None and json.loads(info["demonstration"])
        assert env.step(info["demonstration"])[4]["verdict"] == "PASS"
        puzzle = entry["metadata"]["puzzle"]
        vertices, edges, colors = puzzle["vertices"], puzzle["edges"], puzzle["color_options"]
        assert edges
        # Another proper coloring, found greedily here, passes too.
        coloring = {}
        for v in vertices:
            taken = {coloring.get(u) for a, b in edges for u in (a, b) if v in (a, b) and u != v}
            coloring[v] = next(c for c in colors if c not in taken)
        env.reset(seed=seed)
        assert env.step(json.dumps({str(v): c for v, c in coloring.items()}))[4]["verdict"] == "PASS"
        # One color for every vertex is improper wherever there is an edge.
        env.reset(seed=seed)
        _, reward, _, _, step = env.step(json.dumps({str(v): colors[0] for v in vertices}))
        assert step["verdict"] == "FAIL" and reward < 1.0 and not step["infra_error"]


def test_configs_past_the_valid_range_are_clamped():
    """reasoning-gym's own curricula ask for configs their validation refuses at
    the hard level (caesar rotation 50, knight_swap min_nodes 4, survo 25 empty
    cells on a 4x4 board): those fields are clamped."""
    for name, field, ok in (("caesar_cipher", "max_rotation", lambda v: v == 25),
                            ("knight_swap", "min_nodes", lambda v: v == 6),
                            ("survo", "max_empty", lambda v: v == 9)):
        domain = registry.domain(f"rlpt/rg-{name.replace('_', '-')}-hard-v0")
        assert ok(getattr(domain.dataset().config, field)), (name, field)
        env = gymnasium.make(domain.spec.id)
        _, info = env.reset(seed=0)
        assert env.step(info["demonstration"])[4]["verdict"] == "PASS", name


def test_questions_do_not_depend_on_the_hash_seed():
    """isomorphic_strings and ransom_note drew letters in set order, and
    polynomial_multiplication its terms in the order of a set of sympy monomials
    (both PYTHONHASHSEED); sorted, a seed gives the same question in every process."""
    code = ("import gymnasium, environments\n"
            "for d in ('rlpt/rg-isomorphic-strings-hard-v0', 'rlpt/rg-ransom-note-hard-v0',\n"
            "          'rlpt/rg-polynomial-multiplication-hard-v0'):\n"
            "    print(repr(gymnasium.make(d).reset(seed=5)[0]))\n")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": str(h), "PYTHONWARNINGS": "ignore"}).stdout
            for h in (1, 2, 3)}
    assert len(outs) == 1 and outs.pop().count("\n") == 3


def test_unseeded_rule_is_skipped():
    """list_functions' rule 14 draws numbers from the unseeded global `random`: its
    indices are redrawn, so every task is a function of the seed."""
    domain = registry.domain("rlpt/rg-list-functions-medium-v0")
    dataset = domain.dataset()
    rule14 = next(i for i in range(1000) if dataset.task_indices[i] == 14)
    assert len({dataset[rule14]["question"] for _ in range(6)}) > 1  # why it is skipped
    draws = []
    for _ in range(2):  # ~1 in 17 draws would be rule 14 without the skip, each one different
        rng = np.random.default_rng(0)
        draws.append([domain.sample(rng).prompt for _ in range(60)])
    assert draws[0] == draws[1]


def test_coin_flip_prefix_is_not_full_marks():
    """coin_flip's own scorer divides the matching prefix by the shorter string, so
    "0" scored 1.0 against 0.0703125; here a prefix scores its share of the reference."""
    env = gymnasium.make("rlpt/rg-coin-flip-medium-v0")
    for seed in range(6):
        _, info = env.reset(seed=seed)
        demo = info["demonstration"]
        if abs(float(demo)) <= 1e-4 or not demo.startswith("0."):
            continue
        _, reward, _, _, step = env.step("0")
        assert step["verdict"] == "FAIL" and 0.0 < reward < 0.5, (demo, reward)
        env.reset(seed=seed)
        assert env.step(demo)[4]["verdict"] == "PASS"


def test_a_broken_scorer_is_replaced():
    """game_of_life_halting's own scorer passes every non-empty answer (bool("False")
    is True); its question asks for 'True' or 'False', and that word is graded."""
    env = gymnasium.make("rlpt/rg-game-of-life-halting-medium-v0")
    for seed in range(4):
        _, info = env.reset(seed=seed)
        demo = info["demonstration"]
        assert demo in ("True", "False")
        assert env.step(demo.lower())[4]["verdict"] == "PASS"
        for wrong in ({"True": "False", "False": "True"}[demo], "@@@ ???"):
            env.reset(seed=seed)
            _, reward, _, _, step = env.step(wrong)
            assert (reward, step["verdict"]) == (0.0, "FAIL")


def test_dataset_sizes_the_generators_accept():
    """word_ladder refuses more than 20000 items; acre builds every item up front."""
    for domain_id in ("rlpt/rg-word-ladder-easy-v0", "rlpt/rg-acre-medium-v0"):
        env = gymnasium.make(domain_id)
        _, info = env.reset(seed=0)
        assert env.step(info["demonstration"])[4]["verdict"] == "PASS"
    assert registry.domain("rlpt/rg-word-ladder-easy-v0").dataset().size == rgf.size("word_ladder") == 20_000


def test_unusable_entries_are_redrawn():
    domain = registry.domain(SPECS[0].id)
    good = {"question": "What is 2+2 in caf\u00e9 arithmetic?", "answer": "4", "metadata": {}}
    limit = domain.spec.max_prompt_chars
    bad = [{"question": "q", "answer": "  "}, {"question": "x" * (limit + 1), "answer": "1"},
           {"question": "\u00e9" * (limit // 2 + 1), "answer": "1"},  # fits in characters, not in UTF-8 bytes
           {"question": "q", "answer": None},  # no reference, and no demonstration for this generator
           {"question": "q", "answer": "No solution"},  # a reference its own scorer fails
           ValueError("Failed to generate a capture problem")]  # generation gave up on this index

    class Fake:
        def __init__(self):
            self.items = bad + [good]

        def __getitem__(self, idx):
            item = self.items.pop(0)
            if isinstance(item, Exception):
                raise item
            return item

        def score_answer(self, answer, entry):
            return float(answer == entry["answer"] != "No solution")

    real = domain._cached
    try:
        domain._cached = Fake()
        task = domain.sample(np.random.default_rng(0))
        assert isinstance(task, Problem) and (task.prompt, task.demonstration) == (good["question"], "4")
    finally:
        domain._cached = real


def test_bounded_variant_is_a_subset_of_its_domain():
    base_id = "rlpt/rg-basic-arithmetic-medium-v0"
    spec = register_bounded(base_id, 40)
    assert spec.id == "rlpt/rg-basic-arithmetic-medium-p40-v0" and spec.max_prompt_chars == 40
    assert register_bounded(base_id, 40) == spec  # again: the same domain
    base, bounded = registry.domain(base_id), registry.domain(spec.id)
    # Same generator and seed: every bounded task is one of the base's tasks, split alike.
    env = gymnasium.make(spec.id)
    for seed in range(40):
        split = "eval" if seed % 4 == 0 else "train"
        obs, info = env.reset(seed=seed, options={"split": split})
        assert len(obs) <= 40 and splits.split_of(obs) == split
        assert env.step(info["demonstration"])[4]["verdict"] == "PASS"
    assert all(bounded.dataset()[i] == base.dataset()[i] for i in (0, 5, 2**30))
    assert isinstance(bounded, rgf.ReasoningGymDomain)  # reasoning-gym's own cut
    with pytest.raises(ValueError, match=r"only \d+ of \d+ drawn tasks have prompts of at most 10 characters"):
        register_bounded(base_id, 10)


def test_any_domain_can_be_bounded():
    """A built-in domain (no cut of its own) wrapped by BoundedDomain: a subset of
    its tasks with the same content, split and verdicts; a domain whose spec
    already fits is returned as it is."""
    from environments.bounded import BoundedDomain
    base_id = "rlpt/strings-reverse-hard-v0"
    lengths = sorted(len(registry.domain(base_id).sample(np.random.default_rng(s)).prompt)
                     for s in range(64))
    bound = lengths[len(lengths) // 2]  # about half fit
    spec = register_bounded(base_id, bound)
    assert spec.id == f"rlpt/strings-reverse-hard-p{bound}-v0"
    assert isinstance(registry.domain(spec.id), BoundedDomain)
    env, plain = gymnasium.make(spec.id), gymnasium.make(base_id)
    for seed in range(30):
        split = "eval" if seed % 3 == 0 else "train"
        obs, info = env.reset(seed=seed, options={"split": split})
        assert len(obs) <= bound and splits.split_of(obs) == split
        assert env.step(info["demonstration"])[4]["verdict"] == "PASS"
        assert env.reset(seed=seed, options={"split": split})[0] == obs  # deterministic
    # A task that fits in the base's first draw is the base's task for that seed.
    same = 0
    for seed in range(30):
        a = plain.reset(seed=seed, options={"split": "train"})[0]
        b = env.reset(seed=seed, options={"split": "train"})[0]
        same += a == b
        assert len(a) > bound or a == b
    assert same > 0
    small = registry.get("rlpt/math-add-easy-v0")
    assert register_bounded(small.id, small.max_prompt_chars) == small
    # A demonstration bound: every task's answer fits too; the tasks stay the base's.
    demos = sorted(len(registry.domain(base_id).sample(np.random.default_rng(s)).demonstration)
                   for s in range(64))
    cut = demos[len(demos) // 2]
    both = register_bounded(base_id, bound, max_demo_chars=cut)
    assert both.id == f"rlpt/strings-reverse-hard-p{bound}-d{cut}-v0"
    env = gymnasium.make(both.id)
    for seed in range(20):
        obs, info = env.reset(seed=seed, options={"split": "train"})
        assert len(obs) <= bound and len(info["demonstration"]) <= cut
    with pytest.raises(ValueError, match=r"and demonstrations of at most 1 \(prompt lengths"):
        register_bounded(base_id, bound, max_demo_chars=1)
    with pytest.raises(ValueError, match="max_prompt_chars must be a positive int"):
        register_bounded(base_id, 0)


def test_bounds_count_utf8_bytes():
    """A bound on prompt (and demonstration) length holds in UTF-8 bytes, which is
    what the byte tokenizer's context holds: prime_factorization's "\u00d7" is two."""
    base_id = "rlpt/rg-prime-factorization-easy-v0"
    lengths = sorted(len(registry.domain(base_id).sample(np.random.default_rng(s)).prompt.encode("utf-8"))
                     for s in range(32))
    bound = lengths[len(lengths) // 2]
    for spec in (register_bounded(base_id, bound), register_bounded(base_id, bound, max_demo_chars=64)):
        env = gymnasium.make(spec.id)
        for seed in range(12):
            obs, info = env.reset(seed=seed)
            assert len(obs.encode("utf-8")) <= bound and not obs.isascii()
            assert env.step(info["demonstration"])[4]["verdict"] == "PASS"
