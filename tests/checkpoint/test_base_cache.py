"""Runs that share a base cache build each base once (rlpt.pretrain)."""

import os
import threading
import time
import types

from rlpt import pretrain as pretrain_module


def test_two_runs_sharing_a_cache_pretrain_the_base_once(tmp_path, monkeypatch):
  built = []

  def fake_pretrain(cfg, workdir, progress=True):
    built.append(workdir)
    time.sleep(0.3)  # long enough that the second run arrives while it trains
    os.makedirs(os.path.join(workdir, "model"))
    with open(os.path.join(workdir, "model", "model.json"), "w") as f:
      f.write("{}")

  monkeypatch.setattr(pretrain_module, "pretrain", fake_pretrain)
  workdir = str(tmp_path / "cache" / "base-abc")
  path = os.path.join(workdir, "model")
  runs = [threading.Thread(target=pretrain_module._build_cached_base,
                           args=(types.SimpleNamespace(steps=1), workdir, path, None, False)) for _ in range(3)]
  for r in runs:
    r.start()
  for r in runs:
    r.join()
  assert built == [workdir]
  assert os.path.exists(os.path.join(path, "model.json"))
