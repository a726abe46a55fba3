"""The models of a run and their RL update: `Actor`.

    actor = Actor(base, ctx, ActorConfig.from_train(cfg, tokenizer.pad_id))
    metrics = actor.update(batch, step)          # a graded RolloutBatch -> one RL update
    rollout.publish(step, actor.sampling_weights())

The actor holds the policy's train state (full, or LoRA adapters over the
frozen base), the frozen reference, the optional critic, their placements on
the mesh (training layout: FSDP + tensor; the sampler's copy is resharded to
the sampling layout), the KL controller, and one compiled update and scoring
pass per shared-prefix length. ``update`` is the step after the rollout:
behaviour log-probs (a scoring pass when the sampler is not the policy),
reference log-probs, critic values, advantages with reward shaping, then
``rl.ppo_epochs`` x ``rl.minibatches`` jitted updates; its metrics leave the
device once.
"""

from __future__ import annotations

import collections
import functools
import logging
import math
import os
import time

import jax.numpy as jnp
import numpy as np
from flax import nnx

from rlpt.checkpoint import save_model
from rlpt.config import OptimConfig
from rlpt.models import ValueModel
from rlpt.models.hf import save_hf_checkpoint
from rlpt.models.lora import init_lora, merge_lora, save_adapters
from rlpt.packing import Packing, pack_width
from rlpt.rl import (AdvantageInputs, compute_advantages,
                     is_per_token, kl_reward_penalty_BxT, loss_counts, make_kl_controller,
                     overlong_filter_BxT, sequence_kl_B, soft_overlong_penalty_B, truncated_B,
                     truncated_is_weights)
from rlpt.rollout.batch import RolloutBatch
from rlpt.device import (RunContext, batch_multiple, batch_sharding, host_to_global, is_primary,
                         jit_step, make_reshard, place_params, place_train_state, replicated,
                         to_device, to_host, with_rules)
from rlpt.sharding import state_shardings
from rlpt.update import ActorConfig, Base, UpdatePlan, minibatch, plan_update
from rlpt.steps import (LossCounts, RLBatch, SharedPrefix, ValueBatch, find_shared_prefix,
                        lora_rl_train_step, make_optimizer, rl_train_step, sequence_logprobs,
                        sequence_values, value_train_step)

log = logging.getLogger(__name__)


