"""Two processes on loopback (gloo CPU collectives, 2 devices each) run RL steps
of the smoke config and match one process with 4 devices, same mesh.

Each run is tests/launch/_mp_worker.py; only process 0 may write files.
"""

import json
import os
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
from tests.multiproc import cpu_env, run_processes

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_mp_worker.py")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(WORKER)))


@pytest.mark.slow
def test_two_processes_match_one(tmp_path):
  model_cfg = from_config_dict(PretrainConfig, pretrain_base.get_config("smoke")).model
  ckpt = str(tmp_path / "base")
  save_model(ckpt, nnx.split(Transformer(model_cfg, nnx.Rngs(0)))[1], model_cfg)

  single = tmp_path / "single.json"
  subprocess.run([sys.executable, WORKER, str(single), str(tmp_path / "wd1"), ckpt, "4"],
                 cwd=ROOT, env=cpu_env(), check=True, timeout=120, capture_output=True)

  multi = tmp_path / "multi.json"
  run_processes(WORKER, lambda i: [str(multi), str(tmp_path / f"wd2_p{i}"), ckpt, "2"], 2, 150)

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
