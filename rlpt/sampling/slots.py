"""Decode slots: the device side of the continuous-batching engine (rlpt.engine).

A fixed number of slots share one KV store of fixed length per slot (slot =
position, ``FlatLayout`` in fp32 or int8). A slot holds one sequence at a time;
the host decides which (admission, release) between calls. Programs, each
of one fixed shape:

* ``prefill_rows``: caches a chunk of C tokens for each of A slots (a
  prompt's later chunk, or the observation appended to a parked episode),
  reading and writing only those slots' rows (gathered, run through the
  model, scattered back). Rows with slot index >= the slot count are padding
  and write nothing. ``prefill_fresh``: the first chunks of fresh sequences,
  packed several to a row (rlpt.sampling.packed).
* ``decode_steps``: k decode steps over every slot. Each step feeds each
  slot's pending token (sampled or observed, not yet cached) at its position,
  caches it, and samples the next token of the active slots. ``decode_rows``
  runs them over W gathered slots and their first ``bound`` positions (a
  short ladder of each), so a chunk pays neither for idle slots nor for
  positions no active sequence has reached.

Shared prompts: a ``SharedStore`` adds a store of R prompt rows to the S
slot rows. A slot then holds only what follows its prompt row's positions
(slot position j = sequence position ``prompt_len + j``) and reads the prompt
from the store (``rlpt.sampling.prefix.StoredPrefixLayout``), so the G samples
of one prompt keep one copy of its cache; ``prefill_prompts`` caches prompt
rows. With a plain store every ``prompt_len`` is 0.

Each slot samples with its own key: token i of a turn draws from
``fold_in(turn_key, i)``, and no row reads another, so a sequence's tokens do
not depend on which slot it occupies or what shares the batch.

Shape suffixes: S slots, A prefill rows, C chunk tokens, k decode steps, L
cache length, V vocab.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from rlpt.sampling.fast import FlatLayout, cached_forward
from rlpt.sampling.logits import SamplingParams, sample_token
from rlpt.sampling.packed import prefill_packed
from rlpt.sampling.prefix import StoredPrefix
from rlpt.sampling.quant import as_params


class Slots(NamedTuple):
  """Per-slot decode state, [S] each (host-owned between calls).

  pending: the token fed at the next step (not yet cached); position: its
  position; active: sampling (a parked or free slot is not); key: the turn's
  key data [S, 2] uint32; count: tokens sampled in this turn (the fold-in
  index of the next one); budget: tokens this turn may sample; prompt_row /
  prompt_len: the shared prompt row the slot reads and its cached positions
  (0 with a plain store).
  """

  pending: jax.Array
  position: jax.Array
  active: jax.Array
  key: jax.Array
  count: jax.Array
  budget: jax.Array
  prompt_row: jax.Array
  prompt_len: jax.Array


class SharedStore(NamedTuple):
  """A KV store with shared prompts: ``prompts`` [R rows] and ``rows`` [S slots]
  (each a KVCache or Int8KVCache)."""

  prompts: object
  rows: object


def _rows(store):
  """The per-slot part of a store (or of a StoredPrefix view)."""
  return store.rows if isinstance(store, (SharedStore, StoredPrefix)) else store


def _with_rows(store, rows):
  return store._replace(rows=rows) if isinstance(store, SharedStore) else rows


def _view(store, prompt_row, prompt_len):
  """What the model attends over: the slots' rows, with their prompt rows when shared."""
  if isinstance(store, SharedStore):
    return StoredPrefix(store.prompts, prompt_row, prompt_len, store.rows)
  return store


class Emitted(NamedTuple):
  """What k decode steps sampled: tokens and log-probs [S, k] (pad / 0 where a
  slot was not active at that step) and the slots' state after them."""

  tokens: jax.Array
  logprobs: jax.Array
  slots: Slots


def _row_keys(slots: Slots) -> jax.Array:
  keys = jax.random.wrap_key_data(slots.key)
  return jax.vmap(jax.random.fold_in)(keys, slots.count)


