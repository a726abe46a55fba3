"""TensorBoard tags: per-domain metrics grouped by family, the rest by kind;
the event file holds what was written."""

import os
import struct

from rlpt.metrics.writer import MetricsWriter, tensorboard_tag


def test_per_domain_metrics_are_grouped_by_family():
  assert tensorboard_tag("train", "success/rlpt/rg-ab-easy-v0") == "train.rg/success/ab-easy-v0"
  assert (tensorboard_tag("eval", "sampled_success/rlpt/terminal-rename-easy-v0")
          == "eval.terminal/sampled_success/rename-easy-v0")
  assert (tensorboard_tag("train", "env_latency_p50/rlpt/code-linear-easy-v0")
          == "train.code/env_latency_p50/linear-easy-v0")
  # Aggregates and ids outside rlpt's scheme keep kind/key.
  assert tensorboard_tag("train", "family_success/rg") == "train/family_success/rg"
  assert tensorboard_tag("train", "success/mean") == "train/success/mean"
  assert tensorboard_tag("train", "success/CartPole-v1") == "train/success/CartPole-v1"
  assert tensorboard_tag("train", "async/staleness_share/0") == "train/async/staleness_share/0"


def _scalars(folder):
  """{tag: value} of an event file, read as TFRecords of Event protos."""
  from tensorboardX.proto import event_pb2
  (name,) = os.listdir(folder)
  out = {}
  with open(os.path.join(folder, name), "rb") as f:
    while header := f.read(12):
      (n,) = struct.unpack("<Q", header[:8])
      event = event_pb2.Event.FromString(f.read(n))
      f.read(4)
      for v in event.summary.value:
        out[v.tag] = v.simple_value
  return out


def test_event_file_holds_the_grouped_tags(tmp_path):
  w = MetricsWriter(str(tmp_path))
  w.write(1, "train", {"success/rlpt/rg-ab-easy-v0": 0.5, "success/mean": 0.25})
  w.close()
  assert _scalars(tmp_path / "tensorboard") == {"train.rg/success/ab-easy-v0": 0.5,
                                                "train/success/mean": 0.25}
