"""The engine benchmarks' model: the default config at ``width`` times its width, random init."""

import types

import numpy as np

PAD, BOS = 256, 257


def random_model(width: int):
  """(model config, graphdef, params, SampledModel, a RunContext factory) on all devices."""
  from flax import nnx

  from rlpt.device import ProgramPool, RunContext, SampledModel
  from rlpt.models import ModelConfig, Transformer
  from rlpt.sharding import DEFAULT_RULES, SAMPLE_RULES, make_mesh, state_shardings
  cfg = ModelConfig(d_model=128 * width, num_heads=4 * width, num_kv_heads=2 * width,
                    mlp_dim=384 * width)
  graphdef, params = nnx.split(Transformer(cfg, nnx.Rngs(0)))
  mesh = make_mesh({"data": -1})
  model = SampledModel(cfg, graphdef, state_shardings(params, mesh, SAMPLE_RULES))
  ctx = lambda: RunContext(mesh, DEFAULT_RULES, SAMPLE_RULES, 0, types.SimpleNamespace(pad_id=PAD),
                           ProgramPool())
  return cfg, graphdef, params, model, ctx


def turn_keys(n, purpose=0):
  """Key data of sequences 0..n-1 (rollout keys of run ``purpose``)."""
  import jax

  from rlpt.keys import run_key
  return np.stack([np.asarray(jax.random.key_data(run_key(purpose, "rollout", 1, 0, i)))
                   for i in range(n)])


def stop_ids(engine_fn, params, prompts, keys, mean_len):
  """Tokens whose summed frequency in a stop-free probe is about 1 / mean_len,
  taken in a fixed random order (many rare tokens rather than one frequent
  one: a random model's frequent tokens cluster in a few sequences)."""
  probe = engine_fn(())
  turns = probe.generate(params, prompts[:64], keys[:64], 64)
  counts = np.bincount(np.concatenate([t.tokens for t in turns]), minlength=256)[:256]
  freq = counts / counts.sum()
  stops, mass = [], 0.0
  for tok in np.random.default_rng(0).permutation(256):
    if mass + freq[tok] > 1.0 / mean_len * 1.15 or freq[tok] > 0.25 / mean_len:
      continue
    stops.append(int(tok))
    mass += freq[tok]
    if mass >= 1.0 / mean_len * 0.9:
      break
  return tuple(stops), mass
