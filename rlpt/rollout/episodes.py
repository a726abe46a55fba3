"""Plays a batch of (multi-turn) episodes: sampler turns and environment steps.

`EpisodeRunner.run` starts one episode per task, samples turn 1 for every
prompt, hands the answers to the environments, and keeps going until every
episode has ended. Each later turn samples only for the episodes still
running, from their whole conversation so far (the exact tokens sampled and
observed, never re-tokenized). Prompts and observations become ids by the
runner's `PromptFormat` (rlpt.tokenizers.chat): bare text, or turns of the
model's chat template, whose headers and observations carry no loss. An
episode ends when its environment ends it or
when its next context would exceed ``max_prompt_len`` (then it ends unsolved,
with the reward it has).

Three ways to schedule the later turns:

- batch-synchronous (``interleave=False``, the default): turn t+1 is sampled
  once every episode's turn t is graded. The sampled tokens do not depend on
  how long the environments take, so runs are reproducible.
- interleaved (``interleave=True``): the sampler samples the next turn of the
  episodes whose environments have answered as soon as they are at least
  ``min_ready`` (half) of those still running, or all of them, so a slow
  environment (a long sandbox job, a hung worker waiting on its timeout) holds
  back only its own episode. Which episodes share a sampler call then depends
  on the environments' timing, and with it the random draws: samples are still
  exact samples of the policy, but not bit-reproducible.
- on the engine (``run_on_engine``, ``engine.enabled``): every episode is a
  sequence of the continuous-batching engine (rlpt.engine); a turn goes to its
  environment as soon as it stops and the next turn starts as soon as the
  environment answers, the episode's cache kept (only the observation is
  prefilled). Each turn samples with its own key (episode, turn), so the
  tokens are reproducible whatever the environments' timing.

The caller's ``generate(ids, lengths, grouped, key)`` samples one completion
per row for any number of rows up to the batch it was built for (the trainer
pads to a bucketed batch size) and returns host arrays
(completions, log-probs, lengths). Nothing here knows about JAX.
"""

from __future__ import annotations

import collections
import math
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from rlpt.config import RolloutConfig
from rlpt.packing import pack_width
from rlpt.rollout.batch import SequenceBatch, build_episode_sequences, encode_prompts, pad_contexts
from rlpt.rollout.pool_api import EnvironmentPool
from rlpt.tokenizers.prompts import PromptFormat


class EpisodeBatch(NamedTuple):
  seq: SequenceBatch   # the conversations as one right-padded token batch
  final: list          # each episode's last Outcome verdict
  stats: dict          # per-episode arrays: turns, env_s, generated, overflow, last_len, stopped
  metrics: dict        # the rollout's: time/reset, time/generate, time/environments (s); rollout/sampler_calls


