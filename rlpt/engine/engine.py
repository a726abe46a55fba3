"""A continuous-batching generation engine inside the trainer's own program.

``Engine`` keeps a fixed number of decode slots over one KV store (one row of
``max_len + prefill_len`` positions per slot; rlpt.sampling.slots). Sequences
wait in a queue; between decode chunks the host admits waiting sequences into
free slots, caches their prompts a chunk of ``prefill_len`` tokens at a time
(one prefill call per round once half the slots decode, so a long prompt
never stalls the decoding slots), and collects the turns that stopped. A decode chunk is
``chunk_steps`` steps in one compiled loop. The engine compiles two programs
(decode, prefill) plus its store's initialiser, whatever the workload.

Multi-turn: a sequence whose turn stopped is *parked* in its slot with its
cache; ``extend`` appends the environment's observation, which is cached by
prefilling only its tokens, and the next turn decodes on. When sequences wait
and no slot is free, the longest-parked sequence is *released* (its slot
freed); when it is extended later it waits for a slot and re-prefills its
whole conversation (counted in ``stats["reprefill_tokens"]``).

Each turn samples with its own key (``add``/``extend`` take it; callers
derive it through ``rlpt.keys``): token i draws from ``fold_in(key, i)``, so
a sequence's tokens do not depend on its slot or its neighbours. The weights
are the ``params`` of each ``step``; a turn records the ``version`` each of
its tokens was sampled under. When the version changes, every cache still
held (decoding, prefilling, parked) is recomputed with the new weights
before the next token, so each token is sampled by exactly one policy
(counted in ``stats["refresh_tokens"]``).
"""

from __future__ import annotations

import collections
import dataclasses
import time
from typing import Hashable, NamedTuple, Sequence

import jax
import numpy as np

from rlpt.device import RunContext, SampledModel, check_batch, to_host
from rlpt.keys import key_width
from rlpt.config.engine import EngineConfig
from rlpt.engine.programs import EnginePrograms
from rlpt.sampling.logits import SamplingParams
from rlpt.sampling.slots import Slots


class Turn(NamedTuple):
  """One sampled turn: its tokens and log-probs, the policy version of each
  token, and whether it ended on a stop token (else on its budget)."""

  seq: Hashable
  tokens: np.ndarray
  logprobs: np.ndarray
  versions: np.ndarray
  stopped: bool


@dataclasses.dataclass
class _Seq:
  id: Hashable
  tokens: list[int]          # the conversation; its last token is pending, not cached
  key: np.ndarray
  budget: int
  slot: int | None = None
  cached: int = 0
  sampled: list = dataclasses.field(default_factory=list)
  logprobs: list = dataclasses.field(default_factory=list)
  versions: list = dataclasses.field(default_factory=list)
  prefilled: int = 0

  @property
  def conversation(self) -> list[int]:
    """Every token so far, this turn's sampled ones included; the last is pending."""
    return self.tokens + self.sampled if self.sampled else self.tokens


