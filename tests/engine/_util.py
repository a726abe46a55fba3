"""What the engine tests share: a small model, an engine on it, prompts, keys, episodes."""

import types

import jax
import numpy as np
from flax import nnx

from rlpt.device import ProgramPool, RunContext, SampledModel
from rlpt.engine import Engine, EngineConfig
from rlpt.keys import run_key
from rlpt.models import ModelConfig, Transformer
from rlpt.sampling import SamplingParams
from rlpt.sharding import DEFAULT_RULES, SAMPLE_RULES, make_mesh, state_shardings

CFG = ModelConfig(vocab_size=40, d_model=32, num_layers=2, num_heads=4, num_kv_heads=2,
                  head_dim=8, mlp_dim=48)
PAD, BOS, EOS = 37, 38, 39
ATOL = 2e-5


def make_model():
  return nnx.split(Transformer(CFG, nnx.Rngs(0)))


def engine_for(model, sampling=SamplingParams(1.0), stop=(EOS,), devices=None, **kw):
  graphdef, params = model
  mesh = make_mesh({"data": -1}, devices)
  ctx = RunContext(mesh, DEFAULT_RULES, SAMPLE_RULES, 0, types.SimpleNamespace(pad_id=PAD),
                   ProgramPool())
  sampled = SampledModel(CFG, graphdef, state_shardings(params, mesh, SAMPLE_RULES))
  cfg = dict(slots=8, max_len=48, chunk_steps=4, prefill_len=8) | kw
  return _Bound(Engine(EngineConfig(**cfg), ctx, sampled, stop), sampling), ctx


class _Bound:
  """An engine with one sampling mode, as the tests use it."""

  def __init__(self, engine, sampling):
    self.engine, self.sampling = engine, sampling

  def __getattr__(self, name):
    return getattr(self.engine, name)

  def generate(self, params, *args, **kw):
    return self.engine.generate(params, self.sampling, *args, **kw)

  def step(self, params, version=0):
    return self.engine.step(params, self.sampling, version)

  def warm_up(self, params):
    return self.engine.warm_up(params, self.sampling)


def random_prompts(n, seed, longest=15):
  rng = np.random.default_rng(seed)
  return [[BOS] + rng.integers(0, 30, size=k).tolist() for k in rng.integers(0, longest, size=n)]


def turn_keys(n, turn=0):
  return np.stack([np.asarray(jax.random.key_data(run_key(0, "rollout", 1, 0, i, turn)))
                   for i in range(n)])


def play_episodes(engine, params, prompts, turns, obs_len=3, latency=0):
  """Plays ``turns`` turns of each prompt; observation t of episode i is fixed
  and arrives ``latency`` engine steps after its turn ended."""
  n = len(prompts)
  for i, p in enumerate(prompts):
    engine.add(i, p, turn_keys(n, 0)[i], 6)
  done, sampled, convs, arriving = {i: 0 for i in range(n)}, {i: [] for i in range(n)}, {}, []
  while engine.running or arriving:
    for t in engine.step(params):
      sampled[t.seq].append(t.tokens)
      done[t.seq] += 1
      if done[t.seq] == turns:
        convs[t.seq] = engine.finish(t.seq)
      else:
        obs = [(t.seq * 7 + done[t.seq] * 3 + k) % 30 for k in range(obs_len)]
        arriving.append([latency, t.seq, obs, turn_keys(n, done[t.seq])[t.seq]])
    for a in [a for a in arriving if a[0] == 0]:
      arriving.remove(a)
      engine.extend(a[1], a[2], a[3], 6)
    for a in arriving:
      a[0] -= 1
  return sampled, convs
