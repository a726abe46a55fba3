"""The continuous-batching engine against the static sampler and the trainer.

Tolerances: fp32 throughout; the engine's cached decode and the trainer's full
forward differ only by summation order, so 2e-5 absolute on log-probs (as in
tests/sampling/test_sampler.py). Tokens are compared exactly.
"""

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlpt.device import MAX_PROGRAMS, ProgramPool, RunContext, SampledModel
from rlpt.engine import Engine, EngineConfig
from rlpt.keys import run_key
from rlpt.models import ModelConfig, Transformer
from rlpt.rollout import build_sequences
from rlpt.sampling import Sampler, SamplingParams
from rlpt.sharding import DEFAULT_RULES, SAMPLE_RULES, make_mesh, state_shardings
from rlpt.steps import sequence_logprobs

CFG = ModelConfig(vocab_size=40, d_model=32, num_layers=2, num_heads=4, num_kv_heads=2,
                  head_dim=8, mlp_dim=48)
PAD, BOS, EOS = 37, 38, 39
ATOL = 2e-5


@pytest.fixture(scope="module")
def model():
  return nnx.split(Transformer(CFG, nnx.Rngs(0)))


def _engine(model, sampling=SamplingParams(1.0), stop=(EOS,), devices=None, **kw):
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


def _prompts(n, seed, longest=15):
  rng = np.random.default_rng(seed)
  return [[BOS] + rng.integers(0, 30, size=k).tolist() for k in rng.integers(0, longest, size=n)]


def _keys(n, turn=0):
  return np.stack([np.asarray(jax.random.key_data(run_key(0, "rollout", 1, 0, i, turn)))
                   for i in range(n)])


def test_greedy_equals_the_static_sampler(model):
  graphdef, params = model
  engine, ctx = _engine(model, SamplingParams(0.0))
  prompts = _prompts(20, seed=0)      # more sequences than slots: slots are reused
  turns = engine.generate(params, prompts, _keys(20), 10)
  ids = np.full((20, 16), PAD, np.int32)
  for i, p in enumerate(prompts):
    ids[i, :len(p)] = p
  out = Sampler(graphdef, CFG, 16, 10, PAD, (EOS,)).generate(
      params, ids, np.array([len(p) for p in prompts]), jax.random.key(0), SamplingParams(0.0))
  for i, turn in enumerate(turns):
    n = int(out.lengths[i])
    np.testing.assert_array_equal(turn.tokens, np.asarray(out.tokens[i, :n]))
    np.testing.assert_allclose(turn.logprobs, np.asarray(out.logprobs[i, :n]), atol=ATOL, rtol=0)
    assert turn.stopped == (turn.tokens[-1] == EOS)
  # The store's initialiser, prefill and a decode program per (width, bound)
  # used (8 slots over 8 devices: one width), whatever the lengths.
  assert engine.programs.widths == (8,) and engine.programs.bounds == (56, 32, 16)
  assert len(ctx.programs) <= 1 + 2 * 3 + 3


@pytest.mark.parametrize("sampling", [
    SamplingParams(1.0),
    SamplingParams(0.7, top_p=0.9),
    SamplingParams(1.3, top_k=7),
    SamplingParams(0.8, top_k=10, top_p=0.8),
])
def test_logprobs_equal_the_trainers(model, sampling):
  graphdef, params = model
  engine, _ = _engine(model, sampling)
  prompts = _prompts(12, seed=1)
  turns = engine.generate(params, prompts, _keys(12), 12)
  width = max(map(len, prompts))
  ids = np.full((12, width), PAD, np.int32)
  for i, p in enumerate(prompts):
    ids[i, :len(p)] = p
  tokens = np.full((12, 12), PAD, np.int32)
  logp = np.zeros((12, 12), np.float32)
  for i, t in enumerate(turns):
    tokens[i, :len(t.tokens)], logp[i, :len(t.tokens)] = t.tokens, t.logprobs
  n = np.array([len(t.tokens) for t in turns])
  seq = build_sequences(ids, np.array([len(p) for p in prompts]), tokens, n, logp, PAD)
  trainer = np.asarray(sequence_logprobs(graphdef, params, jnp.asarray(seq.tokens), sampling))
  mask = seq.loss_mask > 0
  assert mask.sum() == n.sum() > 0
  np.testing.assert_allclose(trainer[mask], seq.logp[mask], atol=ATOL, rtol=0)