def _sample_rows(keys, logits_SxV, sampling: SamplingParams):
  one = lambda k, l: tuple(x[0] for x in sample_token(k, l[None], sampling))
  return jax.vmap(one)(keys, logits_SxV)


def decode_steps(graphdef: nnx.GraphDef, layout, params, cache, slots: Slots,
                 sampling: SamplingParams, steps: int, stop_ids: tuple[int, ...],
                 pad_id: int) -> tuple[object, Emitted]:
  """Up to ``steps`` decode steps over every slot (fewer once none is active:
  a chunk that drains the last sequences stops with them); returns (cache,
  Emitted), pad and 0 for steps not run.

  A slot stops (becomes inactive) after sampling a stop token or its
  ``budget``-th token; its last sampled token stays pending (uncached), so a
  next turn starts by caching it. Inactive slots (free, parked, or part-way
  through a chunked prefill) run the same computation (fixed shapes) at the
  cache's last position, which no query reads (the store is ``prefill_len``
  longer than a sequence may be), and their state does not move.
  """
  params = as_params(params)
  stops = jnp.asarray(stop_ids, jnp.int32)
  n = slots.pending.shape[0]
  scratch = _rows(cache).v[0].shape[2] - 1

  def body(carry):
    i, cache, s, toks, logps = carry
    where = jnp.where(s.active, s.position, scratch + s.prompt_len)
    logits, view = cached_forward(graphdef, params, s.pending[:, None], where[:, None],
                                  _view(cache, s.prompt_row, s.prompt_len), layout)
    cache = _with_rows(cache, _rows(view))
    tok, logp = _sample_rows(_row_keys(s), logits[:, 0], sampling)
    tok = jnp.where(s.active, tok, pad_id)
    logp = jnp.where(s.active, logp, 0.0)
    count = s.count + s.active
    stopped = s.active & (jnp.isin(tok, stops) | (count >= s.budget))
    s = s._replace(pending=jnp.where(s.active, tok, s.pending), position=s.position + s.active,
                   active=s.active & ~stopped, count=count)
    return i + 1, cache, s, toks.at[:, i].set(tok), logps.at[:, i].set(logp)

  def running(carry):
    i, _, s, _, _ = carry
    return (i < steps) & s.active.any()

  toks = jnp.full((n, steps), pad_id, jnp.int32)
  logps = jnp.zeros((n, steps), jnp.float32)
  _, cache, slots, toks, logps = jax.lax.while_loop(
      running, body, (jnp.int32(0), cache, slots, toks, logps))
  return cache, Emitted(toks, logps, slots)


def _positions_axis(name: str) -> int:
  """The position axis of a cache field: keys [S, K, H, L], the rest [S, K, L, ...]."""
  return 3 if name == "k" else 2


def gather_rows(store, slot_A: jax.Array, bound: int | None = None):
  """The store with only the slot rows ``slot_A`` (an out-of-range index reads
  the last slot), their positions ``[0, bound)`` only when ``bound`` is given
  (shared prompt rows are kept whole)."""
  cache = _rows(store)
  def take(name, x):
    x = jnp.take(x, slot_A, axis=0, mode="clip")
    return x if bound is None else jax.lax.slice_in_dim(x, 0, bound, axis=_positions_axis(name))
  return _with_rows(store, type(cache)(*(tuple(take(n, x) for x in f)
                                         for n, f in zip(cache._fields, cache))))


def scatter_rows(store, slot_A: jax.Array, rows):
  """``store`` with the slot rows of ``rows`` (a gathered store: all positions,
  or the first ones) written back at slots ``slot_A`` (an out-of-range index
  is dropped)."""
  cache, rows = _rows(store), _rows(rows)
  def put(name, x, r):
    index = [slot_A] + [slice(None)] * (x.ndim - 1)
    index[_positions_axis(name)] = slice(0, r.shape[_positions_axis(name)])
    return x.at[tuple(index)].set(r, mode="drop")
  return _with_rows(store, type(cache)(*(tuple(put(n, x, r) for x, r in zip(f, fr))
                                         for n, f, fr in zip(cache._fields, cache, rows))))