class EpisodeRunner:
  """Drives episodes on an environment pool (an `EnvironmentPool`) with a sampler.

  prompt_format: how prompts and observations become ids (its ``tokenizer``
    also decodes answers); ``PromptFormat(tokenizer)`` is bare: BOS + text,
    observations appended as text.
  rollout: the run's ``rollout`` section (``max_prompt_len``, the context an
    episode may fill; ``max_new_tokens`` per turn; ``interleave_turns``).
  stop_ids: tokens that end a completion (dropped from the answer text): the
    sampler's, which include the format's.
  bucket: prompt buffers are padded to a multiple of this many tokens.
  min_ready: interleaved, the share of running episodes that must be ready
    before the sampler runs (when nothing else is running, it runs anyway).
  """

  def __init__(self, pool: EnvironmentPool, prompt_format: PromptFormat, rollout: RolloutConfig,
               stop_ids: Sequence[int], bucket: int, min_ready: float = 0.5):
    if not 0.0 < min_ready <= 1.0:
      raise ValueError(f"min_ready must be in (0, 1], got {min_ready}")
    if not isinstance(prompt_format, PromptFormat):
      raise TypeError(f"EpisodeRunner takes a PromptFormat (rlpt.tokenizers.prompts; PromptFormat(tokenizer) "
                      f"for bare prompts), got {type(prompt_format).__name__}")
    self.format = prompt_format
    tokenizer = prompt_format.tokenizer
    if not set(self.format.stop_ids) <= set(int(x) for x in stop_ids):
      raise ValueError(f"the sampler stops at {sorted(int(x) for x in stop_ids)}, not at every "
                       f"stop token of the '{self.format.name}' prompt format "
                       f"{list(self.format.stop_ids)}.")
    self.pool, self.tokenizer = pool, tokenizer
    self.max_prompt_len, self.max_new_tokens = rollout.max_prompt_len, rollout.max_new_tokens
    self.stop_ids = set(int(x) for x in stop_ids)
    self.bucket, self.interleave = bucket, rollout.interleave_turns
    self.min_ready = min_ready
    # Later turns' contexts vary in length far more than prompts: a coarser
    # bucket keeps the number of compiled sampler shapes small.
    self.turn_bucket = 4 * bucket

  def _answer_text(self, row: np.ndarray, n: int) -> str:
    body = row[:n]
    if n and body[-1] in self.stop_ids:
      body = body[:-1]
    return self.tokenizer.decode(body)

  def run(self, tasks: Sequence, generate: Callable[..., tuple], grouped: bool = False,
          key: Any = None, fold_in: Callable[[Any, int], Any] | None = None) -> EpisodeBatch:
    """Plays one episode per task to its end.

    generate(ids, lengths, grouped, key) -> (completions, log-probs, lengths)
    for the rows given. ``grouped``: the tasks come in groups of copies of one
    prompt and turn 1 may share each group's prefix (the caller's sampler
    decides). ``key`` / ``fold_in``: the sampler's key for sampler call c is
    ``fold_in(key, c + 1)`` (None: ``generate`` draws its own).
    """
    metrics: dict[str, float] = collections.defaultdict(float)
    episodes, ids, lengths, st = self._start(tasks, metrics)
    calls = 0

    def sample(rows: list[int], first: bool):
      nonlocal calls
      calls += 1
      if first:
        ids_, lengths_ = ids, lengths
      else:
        ids_, lengths_ = pad_contexts([st.ctx[i] for i in rows], self.max_prompt_len,
                                      self.tokenizer.pad_id, self.turn_bucket)
      sub = None if key is None else fold_in(key, calls)
      t = time.perf_counter()
      comp, lp, n_out = generate(ids_, lengths_, grouped and first, sub)
      metrics["time/generate"] += time.perf_counter() - t
      for j, i in enumerate(rows):
        st.record_turn(i, comp[j], lp[j], int(n_out[j]), self.stop_ids)
      return [self._answer_text(comp[j], int(n_out[j])) for j in range(len(rows))]

    active = list(range(len(tasks)))
    answers = sample(active, first=True)
    play = self._interleaved if self.interleave else self._synchronous
    play(episodes, active, answers, st, sample, metrics)
    metrics["rollout/sampler_calls"] = float(calls)
    return self._batch(episodes, st, ids.shape[1], metrics)

  def run_on_engine(self, tasks: Sequence, engine, step: Callable[[], list],
                    turn_key: Callable[[int, int], Any]) -> EpisodeBatch:
    """Plays one episode per task on a continuous-batching engine (rlpt.engine).

    Each episode is a sequence of the engine: its prompt is added, each turn
    that stops goes to its environment at once, and the observation extends
    the sequence as soon as the environment answers (its cache kept; only the
    observation's tokens are prefilled). ``step()`` runs one engine round and
    returns the turns that stopped; ``turn_key(i, t)``: the key data of
    episode i's turn t, so the tokens do not depend on the environments'
    timing.
    """
    if engine.running:
      raise ValueError(f"the engine is already running {engine.running} sequences.")
    metrics: dict[str, float] = collections.defaultdict(float)
    episodes, ids, _, st = self._start(tasks, metrics)
    for i, ctx in enumerate(st.ctx):
      engine.add(i, ctx, turn_key(i, 0), self.max_new_tokens)
    play = _EnginePlay(self, engine, episodes, st, turn_key)
    while engine.running or play.waiting:
      if engine.running:
        t = time.perf_counter()
        turns = step()
        metrics["time/generate"] += time.perf_counter() - t
        metrics["rollout/sampler_calls"] += 1
        play.answer(turns)
      if play.waiting:
        t = time.perf_counter()
        play.observe(timeout=0.0 if engine.running else None)
        metrics["time/environments"] += time.perf_counter() - t
    return self._batch(episodes, st, ids.shape[1], metrics)

  def _start(self, tasks: Sequence, metrics: dict):
    """The tasks' episodes, their encoded prompts (ids, lengths) and the conversations' state."""
    t = time.perf_counter()
    episodes = self.pool.start(tasks)
    metrics["time/reset"] += time.perf_counter() - t
    ids, lengths = encode_prompts([ep.prompt for ep in episodes], self.tokenizer,
                                  self.max_prompt_len, [tk.domain for tk in tasks],
                                  bucket=self.bucket, prompt_format=self.format)
    return episodes, ids, lengths, _State(len(tasks), [list(ids[i, :n]) for i, n in enumerate(lengths)])

  def _batch(self, episodes, st: _State, prompt_width: int, metrics: dict) -> EpisodeBatch:
    # The batch's width on the 2^k / 1.5 * 2^k ladder, at most the longest an
    # episode can be: the update compiles a handful of shapes in a run.
    longest = max(prompt_width + self.max_new_tokens, max(len(c) for c in st.ctx))
    width = max(longest, min(pack_width(longest), self.max_prompt_len + self.max_new_tokens))
    seq = build_episode_sequences(st.ctx, st.model, st.logps, width, self.tokenizer.pad_id)
    stats = {"turns": [ep.turns for ep in episodes], "env_s": [ep.env_s for ep in episodes],
             "generated": st.generated,
             "overflow": st.overflow, "last_len": st.last_len, "stopped": st.stopped}
    recorded = st.oldest < np.iinfo(np.int32).max
    if recorded.any():  # an episode without tokens takes the oldest of the batch
      stats["version"] = np.where(recorded, st.oldest, st.oldest[recorded].min())
    return EpisodeBatch(seq, st.final, stats, dict(metrics))

  def _synchronous(self, episodes, active, answers, st, sample, metrics):
    """Later turns batch-synchronously: every running episode steps, then the
    ones still going sample their next turn together."""
    while active:
      t = time.perf_counter()
      steps = self.pool.step([episodes[i] for i in active], answers)
      metrics["time/environments"] += time.perf_counter() - t
      still = [i for i, step in zip(active, steps) if self._observe(st, i, step)]
      self.pool.abandon([episodes[i] for i in active if i not in still])
      active = still
      if active:
        answers = sample(active, first=False)

  def _interleaved(self, episodes, rows, answers, st, sample, metrics):
    """Later turns as soon as each episode's environment answers (see the module doc).

    The sampler waits until at least ``min_ready`` of the running episodes are
    ready (or nothing else is still running): fewer, fuller sampler calls,
    while a straggler still holds back only itself.
    """
    pending = self.pool.submit([episodes[i] for i in rows], answers)
    owner = list(rows)  # pending's step index -> episode
    ready: list[int] = []
    while len(pending) or ready:
      need = max(1, math.ceil(self.min_ready * (len(pending) + len(ready))))
      if len(pending):
        t = time.perf_counter()
        # Block while too few are ready; otherwise take whatever else is done.
        got = pending.wait(timeout=None if len(ready) < need else 0.0)
        metrics["time/environments"] += time.perf_counter() - t
        ended = []
        for k, step in got:
          i = owner[k]
          (ready if self._observe(st, i, step) else ended).append(i)
        self.pool.abandon([episodes[i] for i in ended])
        need = max(1, math.ceil(self.min_ready * (len(pending) + len(ready))))
      if ready and (len(ready) >= need or not len(pending)):
        ready.sort()
        answers = sample(ready, first=False)
        pending.add([episodes[i] for i in ready], answers)
        owner.extend(ready)
        ready = []

  def _observe(self, st: _State, i: int, step) -> bool:
    """Records episode i's step; True when it goes on (its observation appended)."""
    st.final[i] = step.graded
    if step.done:
      return False
    obs = self.format.observation_ids(step.observation, st.ctx[i][-1])
    if len(st.ctx[i]) + len(obs) > self.max_prompt_len:
      st.overflow[i] = True
      return False
    st.ctx[i].extend(obs)
    st.model[i].extend([0.0] * len(obs))
    st.logps[i].extend([0.0] * len(obs))
    return True


