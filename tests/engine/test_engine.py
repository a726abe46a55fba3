"""The continuous-batching engine against the static sampler and the trainer.

Tolerances: fp32 throughout; the engine's cached decode and the trainer's full
forward differ only by summation order, so 2e-5 absolute on log-probs (as in
tests/sampling/test_sampler.py). Tokens are compared exactly.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlpt.device import MAX_PROGRAMS
from rlpt.engine import EngineConfig
from rlpt.rollout import build_sequences
from rlpt.sampling import Sampler, SamplingParams
from rlpt.steps import sequence_logprobs
from tests.engine._util import (ATOL, BOS, CFG, EOS, PAD, engine_for, make_model, play_episodes,
                                random_prompts, turn_keys)


@pytest.fixture(scope="module")
def model():
  return make_model()


def test_greedy_equals_the_static_sampler(model):
  graphdef, params = model
  engine, ctx = engine_for(model, SamplingParams(0.0))
  prompts = random_prompts(20, seed=0)      # more sequences than slots: slots are reused
  turns = engine.generate(params, prompts, turn_keys(20), 10)
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
  assert len(ctx.programs) <= 2 + 2 * 3 + 3


SHARED_PROMPTS = dict(prompts=3, prompt_len=6)


@pytest.mark.parametrize("sampling,store", [
    (SamplingParams(1.0), {}),
    (SamplingParams(0.7, top_p=0.9), {}),
    (SamplingParams(1.3, top_k=7), {}),
    (SamplingParams(0.8, top_k=10, top_p=0.8), {}),
    (SamplingParams(1.0), SHARED_PROMPTS),
    (SamplingParams(0.8, top_k=10, top_p=0.8), SHARED_PROMPTS),
])
def test_logprobs_equal_the_trainers(model, sampling, store):
  graphdef, params = model
  engine, _ = engine_for(model, sampling, **store)
  prompts = random_prompts(12, seed=1)
  turns = engine.generate(params, prompts, turn_keys(12), 12)
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
  prompts, keys = random_prompts(24, seed=2), turn_keys(24)
  alone = [engine_for(model)[0].generate(params, [prompts[i]], keys[i:i + 1], 16)[0] for i in (0, 5)]
  runs = []
  for kw, order in (({}, range(24)), ({"slots": 16}, range(23, -1, -1)),
                    ({"chunk_steps": 7}, np.random.default_rng(0).permutation(24))):
    engine, _ = engine_for(model, **kw)
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
  prompts, keys = random_prompts(20, seed=5), turn_keys(20)
  wide, _ = engine_for(model)
  narrow, ctx = engine_for(model, devices=jax.devices()[:1])
  assert narrow.programs.widths == (8, 4, 2, 1)
  want = wide.generate(params, prompts, keys, 16)
  got = narrow.generate(params, prompts, keys, 16)
  for a, b in zip(got, want):
    np.testing.assert_array_equal(a.tokens, b.tokens)
    np.testing.assert_allclose(a.logprobs, b.logprobs, atol=ATOL, rtol=0)
  assert narrow.stats["slot_steps"] < 8 * narrow.stats["decode_chunks"] * 4
  assert len(ctx.programs) <= 2 + 2 * 3 + 4 * 3


def test_multi_turn_caches_only_the_new_tokens(model):
  _, params = model
  prompts = random_prompts(6, seed=3, longest=8)
  engine, _ = engine_for(model, slots=8)
  sampled, convs = play_episodes(engine, params, prompts, turns=3)
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
    fresh, _ = engine_for(model)
    again = fresh.generate(params, [conv[:cut]], turn_keys(6, 1)[i:i + 1], 6)[0]
    np.testing.assert_array_equal(again.tokens, sampled[i][1])


def test_scarce_slots_release_parked_episodes_and_replay_them(model):
  _, params = model
  prompts = random_prompts(16, seed=4, longest=8)
  roomy, _ = engine_for(model, slots=16)
  want, _ = play_episodes(roomy, params, prompts, turns=3)
  tight, ctx = engine_for(model, slots=8)
  got, _ = play_episodes(tight, params, prompts, turns=3, latency=3)
  assert tight.stats["released"] > 0 and tight.stats["reprefill_tokens"] > 0
  for i in range(16):
    for a, b in zip(got[i], want[i]):
      np.testing.assert_array_equal(a, b)
  assert len(ctx.programs) <= 2 + 2 * 3 + 3


def test_turns_record_the_policy_version_of_each_token(model):
  graphdef, params = model
  engine, _ = engine_for(model, chunk_steps=2)
  engine.add("a", [BOS, 1, 2], turn_keys(1)[0], 5)
  seen = []
  for version in range(10):
    seen += engine.step(params, version)
    if seen:
      break
  turn, = seen
  assert list(turn.versions) == [i // 2 for i in range(len(turn.tokens))]


@pytest.mark.parametrize("store", [{}, SHARED_PROMPTS])
def test_new_weights_recompute_every_held_cache(model, store):
  """Weights change after two rounds: sequences decoding, prefilling and parked
  (and shared prompt rows) then hold caches of the old weights, which are
  recomputed, so every token's log-prob is the trainer's under the weights of
  the version it records."""
  graphdef, params = model
  weights = {0: params, 1: jax.tree.map(lambda x: x * 1.5, params)}
  engine, _ = engine_for(model, chunk_steps=2, **store)   # 8 slots, 10 sequences: some wait
  n = 10
  prompts = random_prompts(n, seed=4)
  for i, p in enumerate(prompts):
    engine.add(i, p, turn_keys(n)[i], 6)
  convs = {i: list(p) for i, p in enumerate(prompts)}
  sampled = {i: [] for i in range(n)}    # (position, log-prob, version) of each token
  turns, parked, rnd = dict.fromkeys(range(n), 0), [], 0
  while engine.running or parked:
    for i in parked:                     # extended a round after their turn ended
      engine.extend(i, [3, 4], turn_keys(n, 1)[i], 6)
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
  engine, _ = engine_for(model)
  engine.add("a", [BOS, 1], turn_keys(1)[0], 4)
  with pytest.raises(ValueError, match="sequence 'a' is already in the engine"):
    engine.add("a", [BOS], turn_keys(1)[0], 4)
  with pytest.raises(ValueError, match="sequence 'b' has 48 tokens; engine.max_len 48"):
    engine.add("b", [BOS] * 48, turn_keys(1)[0], 4)
  with pytest.raises(ValueError, match="cannot extend sequence 'a': it is not parked"):
    engine.extend("a", [1], turn_keys(1)[0], 4)
  with pytest.raises(ValueError, match="cannot extend sequence 'z': it is unknown"):
    engine.extend("z", [1], turn_keys(1)[0], 4)
  with pytest.raises(ValueError, match="engine.prefill_rows must be in"):
    EngineConfig(slots=4, prefill_rows=5)


def test_warm_up_compiles_every_program_and_changes_nothing(model):
  _, params = model
  prompts, keys = random_prompts(12, seed=6), turn_keys(12)
  want = engine_for(model, devices=jax.devices()[:1])[0].generate(params, prompts, keys, 12)
  engine, ctx = engine_for(model, devices=jax.devices()[:1])
  engine.warm_up(params)
  compiled = len(ctx.programs)
  w, b = len(engine.programs.widths), len(engine.programs.bounds)
  assert compiled == 2 + 2 * b + w * b
  # The engine's fixed set is reserved in the run's bound, not taken from it.
  assert ctx.programs.capacity == MAX_PROGRAMS + (2 + 2 * b) + (1 + w * b)
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
  with pytest.raises(ConfigError, match="engine.prompts=4 shares single-turn prompts: .* "
                                        "rollout.max_turns=3 turns may outgrow"):
    from_config_dict(TrainConfig, {"engine": {"enabled": True, "prompts": 4},
                                   "rollout": {"max_turns": 3}})
  with pytest.raises(ConfigError, match="engine.slots must be >= 1, got 0"):
    from_config_dict(TrainConfig, {"engine": {"slots": 0}})


def test_a_groups_prompt_is_prefilled_once_with_the_same_tokens(model):
  """Four samples of each of three prompts (GRPO groups): each prompt's tokens
  are computed once and copied to its group's other slots; every sample draws
  the tokens it draws in an engine of its own."""
  _, params = model
  prompts = [p for p in random_prompts(3, seed=7, longest=20) for _ in range(4)]
  keys = turn_keys(12)
  engine, _ = engine_for(model, prefill_len=8)
  got = engine.generate(params, prompts, keys, 10)
  shared, computed = engine.stats["shared_prefill_tokens"], engine.stats["prefill_tokens"]
  assert shared == 3 * computed and computed == sum(len(p) - 1 for p in prompts[::4])
  for i in (0, 5, 11):
    alone = engine_for(model, prefill_len=8)[0].generate(params, [prompts[i]], keys[i:i + 1], 10)[0]
    np.testing.assert_array_equal(got[i].tokens, alone.tokens)
    np.testing.assert_allclose(got[i].logprobs, alone.logprobs, atol=ATOL, rtol=0)


def test_positions_bounds_below_a_prefill_chunk_get_no_prefill_program(model):
  """A prefill call writes prefill_len positions, so the bounds below it have
  decoders but no prefill (warm-up compiles what exists; tokens unchanged)."""
  _, params = model
  engine, ctx = engine_for(model, devices=jax.devices()[:1], prefill_len=20)
  assert engine.programs.bounds == (68, 40, 24, 16)
  assert tuple(engine.programs.prefill) == tuple(engine.programs.copy) == (68, 40, 24)
  engine.warm_up(params)
  prompts, keys = random_prompts(10, seed=9, longest=30), turn_keys(10)
  got = engine.generate(params, prompts, keys, 12)
  for a, b in zip(got, engine_for(model)[0].generate(params, prompts, keys, 12), strict=True):
    np.testing.assert_array_equal(a.tokens, b.tokens)
  assert ctx.programs.evictions == 0


def test_a_round_fills_every_free_slot_in_full_prefill_calls(model):
  """Prefill calls go on while at least half a call's rows wait (a call costs
  the same however few rows it has), up to filling every slot once: 12
  one-chunk prompts over 8 slots, 2 rows a call: the first round makes 4
  calls and decodes all 8 slots, not just the half of them."""
  _, params = model
  engine, _ = engine_for(model, devices=jax.devices()[:1], prefill_rows=2)
  rng = np.random.default_rng(3)
  for i in range(12):
    engine.add(i, [BOS] + rng.integers(0, 30, size=5).tolist(), turn_keys(12)[i], 12)
  engine.step(params)
  assert engine.stats["prefill_calls"] == 4
  assert all(seq is not None for seq in engine._owner) and not engine._prefilling
  assert len(engine._waiting) == 4

def test_a_decode_chunk_splits_only_when_it_saves_more_than_a_calls_weights(model):
  """A chunk's plan: 7 rows near the start and 1 far on. A split pays the
  weights a second time; on a short cache that costs more than the positions
  it saves (one call), on a long one less (two calls)."""
  short, _ = engine_for(model, devices=jax.devices()[:1])
  long, _ = engine_for(model, devices=jax.devices()[:1], max_len=1024)
  assert short.programs.bounds == (56, 32, 16) and long.programs.bounds == (1032, 520, 264, 136)
  active, last = np.arange(8), np.array([5] * 7 + [40])
  [(rows, width, bound)] = short.programs.plan(active, last)
  assert (len(rows), width, bound) == (8, 8, 56)
  (low, w_low, b_low), (high, w_high, b_high) = long.programs.plan(active, np.array([5] * 7 + [600]))
  assert (low.tolist(), w_low, b_low) == (list(range(7)), 8, 136)
  assert (high.tolist(), w_high, b_high) == ([7], 1, 1032)


def test_fresh_prompts_are_packed_several_to_a_prefill_row(model):
  """Prompts of 3 tokens (2 to cache; the last is the first decode step's) in
  rows of 8: one call of 2 rows caches 8 prompts, filling all 8 slots, with
  the tokens an engine sampling one sequence at a time gives."""
  _, params = model
  rng = np.random.default_rng(4)
  prompts = [[BOS] + rng.integers(0, 30, size=2).tolist() for _ in range(12)]
  keys = turn_keys(12)
  engine, _ = engine_for(model, devices=jax.devices()[:1], prefill_rows=2)
  for i, p in enumerate(prompts):
    engine.add(i, p, keys[i], 10)
  engine.step(params)
  assert engine.stats["prefill_calls"] == 1 and engine.stats["prefill_tokens"] == 16
  assert all(seq is not None for seq in engine._owner)
  got = engine_for(model, prefill_rows=2)[0].generate(params, prompts, keys, 10)
  alone, _ = engine_for(model, devices=jax.devices()[:1], slots=1)
  for i, turn in enumerate(got):
    np.testing.assert_array_equal(turn.tokens, alone.generate(params, [prompts[i]], keys[i:i + 1],
                                                              10)[0].tokens)