def test_a_sequences_tokens_do_not_depend_on_its_neighbours(model):
  """Alone, among others in different orders (other slots), with other slot
  counts and chunk sizes: the same tokens (log-probs to fp32 rounding)."""
  _, params = model
  prompts, keys = _prompts(24, seed=2), _keys(24)
  alone = [_engine(model)[0].generate(params, [prompts[i]], keys[i:i + 1], 16)[0] for i in (0, 5)]
  runs = []
  for kw, order in (({}, range(24)), ({"slots": 16}, range(23, -1, -1)),
                    ({"chunk_steps": 7}, np.random.default_rng(0).permutation(24))):
    engine, _ = _engine(model, **kw)
    out = engine.generate(params, [prompts[i] for i in order], keys[list(order)], 16)
    runs.append({int(i): t for i, t in zip(order, out)})
  for run in runs:
    for j, i in enumerate((0, 5)):
      np.testing.assert_array_equal(run[i].tokens, alone[j].tokens)
    for i in range(24):
      np.testing.assert_array_equal(run[i].tokens, runs[0][i].tokens)
      np.testing.assert_allclose(run[i].logprobs, runs[0][i].logprobs, atol=ATOL, rtol=0)


def test_narrow_decode_widths_sample_the_same_tokens(model):
  """On one device the widths are 8, 4, 2, 1 slots: a draining engine decodes
  its last sequences in narrower programs, with the same tokens."""
  _, params = model
  prompts, keys = _prompts(20, seed=5), _keys(20)
  wide, _ = _engine(model)
  narrow, ctx = _engine(model, devices=jax.devices()[:1])
  assert narrow.programs.widths == (8, 4, 2, 1)
  want = wide.generate(params, prompts, keys, 16)
  got = narrow.generate(params, prompts, keys, 16)
  for a, b in zip(got, want):
    np.testing.assert_array_equal(a.tokens, b.tokens)
    np.testing.assert_allclose(a.logprobs, b.logprobs, atol=ATOL, rtol=0)
  assert narrow.stats["slot_steps"] < 8 * narrow.stats["decode_chunks"] * 4
  assert len(ctx.programs) <= 1 + 2 * 3 + 4 * 3


def _episodes(engine, params, prompts, turns, obs_len=3, latency=0):
  """Plays ``turns`` turns of each prompt; observation t of episode i is fixed
  and arrives ``latency`` engine steps after its turn ended."""
  n = len(prompts)
  for i, p in enumerate(prompts):
    engine.add(i, p, _keys(n, 0)[i], 6)
  done, sampled, convs, arriving = {i: 0 for i in range(n)}, {i: [] for i in range(n)}, {}, []
  while engine.running or arriving:
    for t in engine.step(params):
      sampled[t.seq].append(t.tokens)
      done[t.seq] += 1
      if done[t.seq] == turns:
        convs[t.seq] = engine.finish(t.seq)
      else:
        obs = [(t.seq * 7 + done[t.seq] * 3 + k) % 30 for k in range(obs_len)]
        arriving.append([latency, t.seq, obs, _keys(n, done[t.seq])[t.seq]])
    for a in [a for a in arriving if a[0] == 0]:
      arriving.remove(a)
      engine.extend(a[1], a[2], a[3], 6)
    for a in arriving:
      a[0] -= 1
  return sampled, convs


