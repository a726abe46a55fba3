"""The notebooks execute top to bottom, so they cannot rot."""

import glob
import os
import re

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")))


def test_there_is_a_quickstart():
  assert any(p.endswith("quickstart.ipynb") for p in NOTEBOOKS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebook_executes(path, tmp_path, monkeypatch):
  monkeypatch.setenv("MPLBACKEND", "Agg")
  # The kernel compiles at XLA's default level: the quickstart runs more than it
  # compiles (600 pre-training steps), which level 0 (tests/conftest.py) slows.
  flags = os.environ.get("XLA_FLAGS", "").split()
  skip = set(os.environ.get("RLPT_TEST_COMPILE_FLAGS", "").split())
  monkeypatch.setenv("XLA_FLAGS", " ".join(f for f in flags if f not in skip))
  # The kernel's temporary files go to a folder of this test's own, so what the
  # notebook leaves behind is told apart from other tests' (make test runs two
  # workers at once).
  tmp = tmp_path / "tmp"
  tmp.mkdir()
  monkeypatch.setenv("TMPDIR", str(tmp))
  nb = nbformat.read(path, as_version=4)
  client = NotebookClient(nb, timeout=600, kernel_name="python3",
                          resources={"metadata": {"path": os.path.dirname(path)}})
  client.execute()
  errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
            if o.get("output_type") == "error"]
  assert not errors
  printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                    for o in c.get("outputs", []) if o.get("output_type") == "stream")
  if path.endswith("quickstart.ipynb"):
    # The plot shows learning: held-out sampled pass@1 (64 tasks per domain) rises.
    m = re.search(r"held-out sampled pass@1 \(mean over domains\): ([0-9.]+) -> ([0-9.]+)", printed)
    assert m, printed[-2000:]
    base, final = float(m.group(1)), float(m.group(2))
    assert final >= base + 0.05, (base, final)
    assert "PASS" in printed and "FAIL" in printed  # the verdicts shown
  assert not glob.glob(os.path.join(tmp, "rlpt-*")), os.listdir(tmp)
