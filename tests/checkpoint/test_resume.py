"""Kill the trainer anywhere, resume, get the same run.

One uninterrupted ``launch.train`` run of the smoke config is the reference.
A second run of the same command is SIGKILLed at a random step after its
first checkpoint, then the same command is started again: the resumed run's
metrics.jsonl (train and eval rows, minus wall-clock keys) must equal the
reference's exactly, including the token hash of every step's batch and the
gradient norms. The config (``_resume_config.py``) makes
every update move the weights and carries RNG, data-iterator, curriculum and
KL-controller state across steps.

When the killed run left two checkpoints, the latest is damaged before the
restart, which must fall back to the previous one with a warning.

The reference run's checkpoints then restore onto another mesh shape.
"""

import importlib.util
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest
from flax import nnx

from experiments import pretrain_base
from rlpt.checkpoint import save_model
from rlpt.config import PretrainConfig, TrainConfig, from_config_dict
from rlpt.metrics import WALL_CLOCK_PREFIXES
from rlpt.models import Transformer
from tests.multiproc import compile_flags

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CONFIG = os.path.join(HERE, "_resume_config.py")
_spec = importlib.util.spec_from_file_location("_resume_config", CONFIG)
resume_config = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(resume_config)
STEPS, EVERY = resume_config.STEPS, resume_config.EVERY
# Wall-clock figures differ between any two runs; everything else must not.
VOLATILE = WALL_CLOCK_PREFIXES


def _rows(workdir):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    rows = [json.loads(line) for line in f]
  return [{k: v for k, v in r.items() if not k.startswith(VOLATILE)}
          for r in rows if r["kind"] in ("train", "eval")]


