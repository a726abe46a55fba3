"""The rollout's sampling side: samplers built from the run's switches, the
sampler's copy of the policy, and generation over host arrays.

Plain runs use ``Sampler`` (every model option). The fast path (int8 weights
or KV cache, prefix sharing) uses ``FastSampler`` with a flat cache plus, with
``share_prefix``, a second one whose GRPO groups share their prompt's cache
(the first turn of grouped rollouts). ``speculative.gamma`` adds a distilled
draft (rlpt.rollout.speculative). Every generate program is jitted once per
sampling mode with explicit shardings over the mesh's sampling layout.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import numpy as np
from flax import nnx

from rlpt.device import (RunContext, batch_multiple, batch_sharding, check_batch, host_to_global,
                         jit_sampler, replicated, row_bucket, to_host)
from rlpt.engine import Engine
from rlpt.rollout.sections import SampledModel, SourceConfig
from rlpt.sampling import Sampler, SamplingParams
from rlpt.sampling.sampler import auto_decode_phases
from rlpt.sampling.fast import FastSampler, FlatLayout
from rlpt.rollout.speculative import SpeculativeRollout
from rlpt.sampling.prefix import PrefixLayout
from rlpt.sampling.quant import QuantizedState, quantize_params
from rlpt.tokenizers.prompts import prompt_format


class RolloutSampling:
  """The samplers of a run and the weights they sample with.

  ``params``: the sampler's copy of the policy (set by ``handoff``); ``spec``:
  the speculative draft (``SpeculativeRollout``) or None; ``prompt_format``:
  how the run's prompts and observations become ids
  (rlpt.tokenizers.prompts.prompt_format of ``rollout.chat_template`` /
  ``system_prompt``), whose stop tokens every sampler stops at.
  """

  def __init__(self, cfg: SourceConfig, ctx: RunContext, model: SampledModel):
    ro, speculative, modes = cfg.rollout, cfg.speculative, cfg.modes
    self.rollout_cfg, self.ctx = ro, ctx
    self.mesh, self.sample_rules = ctx.mesh, ctx.sample_rules
    self.params = None
    tokenizer, mesh, rules, programs = ctx.tokenizer, ctx.mesh, ctx.sample_rules, ctx.programs
    graphdef, model_cfg = model.graphdef, model.model_cfg
    self.prompt_format = prompt_format(tokenizer, ro.chat_template, ro.system_prompt)
    stop_ids = self.prompt_format.stop_ids
    args = (ro.max_prompt_len, ro.max_new_tokens, tokenizer.pad_id, stop_ids)
    phases = ro.decode_phases
    if not phases:
      plain = model_cfg.full_dense_attention and not speculative.gamma
      phases = auto_decode_phases(ro.max_new_tokens) if plain else 1
    self.decode_phases = phases
    param_sh = model.shardings
    self.quantize = None
    self.group_generate_fns = {}
    self.speculative = None
    if not (ro.fast_sampler or speculative.gamma):
      self.sampler = Sampler(graphdef, model_cfg, *args, decode_phases=phases)
    else:
      try:
        # Rows in lockstep: each step writes one slot of every row in place
        # (rlpt.sampling.prefix; benchmarks/decode_bytes.py measures it).
        self.sampler = FastSampler(graphdef, model_cfg, *args,
                                   PrefixLayout(1, ro.kv_int8, aligned=True,
                                                decode_kernel=ro.decode_kernel), phases)
      except ValueError as e:
        raise ValueError(f"rollout.weights_int8/kv_int8/share_prefix, speculative.gamma: {e}") from e
      if ro.weights_int8:
        rep = replicated(mesh)
        param_sh = QuantizedState(model.shardings, jax.tree.map(lambda _: rep, model.shardings))
        self.quantize = jax.jit(quantize_params, in_shardings=(model.shardings,),
                                out_shardings=param_sh)
      if ro.share_prefix and ro.group_size > 1:
        check_batch(ro.prompts_per_step, mesh, rules,
                    "rollout.batch_size / rollout.group_size (prompts per step, share_prefix)")
        grouped = FastSampler(graphdef, model_cfg, *args,
                              PrefixLayout(ro.group_size, ro.kv_int8, aligned=True,
                                           decode_kernel=ro.decode_kernel), phases)
        # Grouped rollouts sample at the training temperature only.
        self.group_generate_fns = {
            modes[0]: jit_sampler(programs, grouped, modes[0], param_sh, mesh, rules)}
    self.generate_fns = {sp: jit_sampler(programs, self.sampler, sp, param_sh, mesh, rules)
                         for sp in set(modes)}
    self.engine = None
    if cfg.engine.enabled:
      max_len = cfg.engine.max_len or ro.max_prompt_len + ro.max_new_tokens
      prompt_len = cfg.engine.prompt_len
      if cfg.engine.prompts and not prompt_len:   # a prompt row holds all but a prompt's last token
        prompt_len = ro.max_prompt_len - 1
      self.engine = Engine(dataclasses.replace(cfg.engine, max_len=max_len, prompt_len=prompt_len,
                                               kv_int8=ro.kv_int8), ctx, model, stop_ids)
    if speculative.gamma:
      layouts = {False: FlatLayout(ro.kv_int8)}
      if self.group_generate_fns:
        layouts[True] = PrefixLayout(ro.group_size, ro.kv_int8)
      self.speculative = SpeculativeRollout(cfg, ctx, model, param_sh, layouts, stop_ids)

  def handoff(self, params: nnx.State) -> None:
    """Gives the sampler ``params`` (already in the sampling layout), quantized
    with ``weights_int8``; waits until they are in place."""
    self.params = params if self.quantize is None else self.quantize(params)
    jax.block_until_ready(self.params)

  def generate(self, ids: np.ndarray, lengths: np.ndarray, sampling: SamplingParams,
               key: jax.Array, grouped: bool = False, params=None, bucket_rows: bool = True):
    """Samples one completion per row of right-padded prompts (host arrays in and out).

    ``grouped``: rows come in groups of ``rollout.group_size`` copies of one
    prompt; with ``share_prefix`` each group's prompt is prefilled once.
    ``params``: the weights to sample with (default: the latest handoff). Any
    number of rows up to the rollout batch: fewer (later turns, one domain's
    share of a batch) are padded to the next bucket (the batch halved, down to
    an eighth, while it holds them and splits evenly over the batch shards),
    compiled once per bucket; ``bucket_rows=False`` pads to the whole batch
    (no new program).
    """
    bs2 = batch_sharding(self.mesh, self.sample_rules, 2)
    bs1 = batch_sharding(self.mesh, self.sample_rules, 1)
    fn = self.generate_fns[sampling]
    grouped = grouped and sampling in self.group_generate_fns
    g = 1
    if grouped:
      g = self.rollout_cfg.group_size
      ids, lengths = ids[::g], lengths[::g]
      fn = self.group_generate_fns[sampling]
    n = len(ids)
    full = self.rollout_cfg.batch_size // g
    size = max(full, n)
    if bucket_rows:
      size = row_bucket(n, size, batch_multiple(self.mesh, self.sample_rules),
                        smallest=max(1, full // 8))
    if size > n:
      ids = np.concatenate([ids, np.repeat(ids[:1], size - n, 0)])
      lengths = np.concatenate([lengths, np.repeat(lengths[:1], size - n, 0)])
    if self.speculative is not None and self.speculative.warm:
      fn = functools.partial(self.speculative.generate, sampling=sampling, grouped=grouped)
    with self.ctx.busy.busy():
      out = fn(self.params if params is None else params, host_to_global(ids, bs2),
               host_to_global(lengths, bs1),
               host_to_global(jax.random.key_data(key), replicated(self.mesh)))
      out = to_host(out)
    return tuple(x[:n * g] for x in out)
