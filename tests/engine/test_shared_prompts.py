"""Shared prompt rows in the engine (``engine.prompts``): sequences that begin
alike read one copy of their prompt's cache and sample exactly what they
sample with a private row each (tolerances as in test_engine.py)."""

import jax
import numpy as np
import pytest

from rlpt.device import MAX_PROGRAMS
from rlpt.engine import EngineConfig
from tests.engine._util import (ATOL, BOS, engine_for, make_model, play_episodes,
                                random_prompts, turn_keys)

SHARE = dict(prompts=2, prompt_len=16)      # 8 slots of max_len 48 (tests/engine/_util.py)


@pytest.fixture(scope="module")
def model():
  return make_model()


def _same(got, want):
  for a, b in zip(got, want, strict=True):
    np.testing.assert_array_equal(a.tokens, b.tokens)
    np.testing.assert_allclose(a.logprobs, b.logprobs, atol=ATOL, rtol=0)


def test_groups_read_one_prompt_row_and_sample_what_private_rows_do(model):
  """Five groups of four (prompts up to 20 tokens: longer ones keep their
  tail in the slot) and four single prompts over two prompt rows: sequences
  wait for a row, and every one samples what it samples without sharing."""
  _, params = model
  prompts = [p for p in random_prompts(5, seed=7, longest=20) for _ in range(4)]
  prompts += random_prompts(4, seed=8)
  keys = turn_keys(len(prompts))
  plain, _ = engine_for(model)
  shared, _ = engine_for(model, **SHARE)
  want = plain.generate(params, prompts, keys, 10)
  got = shared.generate(params, prompts, keys, 10)
  _same(got, want)
  # Each conversation token (less the last) is computed, shared or sampled, once.
  st = shared.stats
  assert st["prefill_tokens"] + st["shared_prefill_tokens"] + st["decoded_tokens"] == sum(
      len(p) - 1 + len(t.tokens) for p, t in zip(prompts, got))
  # A group's later samples find its prompt row: at least 3 of 4 share it.
  plen = [min(len(p) - 1, 16) for p in prompts[:20:4]]
  assert st["shared_prefill_tokens"] >= 3 * sum(plen)
  # The store: 8 slots of 48 - 16 + 8 positions and 2 prompt rows of 16 + 8,
  # against 8 slots of 48 + 8.
  per_position = plain.store_bytes / (8 * 56)
  assert shared.store_bytes == per_position * (8 * 40 + 2 * 24)


def test_a_later_call_finds_its_prompts_cached(model):
  _, params = model
  prompts = [[BOS, 3, 4, 5, 6, 7, 8, 9]] * 4
  engine, _ = engine_for(model, **SHARE)
  engine.generate(params, prompts, turn_keys(4), 6)
  computed = engine.stats["prefill_tokens"]
  assert computed == 7 and engine.stats["shared_prefill_tokens"] == 3 * 7
  again = engine.generate(params, prompts, turn_keys(4, turn=1), 6)
  assert engine.stats["prefill_tokens"] == computed
  assert engine.stats["shared_prefill_tokens"] == 7 * 7
  _same(again, engine_for(model)[0].generate(params, prompts, turn_keys(4, turn=1), 6))


def test_episodes_on_shared_rows_with_scarce_slots(model):
  """Three turns of 16 episodes (pairs share a prompt) in 8 slots: parked
  episodes are released and replay only what follows their prompt row."""
  _, params = model
  prompts = [p for p in random_prompts(8, seed=4, longest=8) for _ in range(2)]
  want, _ = play_episodes(engine_for(model, slots=16)[0], params, prompts, turns=3)
  tight, _ = engine_for(model, slots=8, prompts=4, prompt_len=6)
  got, _ = play_episodes(tight, params, prompts, turns=3, latency=3)
  assert tight.stats["released"] > 0 and tight.stats["reprefill_tokens"] > 0
  for i in range(16):
    for a, b in zip(got[i], want[i], strict=True):
      np.testing.assert_array_equal(a, b)


def test_warm_up_compiles_the_prompt_prefill_too(model):
  _, params = model
  engine, ctx = engine_for(model, devices=jax.devices()[:1], **SHARE)
  engine.warm_up(params)
  w, b = len(engine.programs.widths), len(engine.programs.bounds)
  assert len(ctx.programs) == 2 + 2 * b + 1 + w * b
  assert ctx.programs.capacity == MAX_PROGRAMS + (2 + 2 * b + 1) + (1 + w * b)
  prompts = random_prompts(10, seed=6)
  engine.generate(params, prompts, turn_keys(10), 8)
  assert len(ctx.programs) == 2 + 2 * b + 1 + w * b and ctx.programs.evictions == 0


def test_shared_prompt_mistakes_are_named(model):
  with pytest.raises(ValueError, match=r"engine.prompt_len must be in \[1, max_len=48\) with "
                                       "engine.prompts 2, got 48"):
    EngineConfig(slots=8, max_len=48, prompts=2, prompt_len=48)
  with pytest.raises(ValueError, match="engine.prompts and engine.prompt_len must be >= 0"):
    EngineConfig(prompts=-1)
  _, params = model
  engine, _ = engine_for(model, **SHARE)
  engine.add("a", [BOS, 1, 2, 3], turn_keys(1)[0], 2)
  turn, = engine.step(params)
  # Its prompt row holds 3 tokens, its slot the 48 - 16 = 32 after them.
  too_many = [5] * (36 - 4 - len(turn.tokens))
  with pytest.raises(ValueError, match=r"sequence 'a' has 36 tokens; engine.max_len 48 leaves no "
                                       r"room to sample \(a slot holds the 32 positions after the "
                                       r"3 its prompt row holds\)"):
    engine.extend("a", too_many, turn_keys(1)[0], 4)
  engine.extend("a", too_many[2:], turn_keys(1)[0], 4)     # refused, then still parked
  assert engine.running == 1