def _env(cache_dir):
  env = dict(os.environ)
  env.update(XLA_FLAGS=compile_flags() + " --xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu",
             # The three launches compile the same programs: compile once.
             JAX_COMPILATION_CACHE_DIR=cache_dir, JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
             JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
  return env


def _command(workdir, base):
  return [sys.executable, "-m", "launch.train", f"--config={CONFIG}", f"--workdir={workdir}",
          f"--config.base.checkpoint={base}"]


def _committed_steps(workdir):
  d = os.path.join(workdir, "checkpoints")
  return sorted(int(n) for n in os.listdir(d) if n.isdigit()) if os.path.isdir(d) else []


def _train_steps(workdir):
  path = os.path.join(workdir, "metrics.jsonl")
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return [json.loads(line)["step"] for line in f if line.endswith("\n") and '"train"' in line]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("resume")
  model_cfg = from_config_dict(PretrainConfig, pretrain_base.get_config("smoke")).model
  base = str(tmp / "base")
  save_model(base, nnx.split(Transformer(model_cfg, nnx.Rngs(0)))[1], model_cfg)
  env = _env(str(tmp / "jax_cache"))
  reference = str(tmp / "reference")
  subprocess.run(_command(reference, base), cwd=ROOT, env=env, check=True, timeout=300,
                 capture_output=True)
  return tmp, base, env, reference


@pytest.mark.slow
def test_sigkill_and_resume_matches_uninterrupted(setup):
  tmp, base, env, reference = setup
  expected = _rows(reference)
  train = [r for r in expected if r["kind"] == "train"]
  assert [r["step"] for r in train] == list(range(1, STEPS + 1))
  # The comparison means something: the weights and the samples move every step.
  assert all(r["train/grad_norm"] > 0 for r in train)
  assert len({r["rollout/token_hash"] for r in train}) == STEPS
  assert len({r["kl/coef"] for r in train}) > 1

  seed = random.randrange(1 << 30)
  kill_at = random.Random(seed).randint(EVERY + 1, STEPS - 2)
  workdir = str(tmp / "killed")
  proc = subprocess.Popen(_command(workdir, base), cwd=ROOT, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
  try:
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
      committed = _committed_steps(workdir)
      done = _train_steps(workdir)
      if committed and done and done[-1] >= max(kill_at, committed[-1] + 1):
        proc.send_signal(signal.SIGKILL)
        break
      time.sleep(0.01)
    proc.wait(timeout=30)
  finally:
    if proc.poll() is None:
      proc.kill()
  killed_steps = _train_steps(workdir)
  assert proc.returncode == -signal.SIGKILL, (
      f"(seed {seed}) the run was not killed: rc={proc.returncode}, "
      f"stderr={proc.stderr.read().decode()[-3000:]}")
  assert killed_steps[-1] < STEPS, f"(seed {seed}) killed only after the last step"
  committed = _committed_steps(workdir)
  last_ckpt = committed[-1]
  if len(committed) > 1:
    # A damaged latest checkpoint: the restart falls back to the one before.
    bad = os.path.join(workdir, "checkpoints", str(last_ckpt), "trainer", "metadata")
    with open(bad, "r+") as f:
      f.truncate(10)
    last_ckpt = committed[-2]

  resumed = subprocess.run(_command(workdir, base), cwd=ROOT, env=env, timeout=300,
                           capture_output=True, text=True)
  assert resumed.returncode == 0, resumed.stderr[-5000:]
  if len(committed) > 1:
    assert f"Checkpoint step {committed[-1]} in" in resumed.stderr, resumed.stderr[-5000:]
  got = _rows(workdir)
  assert [(r["step"], r["kind"]) for r in got] == [(r["step"], r["kind"]) for r in expected], (
      f"(seed {seed}) killed after step {killed_steps[-1]}, checkpoint {last_ckpt}")
  for g, e in zip(got, expected):
    assert g == e, (f"(seed {seed}, killed after step {killed_steps[-1]}, resumed from "
                    f"{last_ckpt}) step {e['step']} {e['kind']} differs: "
                    f"{ {k: (g.get(k), e.get(k)) for k in set(g) | set(e) if g.get(k) != e.get(k)} }")

  # The trained tasks, one row per step, are the uninterrupted run's too.
  def tasks(d):
    with open(os.path.join(d, "tasks.jsonl")) as f:
      return f.read()
  assert tasks(workdir) == tasks(reference)
  assert [json.loads(line)["step"] for line in tasks(reference).splitlines()] == list(
      range(1, STEPS + 1))

  # Save timings were logged, and the run exported its policy for serving.
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    saves = [json.loads(line) for line in f if '"checkpoint"' in line]
  assert saves and all(s["checkpoint/blocked_seconds"] <= s["checkpoint/save_seconds"] + 1e-3
                       for s in saves)
  assert os.path.exists(os.path.join(workdir, "export", "model.json"))
  print(f"\nkill seed {seed}: killed after step {killed_steps[-1]}, resumed from {last_ckpt}")
  for s in saves:
    print(f"save at step {s['step']}: {s['checkpoint/save_seconds']:.3f}s total, "
          f"{s['checkpoint/blocked_seconds']:.3f}s blocked")


@pytest.mark.slow
def test_restore_onto_another_mesh(setup, tmp_path, monkeypatch):
  """Saved on mesh data=8; restored on data=2 x fsdp=4 (parameters now sharded),
  the next step reproduces the reference run's step to float tolerance."""
  _, base, _, reference = setup
  monkeypatch.chdir(ROOT)
  cd = resume_config.get_config()
  cd.base.checkpoint = base
  cd.checkpoint.export = False
  cd.mesh.update(data=2, fsdp=4)
  cfg = from_config_dict(TrainConfig, cd)
  # A new workdir holding only the reference's checkpoint of step STEPS - EVERY.
  step = STEPS - EVERY
  shutil.copytree(os.path.join(reference, "checkpoints", str(step)),
                  tmp_path / "checkpoints" / str(step))
  from rlpt.trainer import Trainer
  trainer = Trainer(cfg, str(tmp_path))
  try:
    assert trainer.restore() == step
    specs = [str(x.sharding.spec) for x in jax.tree.leaves(trainer.actor.state.params)]
    assert any("fsdp" in s for s in specs) and trainer.mesh.shape["fsdp"] == 4, specs
    got = trainer.train_step()
  finally:
    trainer.close()
  expected = next(r for r in _rows(reference) if r["kind"] == "train" and r["step"] == step + 1)
  assert got["rollout/token_hash"] == expected["rollout/token_hash"]
  # KL estimates are differences of nearly equal log-probs: absolute tolerance.
  for k, atol in (("train/loss", 1e-7), ("train/grad_norm", 1e-7), ("train/entropy", 1e-7),
                  ("kl/coef", 1e-7), ("train/kl", 1e-6), ("kl/sequence", 1e-5)):
    np.testing.assert_allclose(got[k], expected[k], rtol=2e-4, atol=atol, err_msg=k)
