"""Terminal task folders (environments.terminal_tasks) in their own containers, through the real env.

Every folder here is of our own making: absolute /app, /tests and /logs paths, a
Dockerfile that COPYs and installs with apt and pip, test scripts that install
pytest and uv at verification (offline by then), task.toml's timeouts and limits,
harnesses that break (infrastructure, never FAIL) and references that fail.
"""

import os
import subprocess
import time

import gymnasium
import pytest

import environments  # noqa: F401
from environments import registry, terminal_tasks
from environments.containers import bases, engine, images
from environments.terminal_tasks import TaskFolderError

BUILTIN = terminal_tasks.BUILTIN_IDS
pytestmark = pytest.mark.usefixtures("tbench_images")


def _write(root, files):
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb" if isinstance(text, bytes) else "w") as f:
            f.write(text)
    return str(root)


def _folder(tmp_path, name, test_sh='test -f "$APP_DIR/done.txt"\n', **extra):
    return _write(tmp_path / name, {"instruction.md": "Do the thing.\n", "tests/test.sh": test_sh, **extra})


def _running(name_part):
    out = subprocess.run(["podman", "ps", "--format", "{{.Names}}"], capture_output=True, text=True).stdout
    return [n for n in out.split() if name_part in n]


# ------------------------------------------------------------------ shipped tasks


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


def test_files_and_processes_persist_across_turns_and_each_episode_has_its_own_container():
    env = gymnasium.make("rlpt/tbench-hello-file-v0")
    env.reset(seed=0)
    obs, *_ = env.step("pwd; mkdir -p d/empty && printf 'hi\\n' > d/f && chmod 755 d/f && ln -s d/f link\n"
                       "nohup sleep 300 >/dev/null 2>&1 &")
    assert "[exit 0] /app" in obs
    obs, *_ = env.step("cat d/f; test -x d/f && echo executable; readlink link; test -d d/empty && echo dir; "
                       "pgrep -x sleep >/dev/null && echo still-running")
    assert all(w in obs for w in ("hi", "executable", "d/f", "dir", "still-running")), obs
    container = env.unwrapped.task.hidden.container
    assert container and _running("hello-file")
    env.reset(seed=0)
    obs, *_ = env.step("ls d")
    assert "[exit 2]" in obs and "No such file" in obs
    assert env.unwrapped.task.hidden.container != container


def test_turn_budget_runs_tests_on_the_last_turn_and_removes_the_container():
    spec = registry.get("rlpt/tbench-hello-file-v0")
    assert spec.max_turns == 4  # from its task.toml
    env = gymnasium.make(spec.id)
    env.reset(seed=0)
    for _ in range(spec.max_turns - 1):
        _, reward, terminated, truncated, step = env.step("true")
        assert (reward, terminated, truncated, step["verdict"]) == (0.0, False, False, "TOOL")
    episode = env.unwrapped.task.hidden
    name = subprocess.run(["podman", "inspect", "--format", "{{.Name}}", episode.container], capture_output=True, text=True).stdout.strip()
    # The budget's last turn runs, then the tests (as when a Terminal-Bench agent times out).
    _, reward, terminated, _, step = env.step("echo 'Hello, world!' > hello.txt")
    assert (reward, terminated, step["verdict"], step["turns"]) == (1.0, True, "PASS", 4)
    assert episode.container is None
    deadline = time.monotonic() + 30
    while _running(name) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _running(name)
    # A smaller budget from gymnasium.make truncates unscored.
    env = gymnasium.make(spec.id, max_turns=2)
    env.reset(seed=0)
    env.step("true")
    _, reward, terminated, truncated, _ = env.step("true")
    assert (reward, terminated, truncated) == (0.0, False, True)


def test_tests_are_hidden_during_the_episode_and_cannot_be_forged():
    env = gymnasium.make("rlpt/tbench-fix-python-stats-v0")
    env.reset(seed=0)
    obs, *_ = env.step("ls -a; ls /tests /logs/verifier 2>&1; find / -name test_stats.py 2>/dev/null; echo end")
    assert "stats.py" in obs and "end" in obs and "test_stats.py" not in obs.split("end")[0].replace("ls", ""), obs
    forge = ("mkdir -p /logs/verifier /tests && echo 1 > /logs/verifier/reward.txt"
             " && echo 'exit 0' > /tests/test.sh\nDONE")
    _, reward, _, _, step = env.step(forge)
    assert (reward, step["verdict"]) == (0.0, "FAIL")


