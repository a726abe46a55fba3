"""The fast sampling paths run the model's own forward: every model option the
model implements works there, and the attention options a cache layout does
not implement are refused by name."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlpt.models import ModelConfig, Transformer
from rlpt.sampling import Sampler, SamplingParams
from rlpt.sampling.fast import FastSampler, FlatLayout, cached_forward, check_model_cfg
from rlpt.sampling.prefix import PrefixLayout
from rlpt.steps import forward_logits

# Each option as an imported family sets it (Qwen2 bias, Qwen3 qk-norm, Gemma
# embedding scale / offset norms / GELU / post-norms / final soft cap, Llama-3
# RoPE scaling, an attention scale other than head_dim**-0.5).
FAMILY_OPTIONS = [
    {"qkv_bias": True}, {"qk_norm": True},
    {"embed_scale": True, "norm_offset": 1.0, "mlp_activation": "gelu_tanh", "post_norms": True,
     "final_logit_softcap": 30.0},
    {"attn_scale": 0.2},
    {"rope_scaling": {"kind": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position": 16}},
]


def _model(option):
  cfg = ModelConfig(**{k: v for k, v in option.items() if k != "rope_scaling"})
  if "rope_scaling" in option:
    from rlpt.config.model import RopeScaling
    cfg = dataclasses.replace(cfg, rope_scaling=RopeScaling(**option["rope_scaling"]))
  model = Transformer(cfg, nnx.Rngs(3))
  graphdef, params = nnx.split(model)
  # Biases and norm scales start at 0 / 1: move them so that the option changes the output.
  params = jax.tree.map(lambda x: x + 0.05 * jax.random.normal(jax.random.key(x.size), x.shape),
                        params)
  return cfg, graphdef, params


@pytest.mark.parametrize("option", FAMILY_OPTIONS, ids=lambda o: ",".join(o))
def test_cached_forward_runs_every_model_option(option):
  """Logits over the flat cache layout equal the model's full causal pass (2e-5)."""
  layout = FlatLayout()
  cfg, graphdef, params = _model(option)
  check_model_cfg(cfg)
  tokens = jax.random.randint(jax.random.key(5), (2, 12), 0, cfg.vocab_size)
  ref = forward_logits(graphdef, params, tokens)
  pos = jnp.broadcast_to(jnp.arange(12), (2, 12))
  got, _ = cached_forward(graphdef, params, tokens, pos, layout.init(cfg, 2, 12), layout)
  np.testing.assert_allclose(np.asarray(got), np.asarray(ref), atol=2e-5, rtol=0)


@pytest.mark.parametrize("option", FAMILY_OPTIONS[:3], ids=lambda o: ",".join(o))
def test_fast_samplers_sample_what_the_plain_sampler_samples(option):
  """Greedy decoding with the flat and the prefix-shared fast samplers gives the
  plain sampler's tokens and log-probs for models with imported-family options."""
  cfg, graphdef, params = _model(option)
  rng = np.random.default_rng(0)
  lengths = np.array([5, 9, 5, 9], np.int32)
  ids = np.zeros((4, 12), np.int32)
  for i, n in enumerate(lengths):
    ids[i, :n] = rng.integers(3, cfg.vocab_size, n)
  ids[1], ids[3] = ids[0], ids[2]  # groups of 2 share a prompt (prefix layout)
  lengths[1], lengths[3] = lengths[0], lengths[2]
  args = (12, 6, 0, ())
  greedy = SamplingParams(0.0)
  ref = Sampler(graphdef, cfg, *args).generate(params, ids, lengths, jax.random.key(0), greedy)
  for layout, rows in ((FlatLayout(), ids), (PrefixLayout(2), ids[::2])):
    lens = lengths if layout.group_size == 1 else lengths[::2]
    out = FastSampler(graphdef, cfg, *args, layout).generate(params, rows, lens,
                                                              jax.random.key(0), greedy)
    np.testing.assert_array_equal(np.asarray(out.tokens), np.asarray(ref.tokens))
    np.testing.assert_allclose(np.asarray(out.logprobs), np.asarray(ref.logprobs), atol=2e-4)


@pytest.mark.parametrize("option", [{"attention_window": 8}, {"attn_logit_softcap": 50.0},
                                    {"layer_windows": (8, 0)}])
def test_attention_options_layouts_lack_are_refused_by_name(option):
  name = next(iter(option))
  cfg = ModelConfig(**({"num_layers": 2} if name == "layer_windows" else {}), **option)
  graphdef = nnx.split(Transformer(cfg, nnx.Rngs(0)))[0]
  with pytest.raises(ValueError, match=name):
    check_model_cfg(cfg)
  with pytest.raises(ValueError, match=name):
    FastSampler(graphdef, cfg, 12, 6, 0, (), FlatLayout())