class Actor:
  """The policy, reference and critic of a run, where they live, and their update.

  ``state``: the policy's train state (the LoRA adapters' with ``lora.rank``);
  ``ref_params``: the frozen base (the reference; with LoRA also the policy's
  frozen part); ``value_state``: the critic's train state or None.
  """

  def __init__(self, base: Base, ctx: RunContext, cfg: ActorConfig):
    update = cfg.update
    self.cfg, self.ctx, self.mesh = update, ctx, ctx.mesh
    self.model_cfg, self.graphdef = base.model_cfg, base.graphdef
    self.rules, self.sample_rules = ctx.train_rules, ctx.sample_rules
    mesh, params = ctx.mesh, base.params
    self.optimizer = make_optimizer(cfg.optim, cfg.steps)
    # The reference is a frozen copy of the base: same layout, no optimizer
    # state; with reference_memory="pinned_host" it waits in host memory.
    self.ref_sh = state_shardings(params, mesh, self.rules)
    self.ref_on_host = cfg.reference_memory == "pinned_host"
    self.ref_params = place_params(params, mesh, self.rules,
                                   "pinned_host" if self.ref_on_host else None)
    # With LoRA the trainable state is the adapters; the base stays frozen and
    # doubles as the reference.
    self.lora_cfg = cfg.lora.lora_config() if cfg.lora.rank else None
    trainable = (params if self.lora_cfg is None else
                 init_lora(params, self.lora_cfg, ctx.key("lora_init")))
    self.state, self._state_sh = place_train_state(trainable, self.optimizer, mesh, self.rules)
    self.sample_shardings = state_shardings(params, mesh, self.sample_rules)
    self._to_sample_layout = make_reshard(self.ref_sh, self.sample_shardings,
                                          copy=cfg.sample_copy)
    self._bs2, self._rep = batch_sharding(mesh, self.rules, 2), replicated(mesh)
    self._counts_sh = LossCounts(self._rep, self._rep)
    # Packed rows (rlpt.packing) where the loss and the model allow them.
    self.packs = (update.rl.pack_sequences and is_per_token(update.loss)
                  and self.model_cfg.full_dense_attention)
    self._row_multiple = batch_multiple(mesh, self.rules)
    self._train_step_for = functools.cache(self._make_train_step)
    self._logprobs_for = functools.cache(self._make_logprobs)
    rl = update.rl
    self.kl_ctl = make_kl_controller(
        rl.kl_controller, rl.kl_beta,
        **({"target": rl.kl_target, "horizon": rl.kl_horizon}
           if rl.kl_controller == "adaptive" else {}))
    self.value_state = None
    if cfg.value_optim is not None:
      self._init_critic(params, cfg.value_optim, cfg.steps)

  def _init_critic(self, params: nnx.State, optim: OptimConfig, steps: int) -> None:
    """The critic: its trunk starts from the base policy's decoder, its head at 0."""
    ctx, bs2 = self.ctx, self._bs2
    vgraph, vparams = nnx.split(ValueModel(self.model_cfg, nnx.Rngs(ctx.key("value_init"))))
    vparams["decoder"] = params["decoder"]
    self.value_optimizer = make_optimizer(optim, steps)
    self.value_state, vstate_sh = place_train_state(vparams, self.value_optimizer, ctx.mesh,
                                                    self.rules)
    self._value_batch_sh = ValueBatch(bs2, bs2, bs2, bs2)
    self._value_step = jit_step(ctx.programs, value_train_step, vstate_sh,
                                (self._value_batch_sh, self._counts_sh), ctx.mesh,
                                rules=self.rules, graphdef=vgraph, optimizer=self.value_optimizer,
                                value_cfg=self.cfg.value_loss)
    self._values = ctx.programs.jit(
        with_rules(functools.partial(sequence_values, vgraph), ctx.mesh, self.rules),
        in_shardings=(vstate_sh.params, bs2), out_shardings=bs2)

  # --------------------------------------------------------------------------
  # The compiled passes: one update and one scoring pass per shared-prefix
  # length (bucketed) and layout (packed or not); jit compiles once per shape
  # within each.

  def _make_train_step(self, shared: SharedPrefix | None, packed: bool = False):
    u, ctx, rep = self.cfg, self.ctx, self._rep
    batch_sh = self.batch_shardings(packed)
    common = dict(rules=self.rules, graphdef=self.graphdef, optimizer=self.optimizer,
                  loss_cfg=u.loss, sampling=u.sampling, shared=shared, chunk=u.rl.logprob_chunk)
    if self.lora_cfg is None:
      return jit_step(ctx.programs, rl_train_step, self._state_sh,
                      (batch_sh, self._counts_sh, rep), ctx.mesh, **common)
    lora_step = jit_step(ctx.programs, lora_rl_train_step, self._state_sh,
                         (self.ref_sh, batch_sh, self._counts_sh, rep), ctx.mesh,
                         lora_cfg=self.lora_cfg, **common)
    return lambda state, *rest: lora_step(state, self.ref_params, *rest)

  def _make_logprobs(self, shared: SharedPrefix | None, packed: bool = False):
    graphdef, sampling, bs2 = self.graphdef, self.cfg.sampling, self._bs2
    chunk = self.cfg.rl.logprob_chunk

    def logprobs(params, tokens, segments):
      return sequence_logprobs(graphdef, params, tokens, sampling, shared, segments, chunk)
    return self.ctx.programs.jit(with_rules(logprobs, self.mesh, self.rules),
                                 in_shardings=(self.ref_sh, bs2, bs2 if packed else None),
                                 out_shardings=bs2)

  # --------------------------------------------------------------------------
  # The models.

  def policy_params(self) -> nnx.State:
    """The policy's full parameters (the base with the LoRA adapters merged in)."""
    if self.lora_cfg is None:
      return self.state.params
    return merge_lora(self.ref_params, self.state.params, self.lora_cfg)

  def sampling_weights(self) -> nnx.State:
    """The current policy resharded to the sampling layout (the sampler's copy)."""
    return self._to_sample_layout(self.policy_params())

  def reference_params(self) -> nnx.State:
    """The reference on the devices (brought in from host memory if it waits there)."""
    return to_device(self.ref_params, self.ref_sh) if self.ref_on_host else self.ref_params

  def shared_prefix(self, tokens_BxL: np.ndarray) -> SharedPrefix | None:
    """The prefix every GRPO group of the batch shares (its rows' common first
    tokens, at least BOS + prompt), rounded down to a multiple of 8 so that few
    lengths compile; None when sharing is off or would save nothing."""
    g, mb = self.cfg.group_size, self.cfg.rl.minibatches
    if not self.cfg.rl.shared_prefix or (len(tokens_BxL) // mb) % g:
      return None
    return find_shared_prefix(tokens_BxL, g, multiple=8)

  def batch_shardings(self, packed: bool = False) -> RLBatch:
    bs2 = self._bs2
    return RLBatch(bs2, bs2, bs2, bs2, bs2, bs2 if packed else None)

  def logprobs(self, params: nnx.State, tokens_BxL, shared: SharedPrefix | None = None,
               segments_BxL=None):
    """Per-token log-probs [B, L-1] of ``tokens`` under ``params`` (training
    layout), at the rollout's sampling settings; a device array. ``segments``:
    packed rows (rlpt.packing)."""
    packed = segments_BxL is not None
    seg = host_to_global(np.asarray(segments_BxL), self._bs2) if packed else None
    return self._logprobs_for(shared, packed)(
        params, host_to_global(np.asarray(tokens_BxL), self._bs2), seg)

  def train_on(self, batch: RLBatch, counts: LossCounts, kl_coef: float,
               shared: SharedPrefix | None = None, value_batch: ValueBatch | None = None) -> dict:
    """One jitted update of the policy (and the critic, given ``value_batch``)
    on host arrays, packed (``batch.segments``) or not; ``counts`` normalise
    the loss. Returns the update's metrics as device arrays (no host sync)."""
    g_counts = host_to_global(counts, self._counts_sh)
    g_kl_coef = host_to_global(np.float32(kl_coef), self._rep)
    packed = batch.segments is not None
    with self.ctx.busy.busy():
      self.state, m = self._train_step_for(shared, packed)(
          self.state, host_to_global(batch, self.batch_shardings(packed)), g_counts, g_kl_coef)
      if value_batch is not None:
        self.value_state, vm = self._value_step(
            self.value_state, host_to_global(value_batch, self._value_batch_sh), g_counts)
        m = {**m, **vm}
    return m

  # --------------------------------------------------------------------------
  # The update.

  def _packing(self, tokens_BxL, loss_mask_BxT) -> Packing | None:
    """How the rows pack (None: not packing). One packed width per run, the
    longest sequence the rollout can make rounded to the next 2^k or 1.5 * 2^k;
    the row count in units of a sixteenth of the rows (and the batch shards),
    rounded up the ladder of four rungs an octave (rlpt.packing.row_ladder):
    a run compiles each pass for a handful of row counts."""
    if not self.packs:
      return None
    multiple = math.lcm(self._row_multiple, max(1, len(tokens_BxL) // 16))
    width = pack_width(max(tokens_BxL.shape[1], self.cfg.max_len))
    g = self.cfg.group_size
    group = g if self.cfg.rl.shared_prefix and g > 1 and len(tokens_BxL) % g == 0 else 1
    return Packing.plan(tokens_BxL, loss_mask_BxT, self.cfg.pad_id, multiple, width=width,
                        ladder=True, group=group)

  def _advantages(self, batch: RolloutBatch, ref_logp, values):
    """Advantages and value targets for a graded batch; applies reward shaping."""
    u, rl = self.cfg, self.cfg.rl
    mask = batch.loss_mask * batch.valid[:, None]
    rewards = batch.rewards.copy()
    truncated = truncated_B(batch.lengths, batch.stopped, u.max_new_tokens)
    if rl.overlong_filter:
      mask = overlong_filter_BxT(mask, truncated)
    if rl.overlong_buffer:
      rewards = rewards + soft_overlong_penalty_B(batch.lengths, u.max_new_tokens,
                                                  rl.overlong_buffer, rl.overlong_penalty)
    old_logp = jnp.asarray(batch.old_logp)
    seq_kl = sequence_kl_B(old_logp, ref_logp, jnp.asarray(mask))
    token_rewards = None
    if rl.kl_mode == "reward":
      token_rewards = kl_reward_penalty_BxT(old_logp, ref_logp, jnp.asarray(mask),
                                            self.kl_ctl.value)
    adv = compute_advantages(rl.advantage, AdvantageInputs(
        jnp.asarray(rewards), jnp.asarray(mask), u.group_size, jnp.asarray(batch.valid), values,
        token_rewards, rl.gamma, rl.lam, rl.whiten_advantages))
    return mask, adv, float(jnp.mean(seq_kl)), float(truncated.mean())

  def plan(self, batch: RolloutBatch, step: int) -> UpdatePlan:
    """The host-side layout of update ``step`` (rlpt.update): packing or shared
    prefix, and the minibatches' row orders."""
    return plan_update(batch.tokens, batch.loss_mask, step, seed=self.cfg.seed,
                       minibatches=self.cfg.rl.minibatches, epochs=self.cfg.rl.ppo_epochs,
                       packing=self._packing, shared_prefix=self.shared_prefix,
                       group=self.cfg.group_size if self.cfg.rl.shared_prefix else None)

  def update(self, batch: RolloutBatch, step: int) -> dict:
    """RL update ``step`` (1-based) on a graded batch. Returns its metrics:
    ``train/*`` averaged over the minibatch updates, the KL, shaping and
    importance-weight figures, and the time of the reference pass and the update."""
    t = time.perf_counter()
    plan = self.plan(batch, step)
    out = dict(plan.metrics)
    batch, ref_logp, values, is_weight = self._score(batch, plan, out)
    out["time/reference"] = time.perf_counter() - t
    rl_batch, vbatch, kl_coef = self._targets(batch, ref_logp, values, is_weight, out)
    t = time.perf_counter()
    out.update(self._train(rl_batch, vbatch, plan, kl_coef))
    out["time/update"] = time.perf_counter() - t
    # Per-sequence negative log-likelihood of the sampled completions (nats,
    # behaviour policy, the same rows and mean as kl/sequence): the size of
    # the terms that kl/sequence sums.
    out["rollout/nll"] = float(-(np.asarray(batch.old_logp) * np.asarray(rl_batch.loss_mask)).sum(1).mean())
    out["kl/coef"] = kl_coef
    return out

  def _score(self, batch: RolloutBatch, plan: UpdatePlan, out: dict):
    """The device passes before the update: behaviour log-probs (the scoring pass,
    when the sampler is not the policy), the reference's, the critic's values.
    Returns (batch with its behaviour log-probs, ref_logp, values, importance weights)."""
    u, packing = self.cfg, plan.packing
    if packing is None:
      tokens, segments, unpack = host_to_global(batch.tokens, self._bs2), None, np.asarray
    else:
      tokens = host_to_global(packing.tokens(batch.tokens, u.pad_id), self._bs2)
      segments = host_to_global(packing.segments(), self._bs2)
      unpack = packing.unpack
    logprobs = self._logprobs_for(plan.shared, packing is not None)
    is_weight = None
    if u.scoring_pass:
      # Behaviour log-probs from the policy itself; the sampler's (int8)
      # log-probs only enter through the truncated importance weights.
      sampler_logp = batch.old_logp
      with self.ctx.busy.busy():
        batch = batch.replace(old_logp=unpack(to_host(
            logprobs(self.policy_params(), tokens, segments))))
      is_weight, is_metrics = to_host(truncated_is_weights(
          batch.old_logp, sampler_logp, batch.loss_mask, u.rl.tis_cap))
      out.update({f"rollout/{k}": float(v) for k, v in is_metrics.items()})
    ref = self.reference_params()
    with self.ctx.busy.busy():
      ref_logp = unpack(to_host(logprobs(ref, tokens, segments)))
      del ref
      values = None
      if self.value_state is not None:
        values = to_host(self._values(self.value_state.params,
                                      host_to_global(batch.tokens, self._bs2)))
    return batch, ref_logp, values, is_weight

  def _targets(self, batch: RolloutBatch, ref_logp, values, is_weight, out: dict):
    """Advantages (reward shaping, the KL controller's step) and critic targets:
    (RLBatch, ValueBatch or None, the KL coefficient the update uses)."""
    mask, adv, seq_kl, truncated = self._advantages(
        batch, jnp.asarray(ref_logp), None if values is None else jnp.asarray(values))
    kl_coef = self.kl_ctl.value
    self.kl_ctl.update(seq_kl, n_steps=self.cfg.batch_size)
    adv_BxT = np.asarray(adv.adv_BxT)
    if is_weight is not None:
      # A positive per-token weight on the advantage scales the clipped
      # surrogate exactly as it would scale the loss.
      adv_BxT = adv_BxT * is_weight
    mask = np.asarray(mask)
    rl_batch = RLBatch(tokens=batch.tokens, loss_mask=mask, old_logp=batch.old_logp,
                       ref_logp=ref_logp, advantages=adv_BxT)
    vbatch = None
    if values is not None:
      vbatch = ValueBatch(tokens=batch.tokens, loss_mask=mask, old_values=values,
                          returns=np.asarray(adv.returns_BxT))
    out.update({"truncated_fraction": truncated, "kl/sequence": seq_kl})
    return rl_batch, vbatch, kl_coef

  def _train(self, rl_batch: RLBatch, vbatch: ValueBatch | None, plan: UpdatePlan,
             kl_coef: float) -> dict:
    """``rl.ppo_epochs`` x ``rl.minibatches`` jitted updates in the plan's orders;
    their metrics, averaged, leave the device once."""
    mb = plan.minibatches
    c = loss_counts(jnp.asarray(rl_batch.loss_mask))
    # Each minibatch's loss is normalised by the whole batch's counts, so one
    # epoch's gradients add up to the full-batch objective.
    counts = LossCounts(jnp.float32(c.num_tokens) / mb, jnp.float32(c.num_seqs) / mb)
    step_metrics = []  # per update, on device until the last one is done
    for epoch in range(len(plan.orders)):
      for k in range(mb):
        mini, idx = minibatch(rl_batch, plan, epoch, k, self.cfg.pad_id, self._packing)
        step_metrics.append(self.train_on(
            mini, counts, kl_coef, plan.shared,
            None if vbatch is None else vbatch._replace(**{f: getattr(vbatch, f)[idx] for f in vbatch._fields})))
    with self.ctx.busy.busy():
      step_metrics = to_host(step_metrics)  # the metrics leave the device once per step
    sums: dict[str, float] = collections.defaultdict(float)
    for m in step_metrics:
      for key, v in m.items():
        sums[key] += float(v)
    # Truncated importance weights taken in the step are rollout figures.
    rollout_keys = ("sampler_kl", "is_weight_mean", "is_capped_fraction")
    return {f"{'rollout' if key in rollout_keys else 'train'}/{key}": v / len(step_metrics)
            for key, v in sums.items()}

  # --------------------------------------------------------------------------
  # Checkpoints.

  def arrays(self) -> dict:
    """The checkpointed arrays (the reference is saved as a pointer, not weights)."""
    return {"policy": self.state, "value": self.value_state}

  def load_arrays(self, arrays: dict) -> None:
    self.state, self.value_state = arrays["policy"], arrays["value"]

  def state_dict(self) -> dict:
    return {"kl_controller": self.kl_ctl.state_dict()}

  def export(self, directory: str, info: dict, tokenizer=None, tokenizer_from: str = "") -> None:
    """The policy as a plain parameter checkpoint (rlpt.checkpoint.save_model)
    with ``info`` in its metadata, and as a Hugging Face checkpoint under
    ``directory/hf`` with its tokenizer (the byte tokenizer's files, or those
    of the Hugging Face base in ``tokenizer_from``), for transformers, TRL and
    vLLM; with LoRA also the adapters alone, PEFT layout, under
    ``directory/adapters``. Every process calls it (it gathers)."""
    params = to_host(self.policy_params())
    save_model(directory, params, self.model_cfg, info)
    if is_primary():
      try:
        save_hf_checkpoint(os.path.join(directory, "hf"), params, self.model_cfg,
                           tokenizer=tokenizer, tokenizer_from=tokenizer_from or None)
      except ValueError as e:  # a model option no Hugging Face family has
        log.warning("No Hugging Face export of this policy: %s", e)
    if self.lora_cfg is not None:
      adapters = to_host(self.state.params)
      if is_primary():
        save_adapters(os.path.join(directory, "adapters"), adapters, self.lora_cfg)

  def load_state_dict(self, state: dict) -> None:
    self.kl_ctl.load_state_dict(state["kl_controller"])