def test_output_is_bounded_and_commands_time_out():
    env = gymnasium.make("rlpt/tbench-hello-file-v0")
    env.reset(seed=0)
    obs, *_ = env.step("seq 1 100000")
    assert len(obs) <= 300 and "[exit 0]" in obs and "start and end shown" in obs and obs.rstrip().endswith("100000")


def test_a_failed_done_with_attempts_left_starts_the_next_attempt_afresh():
    env = gymnasium.make("rlpt/tbench-sort-unique-v0", max_attempts=2)
    _, info = env.reset(seed=0)
    env.step("sort -u names.txt > unique.txt")
    obs, reward, terminated, truncated, step = env.step("DONE")
    assert (reward, terminated, truncated, step["verdict"]) == (0.0, False, False, "FAIL") and "counts.txt" in obs
    obs, *_ = env.step("ls unique.txt /tests 2>&1")  # a new container: no earlier work, no tests
    assert "No such file" in obs and "test.sh" not in obs
    _, reward, terminated, _, step = env.step(info["demonstration"])
    assert (reward, terminated, step["verdict"], step["attempt"]) == (1.0, True, "PASS", 2)


# ------------------------------------------------------------ folders of our own


def test_absolute_paths_a_dockerfile_copy_and_run_apt_and_pip_binary_test_files(tmp_path):
    docker = ("FROM python:3.13-slim\nWORKDIR /app\n"
              "RUN apt-get update && apt-get install -y --no-install-recommends jq && rm -rf /var/lib/apt/lists/*\n"
              "RUN pip install --no-cache-dir six==1.17.0\n"
              "COPY data/prices.json /app/prices.json\n")
    test_sh = ("cd /app\n"
               "cmp -s /tests/blob.bin <(printf '\\000\\377\\001\\376') || { echo 'binary test file changed'; exit 1; }\n"
               "python3 -c 'import six' || exit 1\n"
               "want=$(jq '[.[] | .price] | add' /app/prices.json)\n"
               "if [ \"$(cat /app/total.txt 2>/dev/null)\" = \"$want\" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n")
    path = _folder(tmp_path, "prices-total", test_sh, **{
        "environment/Dockerfile": docker,
        "environment/data/prices.json": '[{"price": 3}, {"price": 4}]\n',
        "tests/blob.bin": b"\x00\xff\x01\xfe",
        "solution/solve.sh": "jq '[.[] | .price] | add' /app/prices.json > /app/total.txt\n",
        "task.toml": "[environment]\ncpus = 1\nmemory_mb = 512\n",
    })
    domain_id = terminal_tasks.register_task_folder(path)  # built and validated
    env = gymnasium.make(domain_id)
    env.reset(seed=0)
    obs, *_ = env.step("pwd; ls; jq --version; python3 -c 'import six; print(six.__version__)'; "
                       "curl -s -m 3 https://pypi.org >/dev/null || echo no-network")
    assert all(w in obs for w in ("/app", "prices.json", "jq-", "1.17.0", "no-network")), obs
    memory = subprocess.run(["podman", "inspect", "--format", "{{.HostConfig.Memory}}", env.unwrapped.task.hidden.container],
                            capture_output=True, text=True).stdout.strip()
    assert memory == str(512 << 20)  # [environment] memory_mb
    _, reward, _, _, step = env.step("echo 7 > total.txt\nDONE")
    assert (reward, step["verdict"]) == (1.0, "PASS"), step


