"""Two processes on loopback (gloo CPU collectives, 2 devices each) run RL steps
of the smoke config and match one process with 4 devices, same mesh.

Each run is tests/launch/_mp_worker.py; only process 0 may write files.
"""

import json
import os
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest
from flax import nnx

from experiments import pretrain_base
from rlpt.checkpoint import save_model
from rlpt.config import PretrainConfig, from_config_dict
from rlpt.models import Transformer

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_mp_worker.py")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(WORKER)))


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _env():
  env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS",)}
  env["JAX_PLATFORMS"] = "cpu"
  return env


@pytest.mark.slow
def test_two_processes_match_one(tmp_path):
  model_cfg = from_config_dict(PretrainConfig, pretrain_base.get_config("smoke")).model
  ckpt = str(tmp_path / "base")
  save_model(ckpt, nnx.split(Transformer(model_cfg, nnx.Rngs(0)))[1], model_cfg)

  single = tmp_path / "single.json"
  subprocess.run([sys.executable, WORKER, str(single), str(tmp_path / "wd1"), ckpt, "4"],
                 cwd=ROOT, env=_env(), check=True, timeout=120, capture_output=True)

  multi = tmp_path / "multi.json"
  coordinator = f"127.0.0.1:{_free_port()}"
  procs = [subprocess.Popen([sys.executable, WORKER, str(multi), str(tmp_path / f"wd2_p{i}"),
                             ckpt, "2", coordinator, "2", str(i)],
                            cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True) for i in range(2)]
  try:
    logs = [p.communicate(timeout=150)[0] for p in procs]
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
  for i, p in enumerate(procs):
    assert p.returncode == 0, f"process {i} failed:\n{logs[i][-4000:]}"

  a, b = json.loads(single.read_text()), json.loads(multi.read_text())
  assert (a["process_count"], a["devices"]) == (1, 4)
  assert (b["process_count"], b["devices"]) == (2, 4)
  # Only process 0 writes logs.
  assert (tmp_path / "wd2_p0" / "metrics.jsonl").exists()
  assert not (tmp_path / "wd2_p1").exists()

  # The export of the two-process run: written once, equal to the one-process run's.
  from rlpt.checkpoint import load_model
  exported = [load_model(str(tmp_path / f"export_{n}p"))[2] for n in (1, 2)]
  assert not (tmp_path / "export_2p.tmp").exists()
  for x, y in zip(jax.tree.leaves(exported[0]), jax.tree.leaves(exported[1])):
    np.testing.assert_allclose(np.asarray(y), np.asarray(x), rtol=1e-4, atol=1e-5)

  assert len(a["steps"]) == len(b["steps"]) == 2
  for step_a, step_b in zip(a["steps"], b["steps"]):
    assert step_a.keys() == step_b.keys()
    for k in step_a:
      np.testing.assert_allclose(step_b[k], step_a[k], rtol=1e-4, atol=1e-6, err_msg=k)
  assert a["synthetic"]["loss"] > 1.0 and a["synthetic"]["grad_norm"] > 1.0
  for k in a["synthetic"]:
    np.testing.assert_allclose(b["synthetic"][k], a["synthetic"][k], rtol=1e-4, err_msg=k)
  # Adam normalises the near-zero smoke gradients of the RL steps, which lifts
  # reduction-order noise to about lr; the parameter sum still agrees to 1e-4.
  np.testing.assert_allclose(b["param_checksum"], a["param_checksum"], rtol=1e-4)
