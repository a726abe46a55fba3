"""RunCheckpointer: retention (latest N + best), save timings, fallback past a
corrupt latest step, and restoring onto another mesh, on small sharded trees."""

import logging
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from rlpt.checkpoint import NoRestorableCheckpoint, RunCheckpointer, abstract_like
from rlpt.sharding import make_mesh


def _arrays(mesh, scale=1.0):
  w = jax.device_put(jnp.arange(64.0).reshape(16, 4) * scale, NamedSharding(mesh, P("data")))
  b = jax.device_put(jnp.ones((4,), jnp.int32), NamedSharding(mesh, P()))
  return {"policy": {"w": w, "b": b}, "value": None}


def _save(ck, step, arrays, metric=None):
  trainer = {"step": step, "history": {"train": [{"x": float("nan")}]}, "big": 2**100}
  return ck.save(step, arrays, trainer, {"seed": 0}, None if metric is None else {"m": metric})


@pytest.mark.parametrize("mode", ["max", "min"])
def test_keeps_latest_and_best(tmp_path, mode):
  mesh = make_mesh({"data": 8})
  ck = RunCheckpointer(str(tmp_path), keep=2, best_metric="m", best_mode=mode, async_save=True)
  metrics = [0.1, 0.9, None, 0.05, 0.4, 0.5]
  for step, m in enumerate(metrics, 1):
    _save(ck, step, _arrays(mesh, step), m)
  ck.wait()
  best = 2 if mode == "max" else 4
  assert ck.best_step() == best
  assert ck.steps() == sorted({best, 5, 6})
  timings = ck.finished()
  assert [t.step for t in timings] == [1, 2, 3, 4, 5, 6]
  assert all(0 < t.blocked <= t.total for t in timings)
  ck.close()


def test_restore_onto_another_mesh(tmp_path):
  ck = RunCheckpointer(str(tmp_path), keep=1, async_save=False)
  saved = _arrays(make_mesh({"data": 8}), 3.0)
  _save(ck, 7, saved)
  target = _arrays(make_mesh({"data": 4, "fsdp": 2}))
  got = ck.restore(abstract_like(target))
  assert got.step == 7 and got.trainer["big"] == 2**100 and got.config == {"seed": 0}
  assert np.isnan(got.trainer["history"]["train"][0]["x"]) and got.arrays["value"] is None
  w = got.arrays["policy"]["w"]
  assert w.sharding == target["policy"]["w"].sharding and w.sharding.mesh.shape["data"] == 4
  np.testing.assert_array_equal(np.asarray(w), np.asarray(saved["policy"]["w"]))
  ck.close()


def _truncate_json(step_dir):
  path = os.path.join(step_dir, "trainer", "metadata")
  with open(path, "r+") as f:
    f.truncate(os.path.getsize(path) // 2)
  return "trainer"


def _delete_array_manifest(step_dir):
  # (A missing _METADATA is no error: the restore target gives the tree.)
  os.remove(os.path.join(step_dir, "arrays", "manifest.ocdbt"))
  return "arrays"


def _truncate_array_data(step_dir):
  # The OCDBT data files (a torn write), wherever the merge left them.
  for root, _, names in os.walk(os.path.join(step_dir, "arrays")):
    for n in names if os.path.basename(root) == "d" else ():
      with open(os.path.join(root, n), "r+") as f:
        f.truncate(os.path.getsize(os.path.join(root, n)) // 3)
  return "arrays"


# tensorstore may call back into orbax's closed event loop after a failed read.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("corrupt", [_truncate_json, _delete_array_manifest, _truncate_array_data])
def test_corrupt_latest_falls_back(tmp_path, caplog, corrupt):
  mesh = make_mesh({"data": 8})
  ck = RunCheckpointer(str(tmp_path), keep=3, async_save=True)
  for step in (2, 4):
    _save(ck, step, _arrays(mesh, step))
  ck.close()
  what = corrupt(str(tmp_path / "4"))

  ck = RunCheckpointer(str(tmp_path), keep=3, async_save=True)
  with caplog.at_level(logging.WARNING, logger="rlpt.checkpoint.manager"):
    got = ck.restore(abstract_like(_arrays(mesh)))
  assert got.step == 2
  np.testing.assert_array_equal(np.asarray(got.arrays["policy"]["w"]),
                                np.arange(64.0).reshape(16, 4) * 2)
  warning = next(r.getMessage() for r in caplog.records if "cannot be restored" in r.getMessage())
  assert "step 4" in warning and what in warning, warning
  # The bad step is set aside, so the resumed run can write step 4 again.
  assert ck.steps() == [2] and any(n.startswith("corrupt-4-") for n in os.listdir(tmp_path))
  _save(ck, 4, _arrays(mesh, 5.0))
  ck.wait()
  assert ck.restore(abstract_like(_arrays(mesh))).step == 4
  ck.close()


def test_nothing_readable_is_an_error(tmp_path):
  mesh = make_mesh({"data": 8})
  ck = RunCheckpointer(str(tmp_path), keep=1, async_save=False)
  assert ck.restore(abstract_like(_arrays(mesh))) is None
  _save(ck, 1, _arrays(mesh))
  ck.close()
  _truncate_json(str(tmp_path / "1"))
  ck = RunCheckpointer(str(tmp_path), keep=1, async_save=False)
  with pytest.raises(NoRestorableCheckpoint, match="step 1"):
    ck.restore(abstract_like(_arrays(mesh)))
  ck.close()


def test_resume_checks_refuse_another_reference_and_warn_on_changes(caplog):
  """A checkpoint trained against another reference model is refused (its KL
  term would change) naming both fingerprints; a changed config and an older
  key scheme resume with a warning naming what changed."""
  import logging

  from rlpt.checkpoint import Restored, check_resume
  saved = Restored(step=7, arrays=None, config={"rl": {"kl_beta": 0.01}, "seed": 0},
                   trainer={"reference": {"path": "/bases/a", "fingerprint": "aaaa"},
                            "keys": "v1"})
  with pytest.raises(ValueError, match=r"step 7 in /ck was trained against the reference "
                                       r"/bases/a \(fingerprint aaaa\).*/bases/b \(fingerprint bbbb\)"):
    check_resume(saved, "/ck", base_path="/bases/b", fingerprint="bbbb",
                 config=saved.config, keys="v1")
  with caplog.at_level(logging.WARNING, logger="rlpt.checkpoint.manager"):
    check_resume(saved, "/ck", base_path="/bases/a", fingerprint="aaaa",
                 config={"rl": {"kl_beta": 0.02}, "seed": 0}, keys="v2")
  text = caplog.text
  assert "config.rl.kl_beta: 0.01 -> 0.02" in text
  assert "random keys v1" in text and "v2" in text
  caplog.clear()
  with caplog.at_level(logging.WARNING, logger="rlpt.checkpoint.manager"):
    check_resume(saved, "/ck", base_path="/bases/a", fingerprint="aaaa", config=saved.config,
                 keys="v1")
  assert caplog.text == ""
