"""What a candidate's process does to the harness around it is its own verdict:
a forged phase, an extra result or a frame of its own is ERROR (scored, never
masked as an infrastructure failure), on the CAD part and assembly domains and
on the code graders. The harness runs in the candidate's process, so each
attack here reaches it the way an answer could: through `__main__` (the
worker script), the frames of the stack that called it, and the result pipe."""

import numpy as np
import pytest

import environments  # noqa: F401
from environments import registry
from environments.cad import runner
from environments.programs import assert_tests, grade_program
from environments.verdicts import Verdict

# Each attack is a statement a candidate runs; ATTACKS[name] is its source.
_FRAMES = (
    "import sys as _s\n"
    "def _frame(name):\n"
    "    f = _s._getframe()\n"
    "    while f is not None and f.f_code.co_name != name:\n"
    "        f = f.f_back\n"
    "    return f\n"
)
ATTACKS = {
    # The worker's frame encoder, patched: the result says the load failed.
    "patched_encoder": _FRAMES + (
        "import __main__ as _m\n"
        "_real = _m.encode_frame\n"
        "_m.encode_frame = lambda p: _real({'nonce': p.get('nonce'), 'phase': 'load', 'error': 'harness broke', 'error_type': 'ImportError'})\n"
    ),
    # One more call appended to the job the harness is iterating: two results.
    "extra_call": _FRAMES + (
        "_job = _frame('_run_python').f_locals['job']\n"
        "if not _job.get('extra'):\n"
        "    _job['extra'] = _job['calls'].append(list(_job['calls'][0])) or True\n"
    ),
    # A frame of its own, with the nonce read from the child's frame, then exit.
    "own_frame": _FRAMES + (
        "import os as _o, __main__ as _m\n"
        "_nonce = _frame('_child').f_locals['nonce']\n"
        "_o.write(3, _m.encode_frame({'nonce': _nonce, 'phase': 'load', 'error': 'x', 'error_type': 'OSError'}))\n"
        "_o._exit(0)\n"
    ),
}

cad_only = pytest.mark.skipif(not runner.available()[0], reason=f"needs the cad extra: {runner.available()[1]}")


def _is_the_candidates(grade) -> None:
    assert not grade.infra_error, grade
    assert grade.verdict is Verdict.ERROR and grade.reward == 0.0, grade


@cad_only
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_a_cad_part_that_breaks_the_harness_is_scored_error(attack):
    from environments.families import cad

    reference = "from build123d import *\nresult = Box(20, 10, 5)\n"
    script = ATTACKS[attack] + "from build123d import *\nresult = Box(20, 10, 5)\n"
    grade = cad.grade_script(script, reference)
    _is_the_candidates(grade)
    assert "harness" in grade.feedback or "without returning results" in grade.feedback


@cad_only
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_a_cad_assembly_that_breaks_the_harness_is_scored_error(attack):
    from environments.families import cad_assembly

    reference = "from build123d import *\nresult = [Pos(0, 0, 5) * Box(20, 20, 10), Pos(0, 0, 15) * Box(10, 10, 10)]\n"
    grade = cad_assembly.grade_assembly(ATTACKS[attack] + reference, cad_assembly.AssemblyTask("two blocks", reference))
    _is_the_candidates(grade)


@cad_only
def test_through_the_env_a_forged_harness_failure_is_scored_not_masked():
    import gymnasium

    env = gymnasium.make("rlpt/cad-block-easy-v0")
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step(ATTACKS["own_frame"] + env.unwrapped.task.hidden)
    assert terminated and reward == 0.0 and info["verdict"] == "ERROR" and not info.get("infra_error"), info


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_code_graders_score_a_broken_harness_as_error(attack):
    domain = registry.domain("rlpt/code-linear-easy-v0")
    task = domain.sample(np.random.default_rng(0))
    # The answer is an expression: the attack runs from inside it.
    answer = f"(exec({ATTACKS[attack]!r}, {{}}), {task.demonstration})[1]"
    _is_the_candidates(domain.grade(task, answer))
    program = ATTACKS[attack].replace("\n", "\n    ")
    tests = assert_tests(["assert f(2) == 4", "assert f(3) == 9"])
    _is_the_candidates(grade_program(f"def f(x):\n    {program}\n    return x * x\n", tests))


@pytest.mark.parametrize("victim", ["zygote", "worker", "stop_worker"])
def test_a_job_that_can_signal_its_worker_cannot_make_its_failure_an_infrastructure_error(victim):
    """Where jobs run as their worker's uid (an unprivileged host; here root
    without the uid drop), killing or stopping the worker or its zygote is
    the job's failure (NO_RESULT, graded ERROR), never SANDBOX_ERROR."""
    from environments import sandbox
    from environments.job_failures import process_failure

    config = {"uid": None, "gid": None, "tmp_dir": None, "reap": "none", "ipc": "new", "scratch": "none"}
    pool = sandbox.SandboxPool(size=1, launcher=sandbox.PlainLauncher(), worker_config=config, memory_cgroups=False)
    kill = {
        "zygote": "os.kill(os.getppid(), signal.SIGKILL)",
        "worker": "os.kill(int(open(f'/proc/{os.getppid()}/stat').read().rsplit(')', 1)[1].split()[1]), signal.SIGKILL)",
        "stop_worker": "os.kill(int(open(f'/proc/{os.getppid()}/stat').read().rsplit(')', 1)[1].split()[1]), signal.SIGSTOP)",
    }[victim]
    try:
        assert pool.jobs_share_worker_uid
        job = sandbox.PythonJob(source=f"import os, signal, time\n{kill}\ntime.sleep(30)\n", timeout_s=1.0, wall_s=2.0)
        result = pool.run(job)
        assert result.status is sandbox.Status.NO_RESULT, result
        grade = process_failure(result, 1.0)
        assert grade.verdict is Verdict.ERROR and not grade.infra_error, grade
        # The pool replaces the worker: the next job runs normally.
        after = pool.run(sandbox.PythonJob(source="def f():\n    return 1\n", entry="f", calls=((),)))
        assert after.status is sandbox.Status.OK, after
    finally:
        pool.close()