class Engine:
  """Continuous batching over ``cfg.slots`` slots; see the module docstring.

  ``stats``: prefill_tokens, shared_prefill_tokens (copied from an identical
  prompt in the same prefill call, not computed), reprefill_tokens, decoded_tokens, slot_steps
  (rows x decode steps run), slot_positions (rows x steps x cache positions read), prefill_calls, decode_chunks, released, and
  step_s / device_s (wall time in ``step`` / waiting for the device: the rest
  is the host's scheduling).
  """

  def __init__(self, cfg: EngineConfig, ctx: RunContext, model: SampledModel,
               stop_ids: Sequence[int]):
    check_batch(cfg.slots, ctx.mesh, ctx.sample_rules, "engine.slots")
    self.cfg = cfg
    self.stop_ids = tuple(int(t) for t in stop_ids)
    pad = self._pad = ctx.tokenizer.pad_id
    self.programs = EnginePrograms(ctx.programs, model.graphdef, model.model_cfg, cfg,
                                   model.shardings, (ctx.mesh, ctx.sample_rules))
    self._cache = self.programs.init()
    s = cfg.slots
    self._slots = Slots(np.full(s, pad, np.int32), np.zeros(s, np.int32), np.zeros(s, bool),
                        np.zeros((s, key_width()), np.uint32), np.zeros(s, np.int32),
                        np.zeros(s, np.int32))
    self._owner: list[_Seq | None] = [None] * s
    self._seqs: dict[Hashable, _Seq] = {}
    self._waiting: collections.deque[_Seq] = collections.deque()
    self._prefilling: list[_Seq] = []
    self._parked: dict[Hashable, _Seq] = {}     # in parking order
    self._version: int | None = None            # of the weights the caches hold
    self.stats = collections.Counter()

  # ------------------------------------------------------------------ requests

  def add(self, seq_id: Hashable, prompt: Sequence[int], key: np.ndarray,
          max_new_tokens: int) -> None:
    """Queues a new sequence: ``prompt`` (token ids), its first turn's key data."""
    if seq_id in self._seqs:
      raise ValueError(f"sequence {seq_id!r} is already in the engine.")
    if not len(prompt):
      raise ValueError(f"sequence {seq_id!r} has an empty prompt.")
    seq = _Seq(seq_id, [int(t) for t in prompt], np.asarray(key, np.uint32), 0)
    seq.budget = self._budget(seq, max_new_tokens)
    self._seqs[seq_id] = seq
    self._waiting.append(seq)

  def extend(self, seq_id: Hashable, observation: Sequence[int], key: np.ndarray,
             max_new_tokens: int) -> None:
    """The next turn of a parked sequence: ``observation`` appended, then sampled on."""
    seq = self._parked.pop(seq_id, None)
    if seq is None:
      state = "unknown" if seq_id not in self._seqs else "not parked (its turn is running)"
      raise ValueError(f"cannot extend sequence {seq_id!r}: it is {state}.")
    seq.tokens += [int(t) for t in observation]
    seq.key = np.asarray(key, np.uint32)
    seq.budget = self._budget(seq, max_new_tokens)
    (self._prefilling if seq.slot is not None else self._waiting).append(seq)

  def finish(self, seq_id: Hashable) -> list[int]:
    """Ends a sequence, freeing its slot; returns its whole conversation."""
    seq = self._parked.pop(seq_id, None)
    if seq is None:
      raise ValueError(f"cannot finish sequence {seq_id!r}: it is not parked.")
    self._release(seq)
    del self._seqs[seq_id]
    return seq.tokens

  def _budget(self, seq: _Seq, max_new_tokens: int) -> int:
    room = self.cfg.max_len - len(seq.tokens)
    if room < 1:
      raise ValueError(f"sequence {seq.id!r} has {len(seq.tokens)} tokens; engine.max_len "
                       f"{self.cfg.max_len} leaves no room to sample.")
    return min(int(max_new_tokens), room)

  @property
  def running(self) -> int:
    """Sequences waiting, prefilling or decoding (not parked)."""
    return len(self._seqs) - len(self._parked)

  # ------------------------------------------------------------------ rounds

  def step(self, params, sampling: SamplingParams, version: int = 0) -> list[Turn]:
    """One round: admit, one prefill call (more while nothing decodes), one
    decode chunk. Returns the turns that stopped."""
    t0 = time.perf_counter()
    if version != self._version:
      self._refresh()
      self._version = version
    self._admit()
    self._prefill(params)
    turns = self._decode(params, sampling, version) if self._slots.active.any() else []
    self.stats["step_s"] += time.perf_counter() - t0
    return turns

  def generate(self, params, sampling: SamplingParams, prompts: Sequence[Sequence[int]],
               keys: np.ndarray, max_new_tokens: int, version: int = 0) -> list[Turn]:
    """Single-turn sampling of ``prompts`` (key data ``keys[i]`` each), in order."""
    ids = [("generate", self.stats["generate_calls"], i) for i in range(len(prompts))]
    self.stats["generate_calls"] += 1
    for i, p in enumerate(prompts):
      self.add(ids[i], p, keys[i], max_new_tokens)
    done = {}
    while len(done) < len(ids):
      for turn in self.step(params, sampling, version):
        done[turn.seq] = turn
        self.finish(turn.seq)
    return [done[i] for i in ids]

  def warm_up(self, params, sampling: SamplingParams) -> None:
    """Runs every program once (each decode width, a prefill) without changing
    any sequence: compilation happens here, not in the first rounds."""
    pr = self.programs
    idle = self._slots._replace(active=np.zeros_like(self._slots.active))
    full, rows = pr.decoders(sampling, self.stop_ids, self._pad)
    self._cache, _ = full(params, self._cache, pr.slots_in(idle))
    for width in self.programs.widths:
      for bound in self.programs.bounds:
        if width < self.cfg.slots or bound < self.cfg.cache_len:
          sub = Slots(*(x[:width] for x in idle))
          index = np.full(width, self.cfg.slots, np.int32)
          self._cache, _ = rows[bound](params, self._cache, pr.slots_in(sub), pr.rows_in(index))
    rows, c = self.cfg.prefill_batch, self.cfg.prefill_len
    nowhere, zeros = pr.replicated_in(np.full(rows, self.cfg.slots, np.int32),
                                      np.zeros(rows, np.int32))
    for bound, prefill in pr.prefill.items():
      self._cache = prefill(params, self._cache, nowhere,
                            *pr.replicated_in(np.zeros((rows, c), np.int32)), zeros)
      self._cache = pr.copy[bound](self._cache, zeros, nowhere)
    jax.block_until_ready(self._cache)

  def _admit(self) -> None:
    free = [s for s, o in enumerate(self._owner) if o is None]
    while self._waiting:
      if not free:
        victim = next((q for q in self._parked.values() if q.slot is not None), None)
        if victim is None:
          return
        free.append(victim.slot)
        self._release(victim)
        self.stats["released"] += 1
      seq = self._waiting.popleft()
      seq.slot = free.pop(0)
      seq.cached = 0
      self._owner[seq.slot] = seq
      self._prefilling.append(seq)

  def _refresh(self) -> None:
    """New weights: every held cache is to be recomputed from its first token.
    A decoding sequence leaves decoding until then and resumes where it was
    (its sampled tokens, key and budget kept)."""
    for s, seq in enumerate(self._owner):
      if seq is None:
        continue
      if self._slots.active[s]:   # its cache holds every token but the pending one
        self._slots.active[s] = False
        self._prefilling.append(seq)
        self.stats["refresh_tokens"] += len(seq.conversation) - 1
      else:
        self.stats["refresh_tokens"] += seq.cached
      seq.cached, seq.prefilled = 0, 0

  def _release(self, seq: _Seq) -> None:
    if seq.slot is not None:
      self._owner[seq.slot] = None
      self._slots.active[seq.slot] = False
      self._slots.position[seq.slot] = 0
      seq.slot, seq.cached = None, 0

  def _prefill(self, params) -> None:
    """Prefill calls: one, or more while under half the slots decode (few to stall)."""
    calls = 0
    while True:
      for seq in [q for q in self._prefilling if q.cached == len(q.conversation) - 1]:
        self._activate(seq)
      if not self._prefilling or (calls and 2 * self._slots.active.sum() >= self.cfg.slots):
        return
      self._prefill_call(params)
      calls += 1

  def _prefill_call(self, params) -> None:
    """One prefill call over up to ``prefill_batch`` sequences; a sequence whose
    tokens so far equal one in the call (a GRPO group's copies) is not
    prefilled but copied from it afterwards."""
    rows, c = self.cfg.prefill_batch, self.cfg.prefill_len
    slot_a = np.full(rows, self.cfg.slots, np.int32)   # out of range: padding
    tokens = np.zeros((rows, c), np.int32)
    start = np.zeros(rows, np.int32)
    first, copies, n = {}, [], 0
    for seq in list(self._prefilling):
      conv = seq.conversation
      end = min(seq.cached + c, len(conv) - 1)
      if end == seq.cached:
        continue
      same = (seq.cached, tuple(conv[:end]))
      if same in first:
        copies.append((first[same], seq.slot))
        self.stats["shared_prefill_tokens"] += end - seq.cached
      elif n < rows:
        first[same] = seq.slot
        slot_a[n], start[n] = seq.slot, seq.cached
        tokens[n, :end - seq.cached] = conv[seq.cached:end]
        n += 1
        self.stats["prefill_tokens"] += end - seq.cached
      else:
        continue
      self.stats["reprefill_tokens"] += max(0, min(end, seq.prefilled) - seq.cached)
      seq.prefilled = max(seq.prefilled, end)
      seq.cached = end
    bound = min(b for b in self.programs.bounds if b >= int(start[:n].max()) + c)
    self._cache = self.programs.prefill[bound](params, self._cache,
                                               *self.programs.replicated_in(slot_a, tokens, start))
    for i in range(0, len(copies), rows):
      src = np.full(rows, 0, np.int32)
      dst = np.full(rows, self.cfg.slots, np.int32)      # out of range: dropped
      part = np.asarray(copies[i:i + rows], np.int32)
      src[:len(part)], dst[:len(part)] = part[:, 0], part[:, 1]
      self._cache = self.programs.copy[bound](self._cache, *self.programs.replicated_in(src, dst))
    self.stats["prefill_calls"] += 1

  def _activate(self, seq: _Seq) -> None:
    self._prefilling.remove(seq)
    s, sl, conv = seq.slot, self._slots, seq.conversation
    sl.pending[s], sl.position[s], sl.active[s] = conv[-1], len(conv) - 1, True
    sl.key[s], sl.count[s], sl.budget[s] = seq.key, len(seq.sampled), seq.budget

  def _decode(self, params, sampling: SamplingParams, version: int) -> list[Turn]:
    before = self._slots.count.copy()
    t0 = time.perf_counter()
    tokens, logprobs = self._decode_chunk(params, sampling)
    # The wait for the chunk (and any prefill queued before it): device time.
    self.stats["device_s"] += time.perf_counter() - t0
    self.stats["decode_chunks"] += 1
    turns = []
    for s, seq in enumerate(self._owner):
      if seq is None or seq in self._prefilling or seq.id in self._parked:
        continue
      n = int(self._slots.count[s] - before[s])
      seq.sampled += tokens[s, :n].tolist()
      seq.logprobs += logprobs[s, :n].tolist()
      seq.versions += [version] * n
      self.stats["decoded_tokens"] += n
      if not self._slots.active[s]:
        turns.append(self._end_turn(seq))
    return turns

  def _plan(self, active: np.ndarray) -> list[tuple[np.ndarray, int, int]]:
    """(slots, width, bound) of each decode call of a chunk: one call over the
    narrowest width and fewest positions that hold the active slots, or two
    when splitting off the few rows that need many positions reads less. A
    call's cost is taken as width x (bound + cache_len / 2), the second term
    standing for a row's work that does not grow with its positions."""
    k, bounds = self.cfg.chunk_steps, sorted(self.programs.bounds)
    # The last position a row writes is position + k - 1; bound - 1 is its scratch.
    level = np.searchsorted(bounds, self._slots.position[active] + k + 1)
    width = lambda n: min(w for w in self.programs.widths if w >= n)
    cost = lambda n, b: width(n) * (b + self.cfg.cache_len / 2)
    top = int(level.max())
    plan = [(active, width(len(active)), bounds[top])]
    best = cost(len(active), bounds[top])
    for cut in range(top):
      low, high = active[level <= cut], active[level > cut]
      split = cost(len(low), bounds[cut]) + cost(len(high), bounds[top]) if len(low) else best
      if split < best:
        plan, best = [(low, width(len(low)), bounds[cut]), (high, width(len(high)), bounds[top])], split
    return plan

  def _decode_chunk(self, params, sampling) -> tuple[np.ndarray, np.ndarray]:
    """One chunk (``_plan``'s calls); returns [S, k] tokens and log-probs
    (pad and 0 for slots not run)."""
    sl, k, n_slots = self._slots, self.cfg.chunk_steps, self.cfg.slots
    full, rows = self.programs.decoders(sampling, self.stop_ids, self._pad)
    calls = []
    before = sl.count.copy()
    for group, width, bound in self._plan(np.flatnonzero(sl.active)):
      if width == n_slots and bound == self.cfg.cache_len:
        self._cache, emitted = full(params, self._cache, self.programs.slots_in(sl))
        calls.append((None, width, bound, emitted))
        continue
      index = np.full(width, n_slots, np.int32)      # out of range: padding
      index[:len(group)] = group
      sub = Slots(*(x[np.minimum(index, n_slots - 1)] for x in sl))
      sub.active[len(group):] = False
      self._cache, emitted = rows[bound](params, self._cache, self.programs.slots_in(sub),
                                         self.programs.rows_in(index))
      calls.append((group, width, bound, emitted))
    out = to_host([(e.tokens, e.logprobs, e.slots) for *_, e in calls])
    tokens = np.full((n_slots, k), self._pad, np.int32)
    logprobs = np.zeros(tokens.shape, np.float32)
    for (group, width, bound, _), (t, lp, state) in zip(calls, out):
      if group is None:
        tokens, logprobs, self._slots = t, lp, Slots(*(np.array(x) for x in state))
        group = np.arange(n_slots)
      else:
        n = len(group)
        tokens[group], logprobs[group] = t[:n], lp[:n]
        for whole, part in zip(self._slots, state):
          whole[group] = part[:n]
      # A call runs until its last active row stops: as many steps as its longest emission.
      steps = int((self._slots.count[group] - before[group]).max(initial=0))
      self.stats["slot_steps"] += width * steps
      self.stats["slot_positions"] += width * steps * bound
    return tokens, logprobs

  def _end_turn(self, seq: _Seq) -> Turn:
    seq.tokens += seq.sampled
    seq.cached = len(seq.tokens) - 1
    seq.prefilled = max(seq.prefilled, seq.cached)
    self._parked[seq.id] = seq
    stopped = bool(seq.sampled) and seq.sampled[-1] in self.stop_ids
    turn = Turn(seq.id, np.asarray(seq.sampled, np.int32), np.asarray(seq.logprobs, np.float32),
                np.asarray(seq.versions, np.int32), stopped)
    seq.sampled, seq.logprobs, seq.versions = [], [], []
    return turn
