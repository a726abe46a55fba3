"""Content-hashed train/eval splits.

A task belongs to "eval" iff blake2b(task.key) % EVAL_MODULUS == 0, so the split
is a pure function of the task's canonical content: disjoint by construction,
stable across processes and library versions, and shared by every domain that
can generate the same content. `draw` rejection-samples until the split matches;
with a 1-in-10 eval rate that costs ~10 draws per eval reset. A domain that
assigns its own splits (`Domain.sample_in_split`, e.g. a dataset file with a
split column) is asked directly instead.
"""

from __future__ import annotations

import hashlib

import numpy as np

from environments.registry import Domain
from environments.verdicts import Problem

SPLITS = ("train", "eval")
EVAL_MODULUS = 10
# A domain whose eval bucket is empty (task space too small) must fail loudly
# rather than loop forever; 2000 draws miss a 1/10 bucket with prob. ~1e-92.
MAX_DRAWS = 2000


def _digest(key: str) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest(), "little")


def split_of(key: str) -> str:
    return "eval" if _digest(key) % EVAL_MODULUS == 0 else "train"


def task_id(key: str) -> str:
    """Short stable id of a task's content (16 hex chars)."""
    return hashlib.blake2b(key.encode("utf-8"), digest_size=8).hexdigest()


def check_split(split: str) -> str:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; allowed: {SPLITS}")
    return split


def draw(domain: Domain, rng: np.random.Generator, split: str) -> Problem:
    """A task of `split`: the domain's own `sample_in_split` if it has one, else
    tasks drawn from `domain` with `rng` until one falls in `split`."""
    check_split(split)
    task = domain.sample_in_split(rng, split)
    if task is not None:
        return task
    for _ in range(MAX_DRAWS):
        task = domain.sample(rng)
        if split_of(task.key) == split:
            return task
    raise RuntimeError(
        f"domain {domain.spec.id!r} produced no {split!r} task in {MAX_DRAWS} draws; "
        "its task space is too small to split"
    )
