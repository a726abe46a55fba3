"""The engine over two processes (loopback, gloo CPU collectives, 4 devices
each; its slots on the data axis across both) samples the same multi-turn
tokens as one process with 8 devices (log-probs within 2e-5, fp32)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.multiproc import cpu_env, run_processes

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_mp_engine_worker.py")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(WORKER)))


@pytest.mark.slow
def test_two_processes_sample_what_one_does(tmp_path):
  single = tmp_path / "single.json"
  subprocess.run([sys.executable, WORKER, str(single), "8"], cwd=ROOT, env=cpu_env(), check=True,
                 timeout=300, capture_output=True)
  multi = tmp_path / "multi.json"
  run_processes(WORKER, lambda i: [str(multi), "4"], 2, 300)
  a, b = json.loads(single.read_text()), json.loads(multi.read_text())
  assert (a["processes"], a["devices"], b["processes"], b["devices"]) == (1, 8, 2, 8)
  assert a["turns"].keys() == b["turns"].keys() and len(a["turns"]) == 20
  for seq, turns in a["turns"].items():
    assert len(turns) == 2
    for (tok_a, lp_a), (tok_b, lp_b) in zip(turns, b["turns"][seq]):
      assert tok_a == tok_b
      np.testing.assert_allclose(lp_b, lp_a, atol=2e-5, rtol=0)
