"""RolloutBatch: every field padded, concatenated and selected by its declared kind."""

import numpy as np
import pytest

from rlpt.rollout.batch import RolloutBatch, merge_parts


def test_rollout_batch_pads_concats_and_takes_every_field_by_kind():
  def batch(rows, width, tag):
    r = np.arange(rows, dtype=np.float32) + tag
    return RolloutBatch(tokens=np.full((rows, width), 7, np.int32) + tag,
                        loss_mask=np.ones((rows, width - 1), np.float32),
                        old_logp=-np.ones((rows, width - 1), np.float32),
                        rewards=r, valid=np.ones(rows, np.float32), lengths=r.astype(np.int32),
                        stopped=np.ones(rows, bool), records=tuple({"row": tag + i} for i in range(rows)))

  a, b = batch(2, 4, 0), batch(3, 6, 10)
  cat = RolloutBatch.concat([a, b], pad_id=99)
  assert cat.tokens.shape == (5, 6) and (cat.tokens[:2, 4:] == 99).all()
  assert (cat.loss_mask[:2, 3:] == 0).all() and (cat.old_logp[:2, 3:] == 0).all()
  assert cat.rewards.tolist() == [0, 1, 10, 11, 12] and [r["row"] for r in cat.records] == [0, 1, 10, 11, 12]
  picked = cat.take([4, 0])
  assert picked.rewards.tolist() == [12, 0] and [r["row"] for r in picked.records] == [12, 0]
  assert picked.tokens[1, 0] == 7 and picked.version is None
  versioned = cat.with_version(3)
  assert versioned.take([1]).version.tolist() == [3]
  with pytest.raises(ValueError, match="'version' is set in some batches"):
    RolloutBatch.concat([versioned, a], pad_id=0)
  with pytest.raises(ValueError, match="rewards has 1 rows, tokens has 2"):
    a.replace(rewards=np.zeros(1))
  # Parts played separately come back in prompt order (group size 1 here).
  merged, timings = merge_parts([([1, 3], a, {"time/generate": 1.0, "rollout/turns": 1.0}),
                                 ([0, 2, 4], b, {"time/generate": 2.0, "rollout/turns": 2.0})],
                                group_size=1, pad_id=99)
  assert merged.rewards.tolist() == [10, 0, 11, 1, 12]
  assert timings["time/generate"] == 3.0 and timings["rollout/turns"] == pytest.approx(1.6)