def test_multi_turn_caches_only_the_new_tokens(model):
  _, params = model
  prompts = _prompts(6, seed=3, longest=8)
  engine, _ = _engine(model, slots=8)
  sampled, convs = _episodes(engine, params, prompts, turns=3)
  # Prefill feeds each prompt and observation token once (the last of each
  # enters as the pending token of a decode step; a chunk equal to another
  # sequence's in the same call is copied): with the sampled tokens, the
  # conversation less its final token, never cached.
  assert engine.stats["reprefill_tokens"] == 0
  assert engine.stats["prefill_tokens"] + engine.stats["shared_prefill_tokens"] + sum(
      sum(len(t) for t in s) for s in sampled.values()) == sum(len(c) - 1 for c in convs.values())
  # The same turns as sampling each later turn from the whole conversation.
  for i in range(6):
    conv = convs[i]
    cut = len(prompts[i]) + len(sampled[i][0]) + 3
    fresh, _ = _engine(model)
    again = fresh.generate(params, [conv[:cut]], _keys(6, 1)[i:i + 1], 6)[0]
    np.testing.assert_array_equal(again.tokens, sampled[i][1])


def test_scarce_slots_release_parked_episodes_and_replay_them(model):
  _, params = model
  prompts = _prompts(16, seed=4, longest=8)
  roomy, _ = _engine(model, slots=16)
  want, _ = _episodes(roomy, params, prompts, turns=3)
  tight, ctx = _engine(model, slots=8)
  got, _ = _episodes(tight, params, prompts, turns=3, latency=3)
  assert tight.stats["released"] > 0 and tight.stats["reprefill_tokens"] > 0
  for i in range(16):
    for a, b in zip(got[i], want[i]):
      np.testing.assert_array_equal(a, b)
  assert len(ctx.programs) <= 1 + 2 * 3 + 3


