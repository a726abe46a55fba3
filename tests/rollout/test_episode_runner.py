"""EpisodeRunner: batch-synchronous and interleaved later turns over a real EnvPool.

The sampler is a deterministic stand-in (always the same wrong answer), so the
conversations must come out identical in both modes; only the grouping of
sampler calls may differ. One episode's environment is slow: interleaved, the
other episodes play all their turns while it is still on its first.
"""

import threading
import time

import gymnasium
import numpy as np

from rlpt.config import EnvConfig, RolloutConfig
from rlpt.data import Task
from rlpt.rollout import EnvPool
from rlpt.rollout.episodes import EpisodeRunner
from rlpt.tokenizers.byte import ByteTokenizer
from rlpt.tokenizers.prompts import PromptFormat

REVERSE = "rlpt/strings-reverse-easy-v0"
SLOW_SEED = 100
SLOW_S = 0.6


class SlowSeed(gymnasium.Wrapper):
  """Steps of the task seeded SLOW_SEED take SLOW_S seconds."""

  def reset(self, *, seed=None, options=None):
    self.slow = seed == SLOW_SEED
    return self.env.reset(seed=seed, options=options)

  def step(self, action):
    if self.slow:
      time.sleep(SLOW_S)
    return self.env.step(action)


class SlowSeedPool(EnvPool):
  """An EnvPool whose steps for one task seed take SLOW_S seconds."""

  def make_env(self, domain):
    return SlowSeed(super().make_env(domain))


class FixedSampler:
  """generate(): every row answers 'zz' then EOS; records each call's rows and time."""

  def __init__(self, tok):
    self.tok, self.calls, self.lock = tok, [], threading.Lock()

  def __call__(self, ids, lengths, grouped, key):
    n = len(ids)
    body = self.tok.encode("zz") + [self.tok.eos_id]
    comp = np.full((n, 8), self.tok.pad_id, np.int32)
    comp[:, :len(body)] = body
    logp = np.where(comp != self.tok.pad_id, -0.5, 0.0).astype(np.float32)
    with self.lock:
      self.calls.append((n, time.perf_counter(), tuple(int(x) for x in lengths)))
    return comp, logp, np.full((n,), len(body), np.int32)


def _play(interleave):
  tok = ByteTokenizer()
  pool = SlowSeedPool([REVERSE], EnvConfig(workers=4), max_attempts=3)
  try:
    rollout = RolloutConfig(max_prompt_len=512, max_new_tokens=8, interleave_turns=interleave)
    runner = EpisodeRunner(pool, PromptFormat(tok), rollout, stop_ids=[tok.eos_id], bucket=16)
    sampler = FixedSampler(tok)
    tasks = [Task(REVERSE, SLOW_SEED, "train")] + [Task(REVERSE, s, "train") for s in range(3)]
    t = time.perf_counter()
    out = runner.run(tasks, sampler)
    wall = time.perf_counter() - t
    # Every environment came back to the pool.
    assert pool.idle()[REVERSE] == len(tasks)
    return out, sampler.calls, wall
  finally:
    pool.close()


def test_interleaved_turns_do_not_wait_for_the_slow_environment():
  sync, sync_calls, _ = _play(interleave=False)
  inter, inter_calls, _ = _play(interleave=True)
  # Same conversations, grades and statistics either way.
  np.testing.assert_array_equal(inter.seq.tokens, sync.seq.tokens)
  np.testing.assert_array_equal(inter.seq.loss_mask, sync.seq.loss_mask)
  np.testing.assert_array_equal(inter.seq.logp, sync.seq.logp)
  assert [g.verdict for g in inter.final] == [g.verdict for g in sync.final]
  assert list(inter.stats["turns"]) == list(sync.stats["turns"]) == [3, 3, 3, 3]
  assert int(inter.stats["generated"].sum()) == int(sync.stats["generated"].sum()) == 4 * 3 * 3
  # Batch-synchronous: one sampler call per turn, every episode in it.
  assert [n for n, _, _ in sync_calls] == [4, 4, 4]
  # Interleaved: the three fast episodes take their turns 2 and 3 (6 rows)
  # before the slow one's first step returns; the slow one follows alone.
  start = inter_calls[0][1]
  early = [n for n, t, _ in inter_calls[1:] if t - start < SLOW_S * 0.9]
  late = [n for n, t, _ in inter_calls[1:] if t - start >= SLOW_S * 0.9]
  assert sum(early) == 6 and late == [1, 1], inter_calls
  assert inter.metrics["rollout/sampler_calls"] == len(inter_calls)


def test_batch_synchronous_later_turns_sample_only_running_episodes():
  out, calls, _ = _play(interleave=False)
  # Turn 2's contexts: prompt + answer + feedback, each longer than its prompt.
  first, second = calls[0][2], calls[1][2]
  assert all(b > a for a, b in zip(first, second))
  assert out.metrics["time/environments"] >= 3 * SLOW_S * 0.9


def test_row_buckets_halve_while_they_hold_the_rows_and_split_evenly():
  from rlpt.device import row_bucket
  assert [row_bucket(n, 32, 1) for n in (32, 17, 16, 9, 5, 3, 1)] == [32, 32, 16, 16, 8, 4, 1]
  # Eight batch shards: never below 8 rows.
  assert [row_bucket(n, 32, 8) for n in (32, 12, 3, 1)] == [32, 16, 8, 8]
  # A floor: never below an eighth of the batch.
  assert [row_bucket(n, 128, 1, smallest=16) for n in (100, 40, 9, 1)] == [128, 64, 16, 16]
  # A full size that does not halve evenly stays as it is.
  assert row_bucket(2, 12, 4) == 12 and row_bucket(2, 24, 4) == 12


def test_prompt_and_batch_widths_lie_on_the_ladder():
  """Prompts pad to a multiple of the bucket, then onto 2^k / 1.5 * 2^k (at most
  max_prompt_len); the episode batch's width is on the same ladder, at most
  max_prompt_len + max_new_tokens and never short of the longest conversation."""
  from rlpt.rollout.batch import bucket_length, encode_prompts
  assert [bucket_length(n, 72, 16, ladder=True) for n in (1, 17, 33, 49, 65)] == [16, 32, 48, 64, 72]
  assert [bucket_length(n, 1000, 16, ladder=True) for n in (65, 97, 129, 200, 300, 999)] == [
      96, 128, 192, 256, 384, 1000]
  assert bucket_length(200, 1000, 16) == 208  # pre-training keeps plain multiples
  widths = {bucket_length(n, 258, 16, ladder=True) for n in range(1, 259)}
  assert sorted(widths) == [16, 32, 48, 64, 96, 128, 192, 256, 258]
  tok = ByteTokenizer()
  ids, lengths = encode_prompts(["x" * 150, "y"], tok, 258, bucket=16)
  assert ids.shape == (2, 192) and list(lengths) == [151, 2]

  out, calls, _ = _play(interleave=False)
  longest = max(int((row != tok.pad_id).sum()) for row in out.seq.tokens)
  width = out.seq.tokens.shape[1]
  assert width >= longest and width in (64, 96, 128, 192, 256, 384, 512 + 8)
  assert width <= 512 + 8
