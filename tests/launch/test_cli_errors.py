"""Every command-line mistake ends in one line naming the flag or key, the value
and what is allowed, exit status 2, and nothing written: through the real
``launch.*`` command lines, each in a subprocess."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMOKE = "--config=experiments/grpo_default.py:smoke"


def _run(module, *args, timeout=120):
  return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True,
                        text=True, timeout=timeout, env=dict(os.environ, PYTHONPATH=ROOT))


CASES = {
    "misspelt key": (
        ["--config.rollout.tempreture=0.5"],
        "launch.train: error: Unknown config key 'config.rollout.tempreture'. "
        "Did you mean 'config.rollout.temperature'?"),
    "misspelt section": (
        ["--config.rolout.temperature=0.5"],
        "launch.train: error: Unknown config key 'config.rolout'. Did you mean 'config.rollout'?"),
    "value of the wrong type": (
        ["--config.rollout.temperature=warm"],
        "launch.train: error: --config.rollout.temperature=warm: could not convert string to float: 'warm'"),
    "value out of range": (
        ["--config.optim.learning_rate=-1"], "launch.train: error: invalid config: "),
    "unknown domain": (
        ['--config.domains.ids=["rlpt/nope-v0"]'],
        "launch.train: error: invalid config: config.domains.ids[0] is 'rlpt/nope-v0', which is not "
        "a registered domain (none of the"),
    "misspelt domain": (
        ['--config.domains.ids=["rlpt/strings-revers-easy-v0"]'],
        "close matches: ['rlpt/strings-reverse-easy-v0'"),
    "missing dataset file": (
        ['--config.domains.files=["rlpt/dataset-gone-v0=/nonexistent/gone.jsonl:math"]'],
        "config.domains.files[0] ('rlpt/dataset-gone-v0=/nonexistent/gone.jsonl:math'): "
        "/nonexistent/gone.jsonl: no such file"),
    "unknown flag": (["--workdri=/tmp/y"], "launch.train: error: Unknown command line flag 'workdri'"),
    "stray argument": (["extra"], "launch.train: error: unexpected arguments ['extra']"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_one_line_exit_2_nothing_written(case, tmp_path):
  args, expected = CASES[case]
  workdir = tmp_path / "run"
  r = _run("launch.train", SMOKE, f"--workdir={workdir}", *args)
  assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
  lines = r.stderr.strip().splitlines()
  assert len(lines) == 1 and expected in lines[0], r.stderr[-2000:]
  assert r.stdout == ""
  assert not workdir.exists()


@pytest.mark.parametrize("config,expected", [
    ("experiments/nope.py", "--config=experiments/nope.py: no such config file 'experiments/nope.py'; "
                            "the files beside it: ["),
    ("experiments/grpo_default.py:fast", "--config=experiments/grpo_default.py:fast: Unknown grpo_default "
                                         "argument 'fast'; expected '', 'smoke' or 'async'."),
])
def test_config_file_mistakes(config, expected, tmp_path):
  r = _run("launch.train", f"--config={config}", f"--workdir={tmp_path / 'run'}")
  lines = r.stderr.strip().splitlines()
  assert r.returncode == 2 and len(lines) == 1, r.stderr[-2000:]
  assert lines[0].startswith(f"launch.train: error: {expected}"), lines[0]
  assert not (tmp_path / "run").exists()


def test_workdir_mistakes(tmp_path):
  a_file = tmp_path / "file"
  a_file.write_text("keep me")
  for workdir, expected in ((a_file, f"--workdir={a_file}: exists and is not a directory"),
                            ("/proc/rlpt-nope/run", "--workdir=/proc/rlpt-nope/run: cannot be created")):
    r = _run("launch.train", SMOKE, f"--workdir={workdir}")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr[-2000:]
    assert lines[0].startswith(f"launch.train: error: {expected}"), lines[0]
  assert a_file.read_text() == "keep me"
  r = _run("launch.train", SMOKE)
  assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "--workdir" in r.stderr


def test_pretrain_and_plan_entry_points(tmp_path):
  r = _run("launch.pretrain", "--config=experiments/pretrain_base.py:smoke",
           f"--workdir={tmp_path / 'base'}", "--config.optim.learning_rat=1")
  lines = r.stderr.strip().splitlines()
  assert r.returncode == 2 and len(lines) == 1, r.stderr[-2000:]
  assert lines[0].startswith("launch.pretrain: error: Unknown config key 'config.optim.learning_rat'. "
                             "Did you mean 'config.optim.learning_rate'?"), lines[0]
  r = _run("launch.plan", "--config=experiments/plan_llama_1b.py", "--config.mesh.dta=2")
  assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr[-2000:]
  assert "Unknown config key 'config.mesh.dta'" in r.stderr


def test_entry_points_run_from_any_directory(tmp_path):
  """`make setup` puts the checkout on the environment's path, so the entry points
  (as modules or as files) and the experiment files they load work from
  anywhere, with no PYTHONPATH."""
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  config = f"--config={ROOT}/experiments/plan_llama_1b.py"
  for argv in ([sys.executable, "-m", "launch.plan", config],
               [sys.executable, os.path.join(ROOT, "launch", "plan.py"), config]):
    r = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, (
        f"{argv[1:]} from {tmp_path} failed (is the checkout on the path? `make setup` "
        f"writes rlpt-checkout.pth):\n{r.stderr[-1500:]}")
    assert "parameters: policy 1.24B" in r.stdout