def test_turns_record_the_policy_version_of_each_token(model):
  graphdef, params = model
  engine, _ = _engine(model, chunk_steps=2)
  engine.add("a", [BOS, 1, 2], _keys(1)[0], 5)
  seen = []
  for version in range(10):
    seen += engine.step(params, version)
    if seen:
      break
  turn, = seen
  assert list(turn.versions) == [i // 2 for i in range(len(turn.tokens))]


def test_new_weights_recompute_every_held_cache(model):
  """Weights change after two rounds: sequences decoding, prefilling and parked
  then hold caches of the old weights, which are recomputed, so every token's
  log-prob is the trainer's under the weights of the version it records."""
  graphdef, params = model
  weights = {0: params, 1: jax.tree.map(lambda x: x * 1.5, params)}
  engine, _ = _engine(model, chunk_steps=2)        # 8 slots, 10 sequences: some wait
  n = 10
  prompts = _prompts(n, seed=4)
  for i, p in enumerate(prompts):
    engine.add(i, p, _keys(n)[i], 6)
  convs = {i: list(p) for i, p in enumerate(prompts)}
  sampled = {i: [] for i in range(n)}    # (position, log-prob, version) of each token
  turns, parked, rnd = dict.fromkeys(range(n), 0), [], 0
  while engine.running or parked:
    for i in parked:                     # extended a round after their turn ended
      engine.extend(i, [3, 4], _keys(n, 1)[i], 6)
      convs[i] += [3, 4]
    parked = []
    version = int(rnd >= 2)
    for turn in engine.step(weights[version], version):
      i = turn.seq
      for t, lp, v in zip(turn.tokens, turn.logprobs, turn.versions):
        sampled[i].append((len(convs[i]), float(lp), int(v)))
        convs[i].append(int(t))
      turns[i] += 1
      if turns[i] == 2:
        engine.finish(i)
      else:
        parked.append(i)
    rnd += 1
  assert engine.stats["refresh_tokens"] > 0
  width = max(map(len, convs.values()))
  ids = np.full((n, width), PAD, np.int32)
  for i, c in convs.items():
    ids[i, :len(c)] = c
  ref = {v: np.asarray(sequence_logprobs(graphdef, w, jnp.asarray(ids), SamplingParams(1.0)))
         for v, w in weights.items()}
  versions = [v for i in sampled for _, _, v in sampled[i]]
  assert 0 in versions and 1 in versions
  for i in sampled:
    for pos, lp, v in sampled[i]:
      np.testing.assert_allclose(lp, ref[v][i, pos - 1], atol=ATOL, rtol=0, err_msg=f"{i} {pos}")


def test_mistakes_are_named(model):
  _, params = model
  engine, _ = _engine(model)
  engine.add("a", [BOS, 1], _keys(1)[0], 4)
  with pytest.raises(ValueError, match="sequence 'a' is already in the engine"):
    engine.add("a", [BOS], _keys(1)[0], 4)
  with pytest.raises(ValueError, match="sequence 'b' has 48 tokens; engine.max_len 48"):
    engine.add("b", [BOS] * 48, _keys(1)[0], 4)
  with pytest.raises(ValueError, match="cannot extend sequence 'a': it is not parked"):
    engine.extend("a", [1], _keys(1)[0], 4)
  with pytest.raises(ValueError, match="cannot extend sequence 'z': it is unknown"):
    engine.extend("z", [1], _keys(1)[0], 4)
  with pytest.raises(ValueError, match="engine.prefill_rows must be in"):
    EngineConfig(slots=4, prefill_rows=5)


def test_warm_up_compiles_every_program_and_changes_nothing(model):
  _, params = model
  prompts, keys = _prompts(12, seed=6), _keys(12)
  want = _engine(model, devices=jax.devices()[:1])[0].generate(params, prompts, keys, 12)
  engine, ctx = _engine(model, devices=jax.devices()[:1])
  engine.warm_up(params)
  compiled = len(ctx.programs)
  w, b = len(engine.programs.widths), len(engine.programs.bounds)
  assert compiled == 1 + 2 * b + w * b
  # The engine's fixed set is reserved in the run's bound, not taken from it.
  assert ctx.programs.capacity == MAX_PROGRAMS + (1 + 2 * b) + (1 + w * b)
  assert ctx.programs.evictions == 0
  got = engine.generate(params, prompts, keys, 12)
  assert len(ctx.programs) == compiled
  for a, b in zip(got, want):
    np.testing.assert_array_equal(a.tokens, b.tokens)


def test_the_engine_refuses_what_it_does_not_run_by_name():
  from rlpt.config import ConfigError, TrainConfig, from_config_dict
  with pytest.raises(ConfigError, match="engine.enabled does not run speculative.gamma, "
                                        "rollout.weights_int8 yet"):
    from_config_dict(TrainConfig, {"engine": {"enabled": True}, "speculative": {"gamma": 4},
                                   "rollout": {"weights_int8": True}})
  with pytest.raises(ConfigError, match="engine.slots must be >= 1, got 0"):
    from_config_dict(TrainConfig, {"engine": {"slots": 0}})


def test_a_groups_prompt_is_prefilled_once_with_the_same_tokens(model):
  """Four samples of each of three prompts (GRPO groups): each prompt's tokens
  are computed once and copied to its group's other slots; every sample draws
  the tokens it draws in an engine of its own."""
  _, params = model
  prompts = [p for p in _prompts(3, seed=7, longest=20) for _ in range(4)]
  keys = _keys(12)
  engine, _ = _engine(model, prefill_len=8)
  got = engine.generate(params, prompts, keys, 10)
  shared, computed = engine.stats["shared_prefill_tokens"], engine.stats["prefill_tokens"]
  assert shared == 3 * computed and computed == sum(len(p) - 1 for p in prompts[::4])
  for i in (0, 5, 11):
    alone = _engine(model, prefill_len=8)[0].generate(params, [prompts[i]], keys[i:i + 1], 10)[0]
    np.testing.assert_array_equal(got[i].tokens, alone.tokens)
    np.testing.assert_allclose(got[i].logprobs, alone.logprobs, atol=ATOL, rtol=0)
