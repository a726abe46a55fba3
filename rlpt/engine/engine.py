"""A continuous-batching generation engine inside the trainer's own program.

``Engine`` keeps a fixed number of decode slots over one KV store (a row per
slot; rlpt.sampling.slots). Sequences wait in a queue; between decode chunks
(``chunk_steps`` steps in one compiled loop) the host admits waiting
sequences into free slots, caches their prompts ``prefill_len`` tokens at a
time (short first chunks packed several to a call row; once half the slots
decode, a round's prefill calls stop at the first call that would be under
half full or at filling every slot once: a long prompt never stalls them),
and collects the turns that stopped. Its programs
are a fixed set whatever the workload (rlpt.engine.programs).

Multi-turn: a sequence whose turn stopped is *parked* in its slot with its
cache; ``extend`` appends the environment's observation, which is cached by
prefilling only its tokens, and the next turn decodes on. When sequences wait
and no slot is free, the longest-parked sequence is *released* (its slot
freed); when it is extended later it waits for a slot and re-prefills its
whole conversation (counted in ``stats["reprefill_tokens"]``).

Shared prompts (``cfg.prompts`` rows): a sequence's leading tokens live in a
prompt row that every sequence beginning alike reads (a GRPO group's G
samples keep one copy; rlpt.engine.prompts keeps the book), and its slot
holds only what follows.

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
import time
from typing import Hashable, Sequence

import jax
import numpy as np

from rlpt.device import RunContext, SampledModel, check_batch, to_host
from rlpt.keys import key_width
from rlpt.config.engine import EngineConfig
from rlpt.engine.prefill import RowCall, pack
from rlpt.engine.programs import EnginePrograms
from rlpt.engine.prompts import PromptRows
from rlpt.engine.sequence import SeqState, Turn
from rlpt.sampling.logits import SamplingParams
from rlpt.sampling.slots import Slots


class Engine:
  """Continuous batching over ``cfg.slots`` slots; see the module docstring.

  ``stats``: prefill_tokens, shared_prefill_tokens (copied from an identical
  prompt in the same prefill call, or found in a shared prompt row: not
  computed), reprefill_tokens, decoded_tokens, slot_steps
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
    self.prompt_rows = PromptRows(cfg.prompts, cfg.prompt_len)
    s, zeros = cfg.slots, lambda: np.zeros(s, np.int32)
    self._slots = Slots(np.full(s, pad, np.int32), zeros(), np.zeros(s, bool),
                        np.zeros((s, key_width()), np.uint32), zeros(), zeros(), zeros(), zeros())
    self._owner: list[SeqState | None] = [None] * s
    self._seqs: dict[Hashable, SeqState] = {}
    self._waiting: collections.deque[SeqState] = collections.deque()
    self._prefilling: list[SeqState] = []
    self._parked: dict[Hashable, SeqState] = {}     # in parking order
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
    seq = SeqState(seq_id, [int(t) for t in prompt], np.asarray(key, np.uint32), 0)
    seq.plen = self.prompt_rows.length_of(seq.tokens)
    seq.budget = self._budget(seq, len(seq.tokens), max_new_tokens)
    self._seqs[seq_id] = seq
    self._waiting.append(seq)

  def extend(self, seq_id: Hashable, observation: Sequence[int], key: np.ndarray,
             max_new_tokens: int) -> None:
    """The next turn of a parked sequence: ``observation`` appended, then sampled on."""
    seq = self._parked.get(seq_id)
    if seq is None:
      state = "unknown" if seq_id not in self._seqs else "not parked (its turn is running)"
      raise ValueError(f"cannot extend sequence {seq_id!r}: it is {state}.")
    tokens = seq.tokens + [int(t) for t in observation]
    seq.budget = self._budget(seq, len(tokens), max_new_tokens)   # may refuse: nothing changed
    del self._parked[seq_id]
    seq.tokens, seq.key = tokens, np.asarray(key, np.uint32)
    (self._prefilling if seq.slot is not None else self._waiting).append(seq)

  def finish(self, seq_id: Hashable) -> list[int]:
    """Ends a sequence, freeing its slot; returns its whole conversation."""
    seq = self._parked.pop(seq_id, None)
    if seq is None:
      raise ValueError(f"cannot finish sequence {seq_id!r}: it is not parked.")
    self._release(seq)
    if seq.prompt is not None:
      self.prompt_rows.release(seq.prompt)
    del self._seqs[seq_id]
    return seq.tokens

  def _budget(self, seq: SeqState, n_tokens: int, max_new_tokens: int) -> int:
    # A slot holds max_len - prompt_len positions after the prompt row's plen.
    room = self.cfg.max_len - n_tokens - (self.cfg.prompt_tokens - seq.plen)
    if room < 1:
      shared = (f" (a slot holds the {self.cfg.max_len - self.cfg.prompt_tokens} positions after "
                f"the {seq.plen} its prompt row holds)" if self.cfg.prompts else "")
      raise ValueError(f"sequence {seq.id!r} has {n_tokens} tokens; engine.max_len "
                       f"{self.cfg.max_len} leaves no room to sample{shared}.")
    return min(int(max_new_tokens), room)

  @property
  def running(self) -> int:
    """Sequences waiting, prefilling or decoding (not parked)."""
    return len(self._seqs) - len(self._parked)

  @property
  def store_bytes(self) -> int:
    """Bytes of the KV store (slot rows and shared prompt rows)."""
    return sum(x.nbytes for x in jax.tree.leaves(self._cache))

  # ------------------------------------------------------------------ rounds

  def step(self, params, sampling: SamplingParams, version: int = 0) -> list[Turn]:
    """One round: admit, prefill calls (``_prefill``), one decode chunk.
    Returns the turns that stopped."""
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
    idle = self._slots._replace(active=np.zeros_like(self._slots.active))
    self._cache = self.programs.run_each(params, self._cache, idle,
                                         self.programs.decoders(sampling, self.stop_ids, self._pad))
    jax.block_until_ready(self._cache)

  def _admit(self) -> None:
    """Waiting sequences into free slots (a parked one's if none is free),
    each with its prompt row; one that finds no prompt row free waits on."""
    free = [s for s, o in enumerate(self._owner) if o is None]
    for seq in list(self._waiting):
      if seq.plen and seq.prompt is None:
        seq.prompt, hit = self.prompt_rows.acquire(seq.tokens[:seq.plen])
        if seq.prompt is None:
          continue
        self.stats["shared_prefill_tokens"] += seq.plen * hit
      if not free:
        victim = next((q for q in self._parked.values() if q.slot is not None), None)
        if victim is None:
          return
        free.append(victim.slot)
        self._release(victim)
        self.stats["released"] += 1
      self._waiting.remove(seq)
      seq.slot = free.pop(0)
      seq.cached = seq.plen
      self._owner[seq.slot] = seq
      self._prefilling.append(seq)

  def _refresh(self) -> None:
    """New weights: every held cache is to be recomputed from its first token.
    A decoding sequence leaves decoding until then and resumes where it was
    (its sampled tokens, key and budget kept)."""
    self.stats["refresh_tokens"] += self.prompt_rows.refresh()
    for s, seq in enumerate(self._owner):
      if seq is None:
        continue
      if self._slots.active[s]:   # its cache holds every token but the pending one
        self._slots.active[s] = False
        self._prefilling.append(seq)
        self.stats["refresh_tokens"] += len(seq.conversation) - 1 - seq.plen
      else:
        self.stats["refresh_tokens"] += seq.cached - seq.plen
      seq.cached, seq.prefilled = seq.plen, 0

  def _release(self, seq: SeqState) -> None:
    if seq.slot is not None:
      self._owner[seq.slot] = None
      self._slots.active[seq.slot] = False
      self._slots.position[seq.slot] = 0
      seq.slot, seq.cached = None, 0

  def _prefill(self, params) -> None:
    """Prefill calls: one; more while under half the slots decode (few to
    stall), or while at least half a call's rows wait (their slots would
    idle a chunk otherwise; a call costs the same however few rows it has),
    at most enough calls to fill every slot once."""
    calls, rows = 0, self.cfg.prefill_batch
    while True:
      for seq in [q for q in self._prefilling if q.cached == len(q.conversation) - 1
                  and (q.prompt is None or q.prompt.complete)]:
        self._activate(seq)
      waiting = sum(q.prompt is None or q.prompt.complete for q in self._prefilling)
      if not self._prefilling or (calls and 2 * self._slots.active.sum() >= self.cfg.slots
                                  and (2 * waiting < rows or calls * rows >= self.cfg.slots)):
        return
      self._prefill_call(params)
      calls += 1

  def _prefill_call(self, params) -> None:
    """One prefill call: prompt rows still to cache, then the sequences whose
    prompt row is cached. Fresh chunks (nothing cached before them) are
    packed several to a call row (rlpt.sampling.packed), the rest take a row
    each, up to ``prefill_batch`` rows of each form."""
    self._prefill_prompt_rows(params)
    self._prefill_slots(params)
    self.stats["prefill_calls"] += 1

  def _prefill_prompt_rows(self, params) -> None:
    rows, c, pending = self.cfg.prefill_batch, self.cfg.prefill_len, self.prompt_rows.pending()
    if not pending:
      return
    fresh, call = [r for r in pending if r.cached == 0], RowCall(rows, c, self.cfg.prompts)
    for r in [r for r in pending if r.cached][:rows]:
      end = min(r.cached + c, len(r.tokens))
      call.add(r.row, r.tokens[r.cached:end], r.cached)
      self.stats["prefill_tokens"] += end - r.cached
      r.cached = end
    if fresh:
      arrays, placed = pack([(r.row, r.tokens[:c]) for r in fresh], rows, c, self.cfg.prompts)
      self._cache = self.programs.prefill_packed(params, self._cache,
                                                 *self.programs.replicated_in(*arrays))
      for r in (fresh[i] for i in placed):
        r.cached = min(c, len(r.tokens))
        self.stats["prefill_tokens"] += r.cached
    if call.n:
      self._cache = self.programs.prefill_prompts(
          params, self._cache, *self.programs.replicated_in(*call.arrays()[:3]))

  def _prefill_slots(self, params) -> None:
    """A sequence whose tokens so far equal one's in this call (a GRPO
    group's copies) is not prefilled but copied from its slot afterwards."""
    rows, c, nowhere = self.cfg.prefill_batch, self.cfg.prefill_len, self.cfg.slots
    end = lambda q: min(q.cached + c, len(q.conversation) - 1)
    first, copies, fresh, by_row, call = {}, {}, [], [], RowCall(rows, c, nowhere)
    for seq in self._prefilling:
      if end(seq) == seq.cached or (seq.prompt is not None and not seq.prompt.complete):
        continue
      same = (seq.plen, seq.cached, tuple(seq.conversation[:end(seq)]))
      if same in first:
        copies[first[same].slot].append(seq)
        continue
      if seq.cached == 0 and not self.cfg.prompts:   # (with prompt rows, packing is theirs)
        fresh.append(seq)
      elif not call.full:
        call.add(seq.slot, seq.conversation[seq.cached:end(seq)], seq.cached, seq.prompt_row,
                 seq.plen)
        by_row.append(seq)
      else:
        continue
      first[same], copies[seq.slot] = seq, []
    done = by_row
    if fresh:
      arrays, placed = pack([(q.slot, q.conversation[:end(q)]) for q in fresh], rows, c, nowhere)
      self._cache = self.programs.prefill_packed(params, self._cache,
                                                 *self.programs.replicated_in(*arrays))
      done = [fresh[i] for i in placed] + by_row
    if call.n:
      bound = min(b for b in self.programs.prefill if b >= call.reach())
      self._cache = self.programs.prefill[bound](params, self._cache,
                                                 *self.programs.replicated_in(*call.arrays()))
    pairs = [(src, dst) for src in done for dst in copies[src.slot]]
    for seq in done + [dst for _, dst in pairs]:
      n, shared = end(seq), seq.slot not in copies
      self.stats["shared_prefill_tokens" if shared else "prefill_tokens"] += n - seq.cached
      self.stats["reprefill_tokens"] += max(0, min(n, seq.prefilled) - seq.cached)
      seq.prefilled, seq.cached = max(seq.prefilled, n), n
    self._cache = self.programs.copy_slots(
        self._cache, [(src.slot, dst.slot) for src, dst in pairs],
        max((src.cached - src.plen for src, _ in pairs), default=0))

  def _activate(self, seq: SeqState) -> None:
    self._prefilling.remove(seq)
    s, sl, conv = seq.slot, self._slots, seq.conversation
    sl.pending[s], sl.position[s], sl.active[s] = conv[-1], len(conv) - 1, True
    sl.key[s], sl.count[s], sl.budget[s] = seq.key, len(seq.sampled), seq.budget
    sl.prompt_row[s], sl.prompt_len[s] = seq.prompt_row, seq.plen

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

  def _decode_chunk(self, params, sampling) -> tuple[np.ndarray, np.ndarray]:
    """One chunk (``EnginePrograms.plan``'s calls); returns [S, k] tokens and log-probs
    (pad and 0 for slots not run)."""
    sl, k, n_slots = self._slots, self.cfg.chunk_steps, self.cfg.slots
    full, rows = self.programs.decoders(sampling, self.stop_ids, self._pad)
    calls = []
    before = sl.count.copy()
    active = np.flatnonzero(sl.active)
    # The last slot position a row writes is its position (less its shared
    # prompt's) + k - 1; bound - 1 is its scratch.
    last = sl.position[active] - sl.prompt_len[active] + k - 1
    for group, width, bound in self.programs.plan(active, last):
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

  def _end_turn(self, seq: SeqState) -> Turn:
    seq.tokens += seq.sampled
    seq.cached = len(seq.tokens) - 1
    seq.prefilled = max(seq.prefilled, seq.cached)
    self._parked[seq.id] = seq
    stopped = bool(seq.sampled) and seq.sampled[-1] in self.stop_ids
    turn = Turn(seq.id, np.asarray(seq.sampled, np.int32), np.asarray(seq.logprobs, np.float32),
                np.asarray(seq.versions, np.int32), stopped)
    seq.sampled, seq.logprobs, seq.versions = [], [], []
    return turn
