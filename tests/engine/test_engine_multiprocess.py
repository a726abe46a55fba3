"""The engine over two processes (loopback, gloo CPU collectives, 4 devices
each; its slots on the data axis across both) samples the same multi-turn
tokens as one process with 8 devices (log-probs within 2e-5, fp32)."""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_mp_engine_worker.py")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(WORKER)))


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _env():
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  env["JAX_PLATFORMS"] = "cpu"
  return env


@pytest.mark.slow
def test_two_processes_sample_what_one_does(tmp_path):
  single = tmp_path / "single.json"
  subprocess.run([sys.executable, WORKER, str(single), "8"], cwd=ROOT, env=_env(), check=True,
                 timeout=300, capture_output=True)
  multi = tmp_path / "multi.json"
  coordinator = f"127.0.0.1:{_free_port()}"
  procs = [subprocess.Popen([sys.executable, WORKER, str(multi), "4", coordinator, "2", str(i)],
                            cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True) for i in range(2)]
  try:
    logs = [p.communicate(timeout=300)[0] for p in procs]
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
  for i, p in enumerate(procs):
    assert p.returncode == 0, f"process {i} failed:\n{logs[i][-4000:]}"
  a, b = json.loads(single.read_text()), json.loads(multi.read_text())
  assert (a["processes"], a["devices"], b["processes"], b["devices"]) == (1, 8, 2, 8)
  assert a["turns"].keys() == b["turns"].keys() and len(a["turns"]) == 20
  for seq, turns in a["turns"].items():
    assert len(turns) == 2
    for (tok_a, lp_a), (tok_b, lp_b) in zip(turns, b["turns"][seq]):
      assert tok_a == tok_b
      np.testing.assert_allclose(lp_b, lp_a, atol=2e-5, rtol=0)