TB2_STYLE = """#!/bin/bash
apt-get update
apt-get install -y curl
curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh
source $HOME/.local/bin/env
uvx -p 3.13 -w pytest==8.4.1 pytest /tests/test_outputs.py -rA
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""
PIP_STYLE = """#!/bin/bash
pip install pytest==8.3.5
cd /app && python -m pytest -q $TEST_DIR/test_outputs.py
"""
TEST_OUTPUTS = "import pathlib\n\ndef test_answer():\n    assert pathlib.Path('/app/answer.txt').read_text().strip() == '42'\n"


@pytest.mark.parametrize("name, test_sh", [("uvx-pytest", TB2_STYLE), ("pip-pytest", PIP_STYLE)])
def test_test_scripts_that_install_pytest_and_uv_run_offline(tmp_path, name, test_sh):
    path = _folder(tmp_path, name, test_sh, **{
        "environment/Dockerfile": "FROM python:3.13-slim\nWORKDIR /app\n",
        "tests/test_outputs.py": TEST_OUTPUTS,
        "solution/solve.sh": "echo 42 > /app/answer.txt\n",
    })
    domain = terminal_tasks.TerminalTaskDomain(terminal_tasks.load_task_folder(path))
    assert terminal_tasks.build_task(domain.folder).error is None
    assert terminal_tasks.validate_task(domain) is None  # reference PASS, do-nothing FAIL by pytest's verdict
    task = domain.sample(None)
    grade = domain.grade(task, "echo 41 > answer.txt\nDONE")
    assert grade.verdict.value == "FAIL" and terminal_tasks.tests_judged(task.hidden.test_output), task.hidden.test_output[-500:]
    assert "1 failed" in task.hidden.test_output


def test_task_toml_timeouts_bound_the_episode_and_the_tests(tmp_path):
    toml = "[agent]\ntimeout_sec = 3.0\n[verifier]\ntimeout_sec = 900.0\n"
    path = _folder(tmp_path, "timed", **{"task.toml": toml})
    folder = terminal_tasks.load_task_folder(path)
    # The tests get what the task asks for; a command at most what is left of the agent's time.
    step, = folder.steps
    assert (step.agent_timeout_s, step.command_timeout_s, step.verifier_timeout_s) == (3.0, 3.0, 900.0)
    env = gymnasium.make(terminal_tasks.register_task_folder(path))
    env.reset(seed=0)
    obs, reward, terminated, _, step = env.step("sleep 0.2; echo first")
    assert step["verdict"] == "TOOL" and "first" in obs
    # The agent's time runs out inside this command: the tests run at once, as in Terminal-Bench.
    obs, reward, terminated, _, step = env.step("sleep 20")
    assert (reward, terminated, step["verdict"]) == (0.0, True, "FAIL"), step
    slow = _folder(tmp_path, "slow-tests", test_sh="sleep 30\n", **{"task.toml": "[verifier]\ntimeout_sec = 2\n"})
    env = gymnasium.make(terminal_tasks.register_task_folder(slow, validate=False))
    env.reset(seed=0)
    start = time.monotonic()
    _, reward, terminated, _, step = env.step("DONE")
    assert (reward, terminated, step["verdict"]) == (0.0, True, "TIMEOUT"), step
    assert time.monotonic() - start < 20
    quick = _folder(tmp_path, "quick-commands", **{"task.toml": "[agent]\ncommand_timeout_sec = 1\n"})
    env = gymnasium.make(terminal_tasks.register_task_folder(quick, validate=False))
    env.reset(seed=0)
    obs, reward, terminated, _, step = env.step("sleep 10")
    assert (reward, terminated, step["verdict"]) == (0.0, False, "ERROR") and "timed out" in obs


MULTI_STEP_TOML = """
multi_step_reward_strategy = "{strategy}"
[agent]
timeout_sec = 30.0
[[steps]]
name = "make"
min_reward = 1.0
[[steps]]
name = "greet"
[steps.agent]
max_turns = 2
[steps.verifier.env]
WHO = "Harbor"
[steps.healthcheck]
command = "test -x /app/greet.sh"
interval_sec = 1
retries = 2
[[steps]]
name = "notes"
contributes_to_mean = {counts}
"""


def _multi_step(tmp_path, name, strategy="mean", counts="true"):
    return _write(tmp_path / name, {
        "task.toml": MULTI_STEP_TOML.format(strategy=strategy, counts=counts),
        "tests/lib.sh": 'score() { echo "$1" > /logs/verifier/reward.txt; exit 0; }\n',  # shared by every step
        "steps/make/instruction.md": "Write an executable /app/greet.sh.\n",
        "steps/make/tests/test.sh": "source /tests/lib.sh\ntest -x /app/greet.sh && score 1\nscore 0\n",
        "steps/make/solution/solve.sh": "printf '#!/bin/sh\\necho hi\\n' > /app/greet.sh && chmod +x /app/greet.sh\n",
        "steps/greet/instruction.md": "Make greet.sh print 'Hello, <name in who.txt>!'.\n",
        "steps/greet/workdir/who.txt": "  Harbor \n",
        "steps/greet/workdir/setup.sh": "tr -d '[:space:]' < who.txt > t && mv t who.txt && rm -- \"$0\"\n",
        "steps/greet/tests/test.sh": ('source /tests/lib.sh\ntest ! -e /app/setup.sh || score 0\n'
                                      '[ "$(/app/greet.sh)" = "Hello, $WHO!" ] && score 1\nscore 0\n'),
        "steps/greet/solution/solve.sh": "printf '#!/bin/sh\\necho \"Hello, $(cat /app/who.txt)!\"\\n' > /app/greet.sh\n",
        "steps/notes/instruction.md": "Write /app/NOTES.md.\n",
        "steps/notes/tests/test.sh": "source /tests/lib.sh\ntest -s /app/NOTES.md && score 1\nscore 0\n",
        "steps/notes/solution/solve.sh": "echo notes > /app/NOTES.md\n",
    })


def test_multi_step_tasks_run_their_steps_in_one_container(tmp_path):
    spec_id = terminal_tasks.register_task_folder(_multi_step(tmp_path, "steps-mean"))  # validated: oracle and no-op
    folder = registry.domain(spec_id).folder
    assert [s.name for s in folder.steps] == ["make", "greet", "notes"] and folder.max_turns == 8 + 2 + 8
    assert folder.steps[1].verifier_env == (("WHO", "Harbor"),) and folder.steps[0].agent_timeout_s == 30.0
    env = gymnasium.make(spec_id)
    obs, info = env.reset(seed=0)
    assert "Step 1 of 3:\nWrite an executable /app/greet.sh." in obs and "Step 2" not in obs
    turns = info["demonstration_turns"]
    assert len(turns) == 3 and all(t.endswith("\nDONE") for t in turns)
    # Step 1 done: the next instruction comes, after greet's workdir/ was copied in and its setup.sh ran.
    obs, reward, terminated, _, step = env.step(turns[0])
    assert (reward, terminated, step["verdict"]) == (0.0, False, "TOOL")
    assert "step 1 of 3 is over" in obs and obs.endswith("Step 2 of 3:\nMake greet.sh print 'Hello, <name in who.txt>!'.\n\n$ ")
    obs, *_ = env.step("cat who.txt; ls")
    assert "Harbor" in obs and "setup.sh" not in obs  # setup.sh ran and removed itself
    obs, reward, terminated, _, step = env.step("printf '#!/bin/sh\\necho nope\\n' > greet.sh\nDONE")  # step 2 wrong
    assert (terminated, step["verdict"]) == (False, "TOOL")
    obs, reward, terminated, _, step = env.step(turns[2])
    assert (reward, terminated, step["verdict"]) == (pytest.approx(2 / 3), True, "FAIL"), step
    assert "make 1, greet 0, notes 1" in step["feedback"]
    # A step below its min_reward stops the episode; steps not reached count 0.
    env.reset(seed=0)
    _, reward, terminated, _, step = env.step("DONE")
    assert (reward, terminated, step["verdict"]) == (0.0, True, "FAIL") and "stopped after 'make'" in step["feedback"]
    # A step's turn budget ends the step, not the episode.
    env.reset(seed=0)
    env.step(turns[0])
    env.step("echo one")
    obs, reward, terminated, _, step = env.step("echo two")
    assert (terminated, step["verdict"]) == (False, "TOOL") and "Step 3 of 3" in obs


def test_multi_step_rewards_final_or_mean_of_the_counted_steps(tmp_path):
    for name, strategy, counts, expected in (("steps-final", "final", "true", 1.0), ("steps-uncounted", "mean", "false", 0.5)):
        env = gymnasium.make(terminal_tasks.register_task_folder(_multi_step(tmp_path, name, strategy, counts), validate=False))
        _, info = env.reset(seed=0)
        turns = info["demonstration_turns"]
        env.step(turns[0])
        env.step("DONE")  # step 2 left undone: 0
        _, reward, terminated, _, step = env.step(turns[2])
        assert (reward, terminated) == (expected, True), (name, step)
    path = _multi_step(tmp_path, "steps-bad")
    for toml, why in (('[[steps]]\nname = "make"\nmin_reward = {"a" = 1}\n', "min_reward must be a number"),
                      ('[[steps]]\nname = "missing"\n', "no folder steps/missing/"),
                      ('[[steps]]\nname = "make"\n[steps.verifier]\nenvironment_mode = "separate"\n',
                       "environment_mode = 'separate'"),
                      ('multi_step_reward_strategy = "max"\n[[steps]]\nname = "make"\n', "'mean' or 'final', got 'max'")):
        _write(tmp_path / "steps-bad", {"task.toml": toml})
        with pytest.raises(TaskFolderError, match=why):
            terminal_tasks.load_task_folder(path)


COMPOSE = """
services:
  main:
    depends_on:
      api:
        condition: service_healthy
    environment:
      - API_URL=http://api:8000
      - TOKEN=${RLPT_TEST_UNSET_TOKEN:-none}
  api:
    build:
      context: ./api
    expose: ["8000"]
    environment:
      GREETING: hello-from-api
    healthcheck:
      test: ["CMD", "python3", "-c", "import socket; socket.create_connection(('localhost', 8000), timeout=2)"]
      interval: 1s
      retries: 10
