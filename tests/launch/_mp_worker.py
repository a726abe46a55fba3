"""One process of tests/launch/test_multiprocess.py (also the single-process baseline).

    python tests/launch/_mp_worker.py OUT.json WORKDIR CHECKPOINT LOCAL_DEVICES \
        [COORDINATOR NUM_PROCESSES PROCESS_ID]

Runs two RL steps of the grpo_default smoke config on mesh data=2 x fsdp=2,
exports the policy (to OUT's folder, export_<processes>p), then one update on a fixed synthetic batch with non-zero advantages (the
smoke base earns no reward, so its own updates are near zero), and process 0
writes the per-step metrics and a parameter checksum to OUT.json.
"""

import json
import os
import sys

out_path, workdir, checkpoint, local_devices = sys.argv[1:5]
os.environ["XLA_FLAGS"] = (os.environ.get("RLPT_TEST_COMPILE_FLAGS", "") +  # the suite's level
                           f" --xla_force_host_platform_device_count={local_devices}").strip()
os.environ["JAX_PLATFORMS"] = "cpu"
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from launch import multihost  # noqa: E402

if len(sys.argv) > 5:
  coordinator, nproc, pid = sys.argv[5], int(sys.argv[6]), int(sys.argv[7])
  assert multihost.initialize(coordinator, nproc, pid, "gloo")

import jax  # noqa: E402
import numpy as np  # noqa: E402

from experiments import grpo_default  # noqa: E402
from rlpt.config import TrainConfig, from_config_dict  # noqa: E402
from rlpt.device import to_host  # noqa: E402
from rlpt.metrics import WALL_CLOCK_PREFIXES  # noqa: E402
from rlpt.steps import LossCounts, RLBatch  # noqa: E402
from rlpt.trainer import Trainer  # noqa: E402

cd = grpo_default.get_config("smoke")
cd.base.checkpoint = checkpoint
cd.progress = False
cd.env.workers = 1
cd.domains.ids = ["rlpt/math-add-easy-v0", "rlpt/strings-reverse-easy-v0"]
cd.mesh.update(data=2, fsdp=2)
cfg = from_config_dict(TrainConfig, cd)
trainer = Trainer(cfg, workdir)
steps = []
for _ in range(2):
  m = trainer.train_step()
  steps.append({k: v for k, v in m.items() if not k.startswith(WALL_CLOCK_PREFIXES)})

# Every process exports to the same folder (a filesystem they share); orbax writes once.
export_dir = os.path.join(os.path.dirname(out_path), f"export_{jax.process_count()}p")
trainer.export(export_dir)

rng = np.random.default_rng(0)
b, l = cfg.rollout.batch_size, 24
synthetic = RLBatch(rng.integers(3, 259, (b, l)).astype(np.int32),
                    (rng.random((b, l - 1)) < 0.7).astype(np.float32),
                    -rng.random((b, l - 1)).astype(np.float32) * 3,
                    -rng.random((b, l - 1)).astype(np.float32) * 3,
                    rng.standard_normal((b, l - 1)).astype(np.float32))
n = np.float32(synthetic.loss_mask.sum())
m = trainer.actor.train_on(synthetic, LossCounts(n, np.float32(b)), 0.05)
params = to_host(trainer.actor.state.params)
checksum = float(sum(np.abs(x).astype(np.float64).sum() for x in jax.tree.leaves(params)))
result = {"steps": steps, "synthetic": {k: float(v) for k, v in to_host(m).items()},
          "param_checksum": checksum, "process_count": jax.process_count(),
          "devices": jax.device_count()}
trainer.close()
if jax.process_index() == 0:
  with open(out_path, "w") as f:
    json.dump(result, f)
