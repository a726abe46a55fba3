"""Speculative decoding inside RL rollouts: the draft, its distillation, adaptive gamma.

``SpeculativeRollout`` owns what a run needs to sample speculatively: a draft
model of the configured shape (``speculative.draft_*``), a `DraftDistiller`
that trains it on the policy's own samples (``warm_up`` before the first RL
step, then ``refresh`` on trained batches every ``distill_every`` steps, as
the policy drifts away from it), the gamma in use (fixed, or chosen by
`AdaptiveGamma` from the measured acceptance rate) and one jitted program per
(gamma, sampling, layout). Its samples follow the policy's distribution
exactly and carry the policy's log-probs, so RL is unchanged.
"""

from __future__ import annotations

import threading

import jax
import jax.numpy as jnp
from flax import nnx

from rlpt.config import OptimConfig
from rlpt.distill import DraftDistiller
from rlpt.models import Transformer
from rlpt.device import RunContext, jit_spec_sampler, place_params, to_host
from rlpt.rollout.sections import SampledModel, SourceConfig
from rlpt.sampling.speculative import AdaptiveGamma, SpeculativeSampler
from rlpt.sharding import state_shardings
from rlpt.steps import make_optimizer


class SpeculativeRollout:
  """Draft model + distiller + gamma schedule + jitted speculative programs.

  ``param_sh``: the policy's shardings as the sampler holds it (int8 or not);
  ``layouts``: {grouped: cache layout} ({False: flat} and, with prefix
  sharing, {True: prefix layout}); ``stop_ids``: the tokens sampling stops at
  (the run's prompt format's).
  """

  def __init__(self, cfg: SourceConfig, ctx: RunContext, model: SampledModel, param_sh,
               layouts: dict, stop_ids: tuple[int, ...]):
    spec_cfg, ro, tok = cfg.speculative, cfg.rollout, ctx.tokenizer
    self.cfg, self.ctx = spec_cfg, ctx
    self.graphdef, self.model_cfg, self.layouts = model.graphdef, model.model_cfg, layouts
    self.args = (ro.max_prompt_len, ro.max_new_tokens, tok.pad_id, tuple(stop_ids))
    self.param_sh, self.mesh, self.rules = param_sh, ctx.mesh, ctx.sample_rules
    self.draft_cfg = spec_cfg.draft_config(model.model_cfg)
    self.draft_graphdef, params = nnx.split(Transformer(self.draft_cfg,
                                                       nnx.Rngs(ctx.key("draft_init"))))
    self.draft_sh = state_shardings(params, self.mesh, self.rules)
    params = place_params(params, self.mesh, self.rules)
    steps = spec_cfg.warmup_steps + spec_cfg.distill_steps * cfg.steps
    self.distiller = DraftDistiller(
        self.draft_graphdef, params, model.graphdef,
        make_optimizer(OptimConfig(learning_rate=spec_cfg.draft_lr), max(steps, 1)),
        every=spec_cfg.distill_every, steps=spec_cfg.distill_steps)
    self.schedule = (AdaptiveGamma(gamma=spec_cfg.gamma, max_gamma=spec_cfg.max_gamma,
                                   draft_cost=spec_cfg.draft_cost,
                                   verify_cost=spec_cfg.verify_cost)
                     if spec_cfg.adaptive else None)
    self.gamma = spec_cfg.gamma
    self.warm = spec_cfg.warmup_steps == 0
    self._fns: dict = {}
    self._lock = threading.Lock()
    self._proposed = self._accepted = self._calls = 0
    self._publish()

  def _publish(self):
    # The distiller donates its state on every update; samplers (possibly on
    # other threads) read a copy that outlives it.
    self.draft_params = jax.tree.map(jnp.copy, self.distiller.params)

  def _fn(self, sampling, grouped: bool):
    key = (self.gamma, sampling, grouped)
    if key not in self._fns:
      sampler = SpeculativeSampler(self.graphdef, self.model_cfg, self.draft_graphdef,
                                   self.draft_cfg, *self.args, gamma=self.gamma,
                                   layout=self.layouts[grouped])
      self._fns[key] = jit_spec_sampler(self.ctx.programs, sampler, sampling, self.param_sh,
                                        self.draft_sh, self.mesh, self.rules)
    return self._fns[key]

  def generate(self, params, prompts, lengths, key_data, sampling, grouped: bool = False):
    """One speculative generate call (global arrays in, SampleOutput out); updates gamma."""
    with self._lock:
      fn = self._fn(sampling, grouped)
    out, stats = fn(params, self.draft_params, prompts, lengths, key_data)
    stats = to_host(stats)
    with self._lock:
      self._proposed += int(stats.proposed)
      self._accepted += int(stats.accepted)
      self._calls += int(stats.target_calls)
      if self.schedule is not None and int(stats.proposed):
        self.gamma = self.schedule.update(float(stats.accepted) / float(stats.proposed))
    return out

  def distill(self, teacher_params, tokens, loss_mask) -> dict:
    metrics = self.distiller.update(teacher_params, tokens, loss_mask)
    self._publish()
    return metrics

  def refresh(self, step: int, teacher_params, tokens, loss_mask) -> dict:
    """Keeps the draft fresh: distillation on a trained batch every ``distill_every`` steps."""
    metrics = self.distiller.maybe_update(step, teacher_params, tokens, loss_mask)
    if metrics:
      self._publish()
    return metrics

  def metrics(self) -> dict:
    """Acceptance rate and target calls since the last call, and the gamma in use."""
    with self._lock:
      out = {"speculative/gamma": float(self.gamma)}
      if self._proposed:
        out["speculative/acceptance"] = self._accepted / self._proposed
        out["speculative/target_calls"] = float(self._calls)
      self._proposed = self._accepted = self._calls = 0
    return out

