"""Shared-prefix scoring and updates equal the plain full-batch ones.

A GRPO group's rows share their prompt; ``rlpt.steps.SharedPrefix`` runs it
once per group. Reference: the same functions without it (a full causal pass
per row). Tolerances: log-probs 2e-5 absolute (fp32, different summation
order), gradients 1e-4 relative to each leaf's largest entry.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlpt.models import ModelConfig, Transformer
from rlpt.rl import LossConfig
from rlpt.sampling import SamplingParams
from rlpt.steps import (LossCounts, RLBatch, SharedPrefix, check_shared_prefix, find_shared_prefix,
                        policy_loss, sequence_logprobs)

CFG = ModelConfig(vocab_size=64, d_model=32, num_layers=2, num_heads=4, num_kv_heads=2,
                  head_dim=8, mlp_dim=64)
GROUP, PROMPTS, PREFIX, LENGTH = 4, 3, 9, 21


def _tokens(seed=0):
  rng = np.random.default_rng(seed)
  prompt = np.repeat(rng.integers(1, 64, size=(PROMPTS, PREFIX)), GROUP, axis=0)
  return np.concatenate([prompt, rng.integers(1, 64, size=(PROMPTS * GROUP, LENGTH - PREFIX))],
                        axis=1).astype(np.int32)


@pytest.mark.parametrize("cfg", [
    CFG,
    dataclasses.replace(CFG, qk_norm=True, attn_logit_softcap=20.0, final_logit_softcap=15.0),
    dataclasses.replace(CFG, attention_window=6),
    dataclasses.replace(CFG, tie_embeddings=True, qkv_bias=True),
], ids=["llama", "softcaps", "window", "tied-bias"])
@pytest.mark.parametrize("sampling", [SamplingParams(1.0), SamplingParams(0.7, top_k=9)],
                         ids=["t1", "topk"])
def test_shared_prefix_logprobs_equal_plain(cfg, sampling):
  graphdef, params = nnx.split(Transformer(cfg, nnx.Rngs(1)))
  tokens = jnp.asarray(_tokens())
  plain = sequence_logprobs(graphdef, params, tokens, sampling)
  # Any prefix length up to the common prompt, including one ending mid-prompt.
  for n in (PREFIX, PREFIX - 3):
    shared = sequence_logprobs(graphdef, params, tokens, sampling, SharedPrefix(n, GROUP))
    np.testing.assert_allclose(np.asarray(shared), np.asarray(plain), atol=2e-5, rtol=0)


def test_shared_prefix_gradients_equal_plain():
  graphdef, params = nnx.split(Transformer(CFG, nnx.Rngs(2)))
  tokens = jnp.asarray(_tokens(1))
  b = tokens.shape[0]
  sampling = SamplingParams(1.0)
  rng = np.random.default_rng(3)
  mask = jnp.asarray(np.arange(1, LENGTH)[None, :] >= PREFIX, jnp.float32).repeat(b, 0)
  old = sequence_logprobs(graphdef, params, tokens, sampling)
  ref = old + jnp.asarray(rng.normal(size=old.shape) * 0.05, jnp.float32)
  adv = jnp.asarray(rng.normal(size=(b, 1)), jnp.float32) * mask
  batch = RLBatch(tokens, mask, old, ref, adv)
  counts = LossCounts(mask.sum(), jnp.float32(b))
  loss_cfg = LossConfig(policy_loss="ppo_clip", kl_beta=0.04, kl_estimator="k3",
                        entropy_coef=0.01)

  def grads(shared):
    fn = lambda p: policy_loss(p, batch, counts, jnp.float32(0.04), graphdef=graphdef,
                               loss_cfg=loss_cfg, sampling=sampling, shared=shared)[0]
    return jax.grad(fn)(params)

  want, got = grads(None), grads(SharedPrefix(PREFIX, GROUP))
  for w, g in zip(jax.tree.leaves(want), jax.tree.leaves(got)):
    scale = float(jnp.max(jnp.abs(w)))
    assert scale > 0
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=1e-4 * scale, rtol=0)


def test_find_and_check_shared_prefix():
  t = _tokens()
  assert find_shared_prefix(t, GROUP, multiple=1) == SharedPrefix(PREFIX, GROUP)
  assert find_shared_prefix(t, GROUP, multiple=4) == SharedPrefix(8, GROUP)
  assert find_shared_prefix(t, GROUP, multiple=16) is None  # rounds down to 0
  assert find_shared_prefix(t, 1) is None
  assert find_shared_prefix(t[:-1], GROUP) is None  # not whole groups
  # Identical rows: the prefix stops short of the last scored position.
  same = np.repeat(t[:1], GROUP, axis=0)
  assert find_shared_prefix(same, GROUP, multiple=1) == SharedPrefix(LENGTH - 2, GROUP)
  check_shared_prefix(t, SharedPrefix(PREFIX, GROUP))
  bad = t.copy()
  bad[GROUP + 1, 2] += 1  # group 1 breaks the promise
  with pytest.raises(ValueError, match=r"groups \[1\] do not share their first 9 tokens"):
    check_shared_prefix(bad, SharedPrefix(PREFIX, GROUP))
  with pytest.raises(ValueError, match="not whole groups"):
    check_shared_prefix(t[:-1], SharedPrefix(PREFIX, GROUP))
