"""Terminal-Bench-layout task folders (environments.terminal_tasks) through the real env."""

import os

import gymnasium
import pytest

import environments  # noqa: F401
from environments import registry, sandbox, terminal_tasks
from environments.terminal_tasks import TaskFolderError

BUILTIN = terminal_tasks.BUILTIN_IDS


def _write(root, files):
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    return str(root)


def _folder(tmp_path, name, test_sh='test -f "$APP_DIR/done.txt"\n', **extra):
    return _write(tmp_path / name, {"instruction.md": "Do the thing.\n", "tests/test.sh": test_sh, **extra})


def test_shipped_tasks_cover_every_difficulty():
    assert len(BUILTIN) >= 10
    specs = [registry.get(i) for i in BUILTIN]
    assert {s.difficulty for s in specs} == {"easy", "medium", "hard"}
    assert all(s.family == "tbench" and s.max_turns >= 1 and s.id.startswith("rlpt/tbench-") for s in specs)


@pytest.mark.parametrize("domain_id", BUILTIN)
def test_reference_solution_passes_and_no_op_fails(domain_id):
    assert terminal_tasks.validate_task(registry.domain(domain_id)) is None  # as a user's folder is checked
    env = gymnasium.make(domain_id)
    obs, info = env.reset(seed=0)
    assert "DONE" in obs and obs.isascii()
    solve = info["demonstration"].rsplit("\n", 1)[0]
    assert info["demonstration"].endswith("\nDONE") and info["demonstration_turns"] == [info["demonstration"]]
    obs, reward, terminated, truncated, step = env.step(solve)  # the solution as one command turn
    assert (reward, terminated, truncated, step["verdict"]) == (0.0, False, False, "TOOL"), obs
    obs, reward, terminated, truncated, step = env.step("DONE")
    assert (reward, terminated, step["verdict"]) == (1.0, True, "PASS"), step
    env.reset(seed=0)
    _, reward, terminated, _, step = env.step("DONE")
    assert (reward, terminated, step["verdict"]) == (0.0, True, "FAIL") and not step["infra_error"]


def test_workspace_persists_across_turns_and_resets_between_episodes():
    env = gymnasium.make("rlpt/tbench-hello-file-v0")
    env.reset(seed=0)
    obs, *_ = env.step("mkdir -p d/empty && printf 'hi\\n' > d/f && chmod 755 d/f && ln -s d/f link")
    assert "[exit 0]" in obs
    obs, *_ = env.step("cat d/f; test -x d/f && echo executable; readlink link; test -d d/empty && echo dir")
    assert "hi" in obs and "executable" in obs and "d/f" in obs and "dir" in obs
    env.reset(seed=0)
    obs, *_ = env.step("ls d")
    assert "[exit 2]" in obs and "No such file" in obs


def test_turn_budget_runs_tests_on_the_last_turn():
    spec = registry.get("rlpt/tbench-hello-file-v0")
    assert spec.max_turns == 4  # from its task.toml
    env = gymnasium.make(spec.id)
    env.reset(seed=0)
    for _ in range(spec.max_turns - 1):
        _, reward, terminated, truncated, step = env.step("true")
        assert (reward, terminated, truncated, step["verdict"]) == (0.0, False, False, "TOOL")
    # The budget's last turn runs, then the tests (as when a Terminal-Bench agent times out).
    _, reward, terminated, _, step = env.step("echo 'Hello, world!' > hello.txt")
    assert (reward, terminated, step["verdict"], step["turns"]) == (1.0, True, "PASS", 4)
    env.reset(seed=0)
    for _ in range(spec.max_turns - 1):
        env.step("true")
    _, reward, terminated, _, step = env.step("true")
    assert (reward, terminated, step["verdict"]) == (0.0, True, "FAIL")
    # A smaller budget from gymnasium.make truncates unscored.
    env = gymnasium.make(spec.id, max_turns=2)
    env.reset(seed=0)
    env.step("true")
    _, reward, terminated, truncated, _ = env.step("true")
    assert (reward, terminated, truncated) == (0.0, False, True)


def test_tests_are_hidden_during_the_episode_and_cannot_be_forged():
    env = gymnasium.make("rlpt/tbench-fix-python-stats-v0")
    env.reset(seed=0)
    obs, *_ = env.step("ls -aR; find / -path '*fix-python-stats*' 2>/dev/null; find / -name test.sh 2>/dev/null; echo end")
    assert "[exit 0]" in obs and "stats.py" in obs and "end" in obs
    assert "fix-python-stats" not in obs and "test.sh" not in obs and ".tbench" not in obs
    forge = ("mkdir -p .tbench/logs/verifier .tbench/tests && echo 1 > .tbench/logs/verifier/reward.txt"
             " && echo 'exit 0' > .tbench/tests/test.sh\nDONE")
    _, reward, _, _, step = env.step(forge)
    assert (reward, step["verdict"]) == (0.0, "FAIL")


