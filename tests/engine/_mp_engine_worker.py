"""One process of tests/engine/test_engine_multiprocess.py (also the one-process baseline).

    python tests/engine/_mp_engine_worker.py OUT.json LOCAL_DEVICES [COORDINATOR NUM_PROCESSES PROCESS_ID]

An engine of 8 slots over every device of every process (slots on the data
axis) samples 20 prompts, a turn and a second turn after an observation; process 0
writes the tokens and log-probs.
"""

import json
import os
import sys
import types

out_path, local_devices = sys.argv[1:3]
os.environ["XLA_FLAGS"] = (os.environ.get("RLPT_TEST_COMPILE_FLAGS", "") +  # the suite's level
                           f" --xla_force_host_platform_device_count={local_devices}").strip()
os.environ["JAX_PLATFORMS"] = "cpu"
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from launch import multihost  # noqa: E402

if len(sys.argv) > 3:
  assert multihost.initialize(sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), "gloo")

import jax  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from rlpt.device import ProgramPool, RunContext, SampledModel, host_to_global  # noqa: E402
from rlpt.engine import Engine, EngineConfig  # noqa: E402
from rlpt.keys import run_key  # noqa: E402
from rlpt.models import ModelConfig, Transformer  # noqa: E402
from rlpt.sampling import SamplingParams  # noqa: E402
from rlpt.sharding import DEFAULT_RULES, SAMPLE_RULES, make_mesh, state_shardings  # noqa: E402

cfg = ModelConfig(vocab_size=40, d_model=32, num_layers=2, num_heads=4, num_kv_heads=2,
                  head_dim=8, mlp_dim=48)
graphdef, params = nnx.split(Transformer(cfg, nnx.Rngs(0)))
mesh = make_mesh({"data": -1})
shardings = state_shardings(params, mesh, SAMPLE_RULES)
params = host_to_global(jax.tree.map(np.asarray, params), shardings)
ctx = RunContext(mesh, DEFAULT_RULES, SAMPLE_RULES, 0, types.SimpleNamespace(pad_id=37),
                 ProgramPool())
engine = Engine(EngineConfig(slots=8, max_len=48, chunk_steps=4, prefill_len=8), ctx,
                SampledModel(cfg, graphdef, shardings), (39,))
rng = np.random.default_rng(2)
prompts = [[38] + rng.integers(0, 30, size=k).tolist() for k in rng.integers(0, 15, size=20)]
key = lambda i, t: np.asarray(jax.random.key_data(run_key(0, "rollout", 1, 0, i, t)))
sampling = SamplingParams(1.0)
for i, p in enumerate(prompts):
  engine.add(i, p, key(i, 0), 8)
turns = {}
while engine.running:
  for t in engine.step(params, sampling):
    turns.setdefault(t.seq, []).append((t.tokens.tolist(), t.logprobs.tolist()))
    if len(turns[t.seq]) == 1:
      engine.extend(t.seq, [1, 2, 3], key(t.seq, 1), 8)
    else:
      engine.finish(t.seq)
if jax.process_index() == 0:
  with open(out_path, "w") as f:
    json.dump({"turns": {str(k): v for k, v in turns.items()}, "devices": jax.device_count(),
               "processes": jax.process_count()}, f)