def decode_rows(graphdef: nnx.GraphDef, layout, params, cache, slots_W: Slots,
                slot_W: jax.Array, sampling: SamplingParams, steps: int,
                stop_ids: tuple[int, ...], pad_id: int, bound: int) -> tuple[object, Emitted]:
  """``decode_steps`` over slots ``slot_W`` only (their state ``slots_W``) and
  their first ``bound`` positions: a chunk costs W rows of ``bound`` positions,
  not every slot's whole row. The caller picks ``bound`` above every active
  slot's position after the chunk; what an idle row writes at ``bound - 1``
  lies past the row's cached tokens. Padding rows (index >= S) write nothing."""
  rows, emitted = decode_steps(graphdef, layout, params, gather_rows(cache, slot_W, bound),
                               slots_W, sampling, steps, stop_ids, pad_id)
  return scatter_rows(cache, slot_W, rows), emitted


def prefill_rows(graphdef: nnx.GraphDef, layout, params, cache, slot_A: jax.Array,
                 tokens_AxC: jax.Array, start_A: jax.Array, prompt_row_A: jax.Array,
                 prompt_len_A: jax.Array, bound: int | None = None):
  """Caches ``tokens_AxC`` at positions ``start_A + [0, C)`` of slots ``slot_A``
  (after their shared prompt rows ``prompt_row_A`` of ``prompt_len_A``
  positions when the store has them), reading and writing their first
  ``bound`` slot positions only (the caller picks it above every row's
  ``start - prompt_len + C``; None: all).

  A row whose slot index is out of range (>= S) is padding: it is computed on
  a copy of slot S - 1 and written nowhere. Tokens past a row's real chunk may
  be anything: they land at positions after the sequence's end, which a later
  step writes before any query reads them.
  """
  params = as_params(params)
  c = tokens_AxC.shape[1]
  positions = start_A[:, None] + jnp.arange(c, dtype=jnp.int32)[None, :]
  rows = gather_rows(cache, slot_A, bound)
  _, rows = cached_forward(graphdef, params, tokens_AxC, positions,
                           _view(rows, prompt_row_A, prompt_len_A), layout, with_logits=False)
  return scatter_rows(cache, slot_A, rows)


def prefill_prompts(graphdef: nnx.GraphDef, layout: FlatLayout, params, store: SharedStore,
                    row_A: jax.Array, tokens_AxC: jax.Array, start_A: jax.Array) -> SharedStore:
  """Caches ``tokens_AxC`` at positions ``start_A + [0, C)`` of shared prompt
  rows ``row_A`` (a prompt attends to itself only); out-of-range rows are padding."""
  zeros = jnp.zeros_like(start_A)
  prompts = prefill_rows(graphdef, layout, params, store.prompts, row_A, tokens_AxC, start_A,
                         zeros, zeros)
  return store._replace(prompts=prompts)


def prefill_fresh(graphdef: nnx.GraphDef, params, store, row_AxC: jax.Array,
                  tokens_AxC: jax.Array, position_AxC: jax.Array):
  """Fresh first chunks packed several to a call row (rlpt.sampling.packed)
  into a plain store's slots, or into a shared store's prompt rows (whose
  sequences' slots hold only what follows them)."""
  if isinstance(store, SharedStore):
    return store._replace(prompts=prefill_packed(graphdef, params, store.prompts, row_AxC,
                                                 tokens_AxC, position_AxC))
  return prefill_packed(graphdef, params, store, row_AxC, tokens_AxC, position_AxC)


def copy_rows(cache, src_A: jax.Array, dst_A: jax.Array, bound: int):
  """Slots ``dst_A`` get the first ``bound`` positions of slots ``src_A`` (a
  sequence whose prompt another slot has just cached); ``dst`` out of range:
  padding, dropped."""
  return scatter_rows(cache, dst_A, gather_rows(cache, src_A, bound))