def test_missing_tool_in_dockerfile_refuses_the_task(tmp_path):
    docker = "FROM ubuntu:24.04\nRUN apt-get update && apt-get install -y --no-install-recommends \\\n    sed rlpt-no-such-tool\n"
    path = _folder(tmp_path, "needs-tool", **{"environment/Dockerfile": docker})
    with pytest.raises(TaskFolderError, match="rlpt-no-such-tool") as err:
        terminal_tasks.register_task_folder(path)
    assert "sed" not in str(err.value).split("lacks:")[1]
    path = _folder(tmp_path, "needs-module", **{"environment/Dockerfile": "RUN pip install rlpt_no_such_module==1.0\n"})
    with pytest.raises(TaskFolderError, match="rlpt_no_such_module"):
        terminal_tasks.load_task_folder(path)


def test_malformed_folders_name_the_missing_path(tmp_path):
    path = _write(tmp_path / "no-instruction", {"tests/test.sh": "exit 0\n"})
    with pytest.raises(TaskFolderError, match="instruction.md") as err:
        terminal_tasks.load_task_folder(path)
    assert path in str(err.value)
    path = _write(tmp_path / "no-tests", {"instruction.md": "x\n"})
    with pytest.raises(TaskFolderError, match="tests/test.sh") as err:
        terminal_tasks.load_task_folder(path)
    assert path in str(err.value)
    path = _folder(tmp_path, "bad-difficulty", **{"task.toml": "[metadata]\ndifficulty = 'extreme'\n"})
    with pytest.raises(TaskFolderError, match="difficulty"):
        terminal_tasks.load_task_folder(path)


def test_user_folder_with_reward_file_workspace_and_unknown_keys(tmp_path):
    toml = ('version = "1.0"\n[metadata]\ndifficulty = "hard"\nauthor_name = "x"\ntags = ["t"]\n'
            '[verifier]\ntimeout_sec = 900.0\n[agent]\ntimeout_sec = 900.0\nmax_turns = 3\n[environment]\ncpus = 1\n')
    test_sh = 'n=$(cat "$APP_DIR/count.txt")\nif [ "$n" = 2 ]; then echo 1; else echo 0.5; fi > "$LOGS_DIR/verifier/reward.txt"\n'
    path = _folder(tmp_path, "user-partial", test_sh, **{"task.toml": toml, "environment/app/count.txt": "1\n"})
    domain_id = terminal_tasks.register_task_folder(path, split="eval")
    assert domain_id == "rlpt/tbench-user-partial-v0"
    spec = registry.get(domain_id)
    assert (spec.difficulty, spec.max_turns) == ("hard", 3) and "t" in spec.tags
    with pytest.raises(ValueError, match="already registered"):
        terminal_tasks.register_task_folder(path, split="eval")
    with pytest.raises(ValueError, match="split"):
        gymnasium.make(domain_id).reset(seed=0, options={"split": "train"})
    env = gymnasium.make(domain_id)
    env.reset(seed=0, options={"split": "eval"})
    _, reward, _, _, step = env.step("DONE")
    assert (reward, step["verdict"]) == (0.5, "FAIL")
    env.reset(seed=0, options={"split": "eval"})
    _, reward, _, _, step = env.step("echo 2 > count.txt\nDONE")
    assert (reward, step["verdict"]) == (1.0, "PASS")


def test_register_tasks_skips_or_raises(tmp_path):
    _folder(tmp_path / "root", "good-one")
    _write(tmp_path / "root" / "broken-one", {"instruction.md": "x\n"})
    with pytest.raises(TaskFolderError, match="broken-one"):
        terminal_tasks.register_tasks(str(tmp_path / "root"))
    assert terminal_tasks.register_tasks(str(tmp_path / "root"), skip_unavailable=True) == ["rlpt/tbench-good-one-v0"]
    with pytest.raises(TaskFolderError, match="no such task root"):
        terminal_tasks.register_tasks(str(tmp_path / "missing"))