class _EnginePlay:
  """The environments' side of ``EpisodeRunner.run_on_engine``: turns go to
  their environments as they stop, observations back to the engine as they come."""

  def __init__(self, runner: EpisodeRunner, engine, episodes, st: "_State", turn_key):
    self.runner, self.engine, self.episodes, self.st, self.turn_key = (
        runner, engine, episodes, st, turn_key)
    self.pending, self.owner = None, []
    self.turns = [0] * len(episodes)

  @property
  def waiting(self) -> int:
    return 0 if self.pending is None else len(self.pending)

  def answer(self, turns) -> None:
    rows, answers = [], []
    for turn in turns:
      n = len(turn.tokens)
      self.st.record_turn(turn.seq, turn.tokens, turn.logprobs, n, self.runner.stop_ids)
      if n:
        self.st.oldest[turn.seq] = min(self.st.oldest[turn.seq], int(turn.versions[:n].min()))
      rows.append(turn.seq)
      answers.append(self.runner._answer_text(turn.tokens, n))
    if not rows:
      return
    eps = [self.episodes[i] for i in rows]
    if self.pending is None:
      self.pending = self.runner.pool.submit(eps, answers)
    else:
      self.pending.add(eps, answers)
    self.owner.extend(rows)

  def observe(self, timeout: float | None) -> None:
    ended = []
    for k, step in self.pending.wait(timeout=timeout):
      i = self.owner[k]
      before = len(self.st.ctx[i])
      if self.runner._observe(self.st, i, step):
        self.turns[i] += 1
        self.engine.extend(i, self.st.ctx[i][before:], self.turn_key(i, self.turns[i]),
                           self.runner.max_new_tokens)
      else:
        self.engine.finish(i)
        ended.append(i)
    self.runner.pool.abandon([self.episodes[i] for i in ended])


class _State:
  """Every episode's conversation so far (tokens, loss mask, sampler log-probs)."""

  def __init__(self, b: int, prompts: list[list[int]]):
    self.ctx = prompts
    self.model = [[0.0] * len(c) for c in prompts]
    self.logps = [[0.0] * len(c) for c in prompts]
    self.final: list = [None] * b
    self.last_len = np.zeros((b,), np.int32)
    self.stopped = np.zeros((b,), bool)
    self.generated = np.zeros((b,), np.int32)
    self.overflow = np.zeros((b,), bool)
    # The oldest policy version of each episode's tokens (the engine records them).
    self.oldest = np.full((b,), np.iinfo(np.int32).max, np.int32)

  def record_turn(self, i: int, comp: np.ndarray, lp: np.ndarray, n: int, stop_ids) -> None:
    self.ctx[i].extend(int(x) for x in comp[:n])
    self.model[i].extend([1.0] * n)
    self.logps[i].extend(float(x) for x in lp[:n])
    self.last_len[i] = n
    self.stopped[i] = n > 0 and int(comp[n - 1]) in stop_ids
    self.generated[i] += n
