"""One single-threaded XLA device per core on a CPU host (``--cpu_devices``,
``rlpt.device.set_cpu_devices``): set before JAX starts, refused after, a
run of the trainer on two such devices (the batch sharded over them), and the
count of --cpu_devices=0 (one per core that the batch divides into)."""

import importlib.util
import json
import math
import os
import subprocess
import sys

import pytest
from flax import nnx

from experiments import pretrain_base
from rlpt.checkpoint import save_model
from rlpt.config import PretrainConfig, TrainConfig, from_config_dict
from rlpt.models import Transformer
from rlpt.device import set_cpu_devices
from tests.multiproc import compile_flags

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESUME_CONFIG = os.path.join(ROOT, "tests", "checkpoint", "_resume_config.py")


def _env(**extra):
  # XLA_FLAGS: the suite's compile flags alone (tests/conftest.py), no device count.
  env = {**os.environ, "XLA_FLAGS": compile_flags()}
  env.update(JAX_PLATFORMS="cpu", **extra)
  return env


def _python(code, **env):
  return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(**env),
                        capture_output=True, text=True, timeout=120)


def test_sets_devices_before_jax_starts():
  r = _python("from rlpt.device import set_cpu_devices; set_cpu_devices(3); import jax, os; "
              "print(jax.device_count(), os.environ['XLA_FLAGS'])")
  assert r.returncode == 0, r.stderr
  count, flags = r.stdout.split(" ", 1)
  assert count == "3"
  assert "--xla_cpu_multi_thread_eigen=false" in flags
  assert "--xla_cpu_collective_call_terminate_timeout_seconds=600" in flags


def test_refuses_after_jax_started_and_bad_values():
  # This test process's JAX has started (conftest's 8 devices).
  import jax
  jax.devices()
  with pytest.raises(RuntimeError, match="2 CPU devices must be set before JAX starts"):
    set_cpu_devices(2)
  with pytest.raises(ValueError, match="CPU devices must be >= 1, got 0"):
    set_cpu_devices(0)
  set_cpu_devices(1)  # a no-op, allowed at any time


def test_refuses_a_device_count_already_in_xla_flags():
  r = _python("from rlpt.device import set_cpu_devices; set_cpu_devices(2)",
              XLA_FLAGS="--xla_force_host_platform_device_count=4")
  assert r.returncode != 0
  assert "XLA_FLAGS already sets the CPU device count" in r.stderr


def test_train_runs_on_two_cpu_devices(tmp_path):
  model_cfg = from_config_dict(PretrainConfig, pretrain_base.get_config("smoke")).model
  base = str(tmp_path / "base")
  save_model(base, nnx.split(Transformer(model_cfg, nnx.Rngs(0)))[1], model_cfg)
  workdir = tmp_path / "run"
  r = subprocess.run([sys.executable, "-m", "launch.train", f"--config={RESUME_CONFIG}",
                      f"--workdir={workdir}", f"--config.base.checkpoint={base}",
                      "--config.steps=3", "--cpu_devices=2"],
                     cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr[-3000:]
  assert "devices: 2 x cpu in 1 process(es)" in r.stdout
  with open(workdir / "metrics.jsonl") as f:
    steps = [row["step"] for row in map(json.loads, f) if row["kind"] == "train"]
  assert steps == [1, 2, 3]
  # 0: one device per available core that the batch divides into.
  spec = importlib.util.spec_from_file_location("_resume_config", RESUME_CONFIG)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  cfg = from_config_dict(TrainConfig, mod.get_config())
  expected = math.gcd(len(os.sched_getaffinity(0)), cfg.rollout.prompts_per_step,
                      cfg.rollout.batch_size // cfg.rl.minibatches)
  auto = subprocess.run([sys.executable, "-m", "launch.train", f"--config={RESUME_CONFIG}",
                         f"--workdir={tmp_path / 'auto'}", f"--config.base.checkpoint={base}",
                         "--config.steps=1", "--cpu_devices=0"],
                        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
  assert auto.returncode == 0, auto.stderr[-3000:]
  assert f"devices: {expected} x cpu in 1 process(es)" in auto.stdout
  # A bad count is a usage error naming the flag.
  bad = subprocess.run([sys.executable, "-m", "launch.train", f"--config={RESUME_CONFIG}",
                        f"--workdir={tmp_path / 'bad'}", "--cpu_devices=2"], cwd=ROOT,
                       env=_env(XLA_FLAGS="--xla_force_host_platform_device_count=4"),
                       capture_output=True, text=True, timeout=120)
  assert bad.returncode != 0
  assert "--cpu_devices=2: XLA_FLAGS already sets the CPU device count" in bad.stderr