"""
FETCH = 'python3 -c "import urllib.request; print(urllib.request.urlopen(\'$API_URL/greeting.txt\').read().decode())"'


def test_a_compose_task_runs_its_services_beside_it_in_one_pod(tmp_path):
    path = _folder(tmp_path, "with-api", test_sh='grep -qx hello-from-api /app/got.txt\n', **{
        "environment/docker-compose.yaml": COMPOSE,
        "environment/api/Dockerfile": ("FROM python:3.13-slim\nWORKDIR /srv\n"
                                       'CMD ["sh", "-c", "echo $GREETING > greeting.txt && exec python3 -m http.server 8000"]\n'),
        "solution/solve.sh": FETCH + " > /app/got.txt\n",
    })
    spec_id = terminal_tasks.register_task_folder(path)  # built (the service too) and validated
    folder = registry.domain(spec_id).folder
    assert [s.name for s in folder.services] == ["api"] and ("TOKEN", "none") in folder.environment_env
    env = gymnasium.make(spec_id)
    env.reset(seed=0)
    obs, *_ = env.step(FETCH + "; echo $TOKEN")
    assert "hello-from-api" in obs and "none" in obs, obs
    pod = env.unwrapped.task.hidden.pod
    assert pod and _running("with-api")
    _, reward, terminated, _, step = env.step(FETCH + " > got.txt\nDONE")
    assert (reward, terminated, step["verdict"]) == (1.0, True, "PASS"), step
    deadline = time.monotonic() + 30
    while _running("with-api") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _running("with-api")  # the pod went with the episode, service and all


@pytest.mark.parametrize("compose_text, why", [
    ("services:\n  api:\n    image: python:3.13-slim\n    volumes: ['/:/host']\n", "volumes is not supported"),
    ("services:\n  api:\n    build: ./nowhere\n", "'./nowhere' is not a folder"),
    ("services:\n  a:\n    image: x\n    depends_on: [b]\n  b:\n    image: x\n    depends_on: [a]\n", "in a cycle"),
])
def test_compose_files_this_runner_cannot_honour_are_refused_with_the_key(tmp_path, compose_text, why):
    path = _folder(tmp_path, "bad-compose", **{"environment/docker-compose.yaml": compose_text})
    with pytest.raises(TaskFolderError, match=why):
        terminal_tasks.load_task_folder(path)


@pytest.mark.parametrize("name, test_sh, why", [
    ("no-runner", "rlpt-missing-runner -q /tests\n", "test.sh needs 'rlpt-missing-runner'"),
    ("abs-path", "cd /rlpt-no-such-app-dir\nls\nexit 3\n", "path '/rlpt-no-such-app-dir'"),
    ("needs-network", "curl -fsS https://pypi.org/simple/ >/dev/null\n", "the tests need the network"),
    ("old-python", "source $HOME/.local/bin/env\nuvx -p 3.7 pytest /tests\n", "a Python the image lacks"),
])
def test_a_test_harness_that_cannot_run_is_infrastructure_not_fail(tmp_path, name, test_sh, why):
    path = _folder(tmp_path, name, test_sh=test_sh)
    with pytest.raises(TaskFolderError, match=f"fails validation: a do-nothing answer is VERIFIER_ERROR.*{why}"):
        terminal_tasks.register_task_folder(path)  # validated: refused with the reason
    assert not registry.is_registered(f"rlpt/tbench-{name}-v0")
    env = gymnasium.make(terminal_tasks.register_task_folder(path, validate=False))
    env.reset(seed=0)
    _, reward, terminated, _, step = env.step("touch out.txt\nDONE")
    assert (reward, step["verdict"], step["infra_error"]) == (0.0, "VERIFIER_ERROR", True), step
    assert why in step["feedback"]


def test_the_model_s_own_failures_stay_fail(tmp_path):
    # The tests judge: the file is missing; a command missing in the model's own script is its own.
    test_sh = 'bash /app/run.sh\ntest -f /app/out.txt\n'
    path = _folder(tmp_path, "judged", test_sh=test_sh)
    env = gymnasium.make(terminal_tasks.register_task_folder(path))
    env.reset(seed=0)
    _, reward, _, _, step = env.step("printf 'rlpt-nowhere-cmd\\n' > run.sh\nDONE")
    assert (reward, step["verdict"]) == (0.0, "FAIL"), step


@pytest.mark.parametrize("name, extra, why", [
    ("ref-fails", {"solution/solve.sh": "echo nothing\n"}, "its reference solution is FAIL, not PASS"),
    ("passes-anything", {"tests/test.sh": "exit 0\n"}, "its tests pass a do-nothing answer"),
])
def test_a_task_whose_tests_cannot_be_trusted_is_refused_at_registration(tmp_path, name, extra, why):
    path = _folder(tmp_path, name, **extra)
    with pytest.raises(TaskFolderError, match=f"task {name} fails validation: {why}"):
        terminal_tasks.register_task_folder(path)
    assert not registry.is_registered(f"rlpt/tbench-{name}-v0")
    # A good one: the reference (a file beside solve.sh, run from /solution) passes.
    good = _folder(tmp_path, f"{name}-fixed", **{"solution/solve.sh": "cp /solution/done.txt /app/\n",
                                                 "solution/done.txt": "ok\n"})
    assert terminal_tasks.validate_task(registry.domain(terminal_tasks.register_task_folder(good))) is None


def test_a_build_that_fails_is_refused_with_one_line(tmp_path):
    path = _folder(tmp_path, "bad-build", **{"environment/Dockerfile": "FROM python:3.13-slim\nRUN echo rlpt-broke >&2; exit 3\n"})
    with pytest.raises(TaskFolderError, match=r"cannot be built: the task's Dockerfile failed: rlpt-broke \(at RUN echo rlpt-broke"):
        terminal_tasks.register_task_folder(path)
    path = _folder(tmp_path, "unknown-base", **{"environment/Dockerfile": "FROM example.org/nobody/nothing:1\n"})
    with pytest.raises(TaskFolderError, match="no local stand-in for base image 'example.org/nobody/nothing:1'"):
        terminal_tasks.register_task_folder(path)


def test_images_are_cached_by_content(tmp_path):
    path = _folder(tmp_path, "cached-one", **{"environment/app/a.txt": "one\n"})
    folder = terminal_tasks.load_task_folder(path)
    first = terminal_tasks.build_task(folder)
    again = terminal_tasks.build_task(folder)
    assert first.error is None and not first.cached and again.cached and again.tag == first.tag
    _write(tmp_path / "cached-one", {"environment/app/a.txt": "two\n"})
    changed = terminal_tasks.build_task(folder)
    assert changed.tag != first.tag and not changed.cached
    for b in (first, changed):
        engine.Engine().remove_image(b.tag)


def test_an_unbuilt_image_or_a_failing_engine_is_infrastructure(tmp_path, monkeypatch):
    path = _folder(tmp_path, "never-built", **{"environment/app/x.txt": "x\n"})
    env = gymnasium.make(terminal_tasks.register_task_folder(path, build=False, validate=False))
    env.reset(seed=0)
    _, reward, terminated, truncated, step = env.step("DONE")
    assert (reward, step["verdict"], step["infra_error"]) == (0.0, "SANDBOX_ERROR", True)
    assert f"python -m environments build {path}" in step["feedback"]
    env = gymnasium.make("rlpt/tbench-hello-file-v0")
    env.reset(seed=0)

    def broken(*args, **kwargs):
        raise engine.EngineError("podman run failed (exit 125): boom")

    monkeypatch.setattr(engine.Engine, "start", broken)
    _, reward, terminated, truncated, step = env.step("echo hi")
    assert (reward, step["verdict"], step["infra_error"]) == (0.0, "SANDBOX_ERROR", True) and "boom" in step["feedback"]


def test_loading_needs_no_engine_and_refuses_nothing_for_size(tmp_path):
    text = "Rename every file ending in .txt to .md. " * 250  # 10,250 characters
    path = _write(tmp_path / "long-task", {"instruction.md": text, "tests/test.sh": "test -f /app/a.md\n"})
    spec = registry.get(terminal_tasks.register_task_folder(path, build=False, validate=False))
    assert spec.max_prompt_chars > len(text)
    obs, _ = gymnasium.make(spec.id).reset(seed=0)
    assert text.strip() in obs and len(obs) <= spec.max_prompt_chars
    toml = ('version = "1.0"\n[metadata]\ndifficulty = "hard"\ntags = ["t"]\n[verifier]\ntimeout_sec = 900.0\n'
            '[verifier.env]\nMODE = "strict"\n[agent]\ntimeout_sec = 900.0\nmax_turns = 3\n'
            '[environment]\ncpus = 64\nmemory = "1G"\nbuild_timeout_sec = 600.0\n')
    folder = terminal_tasks.load_task_folder(_folder(tmp_path, "user_keys.v2", **{"task.toml": toml}))
    assert folder.name == "user-keys-v2"  # as Terminal-Bench names some tasks (install-windows-3.11)
    assert (folder.difficulty, folder.max_turns, folder.steps[0].verifier_env) == ("hard", 3, (("MODE", "strict"),))
    assert folder.resources.memory_mb == 1024 and folder.resources.cpus == os.cpu_count()  # at most the host's
    assert folder.build_timeout_s == 600.0


def test_malformed_folders_name_the_problem(tmp_path):
    path = _write(tmp_path / "no-instruction", {"tests/test.sh": "exit 0\n"})
    with pytest.raises(TaskFolderError, match="instruction.md") as err:
        terminal_tasks.load_task_folder(path)
    assert path in str(err.value)
    path = _write(tmp_path / "no-tests", {"instruction.md": "x\n"})
    with pytest.raises(TaskFolderError, match="tests/test.sh"):
        terminal_tasks.load_task_folder(path)
    path = _folder(tmp_path, "bad-difficulty", **{"task.toml": "[metadata]\ndifficulty = 'extreme'\n"})
    with pytest.raises(TaskFolderError, match="difficulty"):
        terminal_tasks.load_task_folder(path)
    path = _folder(tmp_path, "bad-memory", **{"task.toml": "[environment]\nmemory = 'lots'\n"})
    with pytest.raises(TaskFolderError, match="memory must be like '2G'.*'lots'"):
        terminal_tasks.load_task_folder(path)
    _folder(tmp_path / "root", "good-one")
    _write(tmp_path / "root" / "broken-one", {"instruction.md": "x\n"})
    with pytest.raises(TaskFolderError, match="broken-one"):
        terminal_tasks.register_tasks(str(tmp_path / "root"), build=False, validate=False)
    assert terminal_tasks.register_tasks(str(tmp_path / "root"), skip_unavailable=True, build=False,
                                         validate=False) == ["rlpt/tbench-good-one-v0"]


# ------------------------------------------------------------------- units


@pytest.mark.parametrize("output, expected", [
    ("/tests/test.sh: line 4: uvx: command not found\n", "test.sh needs 'uvx'"),
    ("/tests/test.sh: line 2: cd: /app: No such file or directory\n", "path '/app'"),
    ("curl: (6) Could not resolve host: astral.sh\n", "the network (Could not resolve host)"),
    ("ERROR: No matching distribution found for pytest==8.4.1\n", "No matching distribution found for pytest==8.4.1"),
    ("error: No interpreter found for Python 3.13 in managed installations\n", "Python the image lacks"),
    ("/usr/bin/python3: No module named pytest\n", "runner 'pytest'"),
    ("ERROR: file or directory not found: /tests/test_outputs.py\n", "'/tests/test_outputs.py'"),
    ("/app/run.sh: line 1: rlpt-nowhere-cmd: command not found\nFAILED test_out.py::test_x\n", None),
    ("E   AssertionError: assert 3 == 4\n1 failed in 0.02s\n", None),
    # The uv installer's curl fails offline, but pytest ran and judged: the tests' verdict.
    ("curl: (6) Could not resolve host: astral.sh\n=========== 1 failed, 2 passed in 0.31s ===========\n", None),
])
def test_harness_failures_are_told_from_verdicts(output, expected):
    why = terminal_tasks.harness_failure(output)
    assert (why is None) if expected is None else (expected in why), why


@pytest.mark.parametrize("output, expected", [
    ("E: Failed to fetch http://deb.debian.org/x.deb  Temporary failure resolving 'deb.debian.org'",
     "Temporary failure resolving 'deb.debian.org'"),
    ("curl: (6) Could not resolve host: astral.sh\nall good\n", None),  # uv's installer: the image has uv
    ("curl: (6) Could not resolve host: astral.sh\nfatal: Could not resolve host: github.com\n", "Could not resolve host: github.com"),
    ("HTTPConnectionPool(host='localhost', port=5000): Failed to establish a new connection: [Errno 111]", None),
    ("  Because fastmcp was not found in the cache and you require fastmcp, we can conclude", "Because fastmcp was not found in the cache"),
    ("5 passed in 0.1s\n", None),
])
def test_what_reached_for_the_network_is_told_from_what_did_not(output, expected):
    got = terminal_tasks.needs_network(output)
    assert (got is None) if expected is None else got.startswith(expected), got


def test_the_warm_up_runs_a_test_script_s_installs_not_its_tests():
    warm = images.warm_script(TB2_STYLE + "pip3 install numpy==2.1.0 && python -m pytest /tests\nuv tool run --with x==1 ruff check .\n")
    assert "apt-get install -y curl" in warm and "source $HOME/.local/bin/env" in warm
    assert "uvx -p 3.13 -w pytest==8.4.1 pytest --version" in warm  # resolved and cached, not run on /tests
    torch = images.warm_script("uvx \\\n  --index https://download.pytorch.org/whl/cpu \\\n  --index-strategy unsafe-best-match \\\n"
                               "  -p 3.13 -w torch==2.7.1 pytest /tests/test_outputs.py -rA\n")
    assert ("uvx --index https://download.pytorch.org/whl/cpu --index-strategy unsafe-best-match -p 3.13 "
            "-w torch==2.7.1 pytest --version") in torch  # options that take a value are not the tool
    assert "pip3 install numpy==2.1.0" in warm and "uvx --with x==1 ruff --version" in warm
    assert "astral.sh" not in warm and "/tests/test_outputs.py" not in warm and "python -m pytest /tests" not in warm
    assert "command -v python3.13" in warm  # the Python uvx asks for, from the distribution when absent
    assert images.warm_script("test -f /app/x\n").count("\n") == 2  # nothing to bake in
    # A venv the script makes and activates: its installs go into that venv (uv refuses them outside one).
    venv = images.warm_script("uv venv -p 3.12 .tb\nsource .tb/bin/activate\nuv pip install pytest==8.4.1\nuv run pytest /tests\n")
    order = [venv.index(s) for s in ("; uv venv -p 3.12 .tb", "; source .tb/bin/activate", "; uv pip install pytest==8.4.1")]
    assert order == sorted(order) and "uv run pytest" not in venv
    assert not images.needs_tools(os.path.join(terminal_tasks.DATA_ROOT, "hello-file"))


def test_base_image_names_resolve_as_podman_resolves_them():
    assert bases.normalise("python:3.13-slim") == "docker.io/library/python:3.13-slim"
    assert bases.normalise("ubuntu") == "docker.io/library/ubuntu:latest"
    assert bases.normalise("alexgshaw/task:1") == "docker.io/alexgshaw/task:1"
    assert bases.normalise("ghcr.io/laude-institute/t-bench/python-3-13:20250620") == "ghcr.io/laude-institute/t-bench/python-3-13:20250620"
    assert bases.recipe_for("python:3.13-slim-bookworm").suite == "bookworm"
    assert bases.recipe_for("python:3.11-slim").suite == "bookworm"
    assert bases.recipe_for("example.org/x:1") is None
    docker = "ARG BASE=python:3.13-slim\nFROM ${BASE} AS build\nRUN true\nFROM build\nFROM --platform=linux/amd64 debian:12-slim\n"
    root = os.path.join(os.path.dirname(__file__), "_base_images_fixture")
    try:
        _write(root, {"environment/Dockerfile": docker, "tests/test.sh": "true\n"})
        assert images.base_images(root) == ["python:3.13-slim", "debian:12-slim"]
    finally:
        import shutil
        shutil.rmtree(root)


def test_a_reference_that_installs_packages_needs_them_baked_in(tmp_path):
    solve = "apt-get update\napt-get install -y bc\necho '2+3' | bc > /app/sum.txt\n"
    path = _folder(tmp_path, "needs-bc", test_sh='[ "$(cat /app/sum.txt)" = 5 ]\n',
                   **{"environment/Dockerfile": "FROM python:3.13-slim\nWORKDIR /app\n", "solution/solve.sh": solve})
    # Episodes have no network: the reference cannot install bc, and the task is refused saying why.
    with pytest.raises(TaskFolderError, match="its reference solution needs the network, which episodes do not have"):
        terminal_tasks.register_task_folder(path)
    # Opted in, the image holds what the reference installs, and the task is valid.
    domain_id = terminal_tasks.register_task_folder(path, solution_packages=True)
    domain = registry.domain(domain_id)
    assert domain.folder.solution_packages and domain.image != images.tag_for("needs-bc", path)
    env = gymnasium.make(domain_id)
    env.reset(seed=0)
    obs, *_ = env.step("command -v bc")
    assert "[exit 0] /usr/bin/bc" in obs, obs
