"""Every JAX random key of an RL run, as a pure function of (seed, purpose, indices).

No key is split off shared mutable state: the key of a draw names the run's
seed, what it is for, and where it is (the step, the attempt, the chunk). So
evaluating more or less often, resuming from a checkpoint or running the
rollout asynchronously cannot shift the samples training sees, and a
checkpoint needs no RNG state.

Purposes and the indices each takes (see ``rlpt.trainer``):

* ``rollout``: the training batch of step s (1-based: the update that trains
  on it, also the asynchronous wave s), then the attempt a (0, then dynamic
  sampling's top-ups 1, 2, ...; an asynchronous wave played in per-domain parts
  uses 0 with one part and 1 + k for the part of staleness budget k). The
  episode runner folds in its sampler call c >= 1 on top.
* ``eval``: the evaluation after step s (0: the base), the mode (0: eval
  sampling, 1: the rollout's sampling, ``eval.sampled``), the chunk of the
  held-out set.
* ``draft_warmup``: the speculative draft's distillation sample before RL,
  update i.
* ``lora_init``, ``draft_init``, ``value_init``: initial LoRA adapters, draft
  model and value head.
* ``minibatch_order``: the update of step s, its rows' order in the minibatches
  (a NumPy stream, ``numpy_rng``).

The numbers in ``PURPOSES`` are part of the stream: changing one changes
every run's samples. Add new purposes with new numbers.

Five host streams are older than this scheme and keep their own seeding
(``seeded_rng``, ``SEEDED_STREAMS``): the built-in bases' cache fingerprint
and every published figure depend on them bit for bit. They are derived here
and nowhere else (``tests/test_keys.py`` checks that rlpt constructs no random
stream outside this module); new streams take a ``PURPOSES`` number.
"""

from __future__ import annotations

from typing import Callable

import jax
import numpy as np

PURPOSES = {
    "rollout": 1,
    "eval": 2,
    "draft_warmup": 3,
    "lora_init": 4,
    "draft_init": 5,
    "value_init": 6,
    "answers": 7,
    "minibatch_order": 8,
    "draft_tasks": 9,
}

# Saved in checkpoints: what the run's keys are a function of.
KEY_SCHEME = "rlpt.keys.run_key/1"


def run_key(seed: int, purpose: str, *indices: int) -> jax.Array:
  """The key for ``purpose`` at ``indices`` (each in [0, 2**32)) of the run seeded ``seed``."""
  if purpose not in PURPOSES:
    raise ValueError(f"unknown key purpose '{purpose}'; known: {sorted(PURPOSES)}.")
  key = jax.random.fold_in(jax.random.key(seed), PURPOSES[purpose])
  for i in indices:
    i = int(i)
    if not 0 <= i < 2**32:
      raise ValueError(f"run_key({purpose!r}) index {i} is outside [0, 2**32).")
    key = jax.random.fold_in(key, i)
  return key


def numpy_rng(seed: int, purpose: str, *indices: int) -> np.random.Generator:
  """A host (NumPy) stream named like ``run_key``: seeded by that key's data."""
  return np.random.default_rng(np.asarray(jax.random.key_data(run_key(seed, purpose, *indices))).tolist())


# name -> (NumPy seed from the stream's inputs, what the inputs are).
SEEDED_STREAMS: dict[str, tuple[Callable[..., object], str]] = {
    "pretrain_tasks": (lambda seed: seed, "the pre-training seed: its tasks"),
    "pretrain_noise": (lambda seed: seed + 7, "the pre-training seed: its demonstrations' noise"),
    "task_draw": (lambda seed, index: [seed, index], "the run seed and the draw index: a training draw"),
    "task_domains": (lambda domain_seed: domain_seed, "a draw's domain seed: the curriculum's choice"),
    "eval_set": (lambda seed: seed, "eval.seed: the held-out tasks"),
    "task_sampler": (lambda seed: seed, "a fixed-weight TaskSampler's seed"),
}


def seeded_rng(stream: str, *inputs: int) -> np.random.Generator:
  """The NumPy stream ``stream`` (one of ``SEEDED_STREAMS``) for ``inputs``."""
  if stream not in SEEDED_STREAMS:
    raise ValueError(f"unknown seeded stream '{stream}'; known: {sorted(SEEDED_STREAMS)}.")
  derive, _ = SEEDED_STREAMS[stream]
  return np.random.default_rng(derive(*(int(i) for i in inputs)))


def key_width() -> int:
  """uint32 words in a key's data (``jax.random.key_data``) under the configured PRNG."""
  return jax.random.key_data(jax.random.key(0)).shape[-1]


def init_key(seed: int) -> jax.Array:
  """The pre-trained base's initial parameters' key (older than ``run_key``)."""
  return jax.random.key(seed)
