"""Where a run runs: `RunContext`, built once and handed to every component.

    ctx = RunContext(mesh, train_rules, sample_rules, seed=cfg.seed, tokenizer=tok)
    actor = Actor(base, ctx, ActorConfig.from_train(cfg, tok.pad_id))
    rollout = make_rollout_source(SourceConfig.from_train(cfg), ctx, ...)

What every component needs about its place and nothing about its job: the
mesh and the rules of the training layout (FSDP + tensor: the update, the
reference and critic passes) and of the sampling layout (tensor only), the
run's compiled programs (`ProgramPool`: bounded, counted, the run's own), the
busy clock of its device work, the seed and its key scheme (`rlpt.keys`), and
the tokenizer. A component takes this (and a sampler its `SampledModel`) and its own config section. Two runs
in one process are two contexts: they share no programs, counts or clock.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh

from rlpt.config.model import ModelConfig

from rlpt.device.programs import ProgramPool
from rlpt.device.telemetry import BusyClock
from rlpt.keys import numpy_rng, run_key
from rlpt.sharding import Rules
from rlpt.tokenizers import Tokenizer


@dataclasses.dataclass(frozen=True, eq=False)
class RunContext:
  """A run's mesh and layouts, programs, busy clock, seed and tokenizer."""

  mesh: Mesh
  train_rules: Rules
  sample_rules: Rules
  seed: int
  tokenizer: Tokenizer
  programs: ProgramPool = dataclasses.field(default_factory=ProgramPool)
  busy: BusyClock = dataclasses.field(default_factory=BusyClock)

  def key(self, purpose: str, *indices: int) -> jax.Array:
    """The run's JAX key for ``purpose`` at ``indices`` (`rlpt.keys.run_key`)."""
    return run_key(self.seed, purpose, *indices)

  def numpy_rng(self, purpose: str, *indices: int) -> np.random.Generator:
    """The run's NumPy stream for ``purpose`` at ``indices`` (`rlpt.keys.numpy_rng`)."""
    return numpy_rng(self.seed, purpose, *indices)


class SampledModel(NamedTuple):
  """The policy as the samplers see it: its config, its graph, and its
  parameters' shardings in the sampling layout (the weights come by handoff)."""

  model_cfg: ModelConfig
  graphdef: nnx.GraphDef
  shardings: nnx.State
