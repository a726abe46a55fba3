"""The engine benchmarks' model: the default config at ``width`` times its width, random init."""

import types

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