def test_uncarriable_workspace_ends_the_episode_with_a_verdict():
    env = gymnasium.make("rlpt/tbench-hello-file-v0")
    env.reset(seed=0)
    _, reward, terminated, _, step = env.step("head -c 100000 /dev/zero | tr '\\0' a > big.txt")
    assert (reward, terminated, step["verdict"]) == (0.0, True, "FAIL") and "too large" in step["feedback"]
    env.reset(seed=0)
    _, _, terminated, _, step = env.step("printf '\\377\\376' > bin.dat")
    assert terminated and step["verdict"] == "FAIL" and "UTF-8" in step["feedback"]


def test_output_is_bounded_and_timeouts_are_reported(tmp_path):
    env = gymnasium.make("rlpt/tbench-hello-file-v0")
    env.reset(seed=0)
    obs, *_ = env.step("seq 1 100000")
    assert len(obs) <= 300 and "[exit 0]" in obs and "start shown" in obs
    path = _folder(tmp_path, "user-slow", **{"task.toml": "[agent]\ncommand_timeout_sec = 0.5\n"})
    env = gymnasium.make(terminal_tasks.register_task_folder(path))
    env.reset(seed=0)
    obs, reward, terminated, _, step = env.step("sleep 5")
    assert (reward, terminated, step["verdict"]) == (0.0, False, "ERROR") and "timed out" in obs


def test_sandbox_failure_is_an_infra_error(monkeypatch):
    env = gymnasium.make("rlpt/tbench-hello-file-v0")
    env.reset(seed=0)
    monkeypatch.setattr(sandbox, "run", lambda job: sandbox.JobResult(sandbox.Status.SANDBOX_ERROR, detail="boom"))
    _, reward, terminated, truncated, step = env.step("echo hi")
    assert (reward, step["verdict"], step["infra_error"]) == (0.0, "SANDBOX_ERROR", True)
    assert terminated or truncated


def test_failed_done_with_attempts_left_keeps_the_workspace():
    env = gymnasium.make("rlpt/tbench-sort-unique-v0", max_attempts=2)
    _, info = env.reset(seed=0)
    env.step("sort -u names.txt > unique.txt")
    obs, reward, terminated, truncated, step = env.step("DONE")
    assert (reward, terminated, truncated, step["verdict"]) == (0.0, False, False, "FAIL") and "counts.txt" in obs
    _, reward, terminated, _, step = env.step("sort names.txt | uniq -c | sed -E 's/^ *([0-9]+) (.*)/\\2 \\1/' > counts.txt\nDONE")
    assert (reward, terminated, step["verdict"], step["attempt"]) == (1.0, True, "PASS", 2)


def test_packages_are_checked_by_the_commands_they_provide(tmp_path):
    docker = "FROM debian:bookworm\nRUN apt-get install -y binutils ninja-build rlpt-no-such-tool\n"
    missing = terminal_tasks._missing_requirements(docker)
    # The package names are not commands: binutils provides ld, ninja-build ninja.
    assert not any(m.startswith(("binutils ", "ninja-build ")) for m in missing), missing
    assert "rlpt-no-such-tool (apt package rlpt-no-such-tool)" in missing
    assert all(m.split()[0] in ("ld", "as", "objdump", "ninja", "rlpt-no-such-tool") for m in missing), missing


def test_a_long_instruction_is_a_long_prompt_not_a_refusal(tmp_path):
    text = "Rename every file ending in .txt to .md. " * 250  # 10,250 characters
    path = _write(tmp_path / "long-task", {"instruction.md": text, "tests/test.sh": "test -f \"$APP_DIR/a.md\"\n"})
    spec = registry.get(terminal_tasks.register_task_folder(path))
    assert spec.max_prompt_chars > len(text)
    env = gymnasium.make(spec.id)
    obs, _ = env.reset(seed=0)
    assert text.strip() in obs and len(obs) <= spec.max_prompt_chars


@pytest.mark.parametrize("name, test_sh, why", [
    ("no-runner", "rlpt-missing-runner -q tests/\n", "test.sh needs 'rlpt-missing-runner'"),
    ("abs-path", "cd /rlpt-no-such-app-dir\nls\nexit 3\n", "absolute path '/rlpt-no-such-app-dir'"),
])
def test_a_test_harness_that_cannot_run_is_infrastructure_not_fail(tmp_path, name, test_sh, why):
    path = _folder(tmp_path, name, test_sh=test_sh)
    with pytest.raises(TaskFolderError, match=f"fails validation: a do-nothing answer is VERIFIER_ERROR.*{why}"):
        terminal_tasks.register_task_folder(path)  # validated: refused with the reason
    env = gymnasium.make(terminal_tasks.register_task_folder(path, validate=False))
    env.reset(seed=0)
    _, reward, terminated, _, step = env.step("touch out.txt\nDONE")
    assert (reward, step["verdict"]) == (0.0, "VERIFIER_ERROR"), step
    assert why in step["feedback"]


