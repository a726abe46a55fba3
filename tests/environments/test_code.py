"""Code domains: grading model-written expressions in the sandbox."""

import concurrent.futures
import time

import gymnasium
import pytest

import environments  # noqa: F401
from environments import registry

# The program-induction domains ("short"); whole-program ones (HumanEval) are in test_programs.py.
CODE_DOMAINS = [s.id for s in registry.list_domains(family="code", tag="short")]


def _step(domain_id, answer, seed=0):
    env = gymnasium.make(domain_id)
    env.reset(seed=seed)
    _, reward, terminated, _, info = env.step(answer)
    assert terminated
    return reward, info


@pytest.mark.parametrize("domain_id", CODE_DOMAINS)
def test_demonstration_passes(domain_id):
    env = gymnasium.make(domain_id)
    for seed in range(3):
        prompt, info = env.reset(seed=seed)
        assert prompt.endswith("def f(x): return ")
        _, reward, _, _, step_info = env.step(info["demonstration"])
        assert (reward, step_info["verdict"]) == (1.0, "PASS"), (prompt, info)


def test_equivalent_expression_passes_and_wrong_one_names_the_failing_input():
    env = gymnasium.make("rlpt/code-linear-easy-v0").unwrapped
    env.reset(seed=1)
    demo = env.task.demonstration
    env.reset(seed=1)
    assert env.step(f"(({demo}))+0")[1] == 1.0
    env.reset(seed=1)
    _, reward, _, _, info = env.step(f"{demo}+(x==17)")
    assert (reward, info["verdict"]) == (0.0, "FAIL")
    assert "f(17)" in info["feedback"] and "expected" in info["feedback"] and "got" in info["feedback"]


@pytest.mark.parametrize(
    "answer, verdict, needle",
    [
        ("max(iter(int, 1))", "TIMEOUT", "time limit"),
        ("1/0", "ERROR", "ZeroDivisionError"),
        ("__import__('sys').exit(0)", "ERROR", "SystemExit"),
        ("__import__('os')._exit(0)", "ERROR", "without returning results"),
        ("print('PASS')", "FAIL", "got None"),
        ("print('PASS') or 'PASS'", "FAIL", "got 'PASS'"),
        ("True", "FAIL", "got True"),
        ("x ==", "MALFORMED", "expected"),
        ("x\nimport os", "MALFORMED", "expected"),
        ("' '*(10**10)", "OOM", "memory"),
    ],
)
def test_adversarial_answers_earn_nothing(answer, verdict, needle):
    reward, info = _step("rlpt/code-linear-easy-v0", answer)
    assert (reward, info["verdict"]) == (0.0, verdict), info
    assert needle in info["feedback"]
    assert not info["infra_error"]


def test_rigged_equality_is_not_trusted():
    # An object equal to everything is serialised as an opaque repr, not compared.
    answer = "type('E',(int,),{'__eq__':lambda s,o:True})(0)"
    reward, info = _step("rlpt/code-linear-easy-v0", answer)
    assert (reward, info["verdict"]) == (0.0, "FAIL")


def test_concurrent_grading_from_threads_is_fast_and_correct():
    envs = [gymnasium.make("rlpt/code-quadratic-medium-v0") for _ in range(64)]
    demos = [env.reset(seed=i)[1]["demonstration"] for i, env in enumerate(envs)]
    answers = [d if i % 2 == 0 else d + "+1" for i, d in enumerate(demos)]
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda ea: ea[0].step(ea[1]), zip(envs, answers)))
    elapsed = time.perf_counter() - start
    rewards = [r[1] for r in results]
    assert rewards == [1.0 if i % 2 == 0 else 0.0 for i in range(64)]
    assert elapsed < 5.0, elapsed  # ~64 jobs at a few ms each on 2 cores