def test_the_model_s_own_failures_stay_fail(tmp_path):
    # The tests judge: the file is missing; a command missing in the model's own script is its own.
    test_sh = 'bash "$APP_DIR/run.sh"\ntest -f "$APP_DIR/out.txt"\n'
    path = _folder(tmp_path, "judged", test_sh=test_sh)
    env = gymnasium.make(terminal_tasks.register_task_folder(path))
    env.reset(seed=0)
    _, reward, _, _, step = env.step("printf 'rlpt-nowhere-cmd\\n' > run.sh\nDONE")
    assert (reward, step["verdict"]) == (0.0, "FAIL"), step


@pytest.mark.parametrize("output, expected", [
    ("/w/.tbench/tests/test.sh: line 4: uv: command not found\n", "test.sh needs 'uv'"),
    ("/tests/test.sh: line 2: cd: /app: No such file or directory\n", "absolute path '/app'"),
    ("curl: (6) Could not resolve host: astral.sh\n", "the network (Could not resolve host)"),
    ("ERROR: No matching distribution found for pytest==8.4.1\n", "No matching distribution found for pytest==8.4.1"),
    ("/usr/bin/python3: No module named pytest\n", "runner 'pytest'"),
    ("ERROR: file or directory not found: /tests/test_outputs.py\n", "'/tests/test_outputs.py'"),
    ("/w/run.sh: line 1: rlpt-nowhere-cmd: command not found\nFAILED test_out.py::test_x\n", None),
    ("E   AssertionError: assert 3 == 4\n1 failed in 0.02s\n", None),
])
def test_harness_failures_are_told_from_verdicts(output, expected):
    why = terminal_tasks.harness_failure(output)
    assert (why is None) if expected is None else (expected in why), why


@pytest.mark.parametrize("name, extra, why", [
    ("ref-fails", {"solution/solve.sh": "echo nothing\n"}, "its reference solution is FAIL, not PASS"),
    ("passes-anything", {"tests/test.sh": "exit 0\n"}, "its tests pass a do-nothing answer"),
])
def test_a_task_whose_tests_cannot_be_trusted_is_refused_at_registration(tmp_path, name, extra, why):
    path = _folder(tmp_path, name, **extra)
    with pytest.raises(TaskFolderError, match=f"task {name} fails validation: {why}"):
        terminal_tasks.register_task_folder(path)
    assert not registry.is_registered(f"rlpt/tbench-{name}-v0")
    # A good one: the reference passes, a do-nothing answer fails by the tests' verdict.
    good = _folder(tmp_path, f"{name}-fixed", **{"solution/solve.sh": "touch done.txt\n"})
    assert terminal_tasks.validate_task(registry.domain(terminal_tasks.register_task_folder(good))) is None


def test_task_toml_timeouts_bound_the_episode_and_the_tests(tmp_path):
    toml = "[agent]\ntimeout_sec = 1.0\n[verifier]\ntimeout_sec = 900.0\n"
    path = _folder(tmp_path, "timed", **{"task.toml": toml})
    folder = terminal_tasks.load_task_folder(path)
    # The tests get what the task asks for; a command at most the agent's time.
    assert (folder.agent_timeout_s, folder.command_timeout_s, folder.verifier_timeout_s) == (1.0, 1.0, 900.0)
    env = gymnasium.make(terminal_tasks.register_task_folder(path))
    env.reset(seed=0)
    obs, reward, terminated, _, step = env.step("sleep 0.2; echo first")
    assert step["verdict"] == "TOOL" and "first" in obs
    # The agent's time runs out inside this command: the tests run at once, as in Terminal-Bench.
    obs, reward, terminated, _, step = env.step("sleep 5")
    assert (reward, terminated, step["verdict"]) == (0.0, True, "FAIL"), step
    assert "the tests failed" in step["feedback"]
    slow = _folder(tmp_path, "slow-tests", test_sh="sleep 5\n", **{"task.toml": "[verifier]\ntimeout_sec = 0.5\n"})
    env = gymnasium.make(terminal_tasks.register_task_folder(slow, validate=False))
    env.reset(seed=0)
    _, reward, terminated, _, step = env.step("DONE")
    assert (reward, terminated, step["verdict"]) == (0.0, True, "TIMEOUT"), step
