"""LoRA: starts at the base, trains only the adapters, merges for the sampler,
shards like its weights and saves in PEFT's layout."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from rlpt.models import ModelConfig, Transformer
from rlpt.models.hf import hf_state_dict
from rlpt.models.lora import (LoraConfig, apply_lora, init_lora, load_adapters,
                              merge_lora, num_adapter_params, peft_tensors,
                              save_adapters)
from rlpt.rl import LossConfig
from rlpt.sampling import Sampler, SamplingParams
from rlpt.sharding import DEFAULT_RULES, make_mesh, state_shardings
from rlpt.steps import (LossCounts, RLBatch, TrainState, forward_logits, lora_rl_train_step,
                        sequence_logprobs)

CFG = ModelConfig(vocab_size=64, d_model=32, num_layers=2, num_heads=4, num_kv_heads=2,
                  head_dim=8, mlp_dim=48, tie_embeddings=False, scale_tied_head=False)
LORA = LoraConfig(rank=4, alpha=8.0)


# Everything below runs jitted: on CPU, op-by-op execution compiles each op.
@pytest.fixture(scope="module")
def base():
  graphdef, _ = nnx.split(nnx.eval_shape(lambda: Transformer(CFG, nnx.Rngs(0))))
  params = jax.jit(lambda: nnx.split(Transformer(CFG, nnx.Rngs(0)))[1])()
  return graphdef, params


_init = jax.jit(init_lora, static_argnums=1)
_fwd = jax.jit(forward_logits, static_argnums=0)
_fwd_lora = jax.jit(lambda g, p, a, t: forward_logits(g, apply_lora(p, a, LORA), t),
                    static_argnums=0)
_logprobs = jax.jit(sequence_logprobs, static_argnums=(0, 3))


@jax.jit
def _randomize_b(adapters, key):
  leaves, tree = jax.tree.flatten(adapters)
  keys = jax.random.split(key, len(leaves))
  return jax.tree.unflatten(tree, [x + 0.1 * jax.random.normal(k, x.shape)
                                   for x, k in zip(leaves, keys)])


def test_adapters_start_at_the_base_and_have_weight_axes(base):
  graphdef, params = base
  adapters = _init(params, LORA, jax.random.key(1))
  ab = adapters["decoder"]["blocks"][0]["attn"]["wo"]
  assert ab["lora_a"].get_value().shape == (4, 8, 4) and ab["lora_b"].get_value().shape == (4, 32)
  assert ab["lora_a"].get_metadata()["axes"] == ("heads", "head_dim", None)
  assert not np.any(np.asarray(ab["lora_b"].get_value())) and np.any(np.asarray(ab["lora_a"].get_value()))
  tokens = jax.random.randint(jax.random.key(2), (2, 9), 0, 64)
  np.testing.assert_array_equal(np.asarray(_fwd_lora(graphdef, params, adapters, tokens)),
                                np.asarray(_fwd(graphdef, params, tokens)))
  # 2 layers, rank 4: wq, wo (32 in + 32 out), wk, wv (32 + 16), gate, up, down (32 + 48).
  assert num_adapter_params(adapters) == 2 * 4 * (2 * (32 + 32) + 2 * (32 + 16) + 3 * (32 + 48))


def test_merge_equals_w_plus_scaled_ab(base):
  _, params = base
  adapters = _randomize_b(_init(params, LORA, jax.random.key(1)), jax.random.key(3))
  merged = merge_lora(params, adapters, LORA)
  ab = adapters["decoder"]["blocks"][1]["mlp"]["w_down"]
  want = (params["decoder"]["blocks"][1]["mlp"]["w_down"].get_value()
          + LORA.scale * ab["lora_a"].get_value() @ ab["lora_b"].get_value())
  np.testing.assert_allclose(merged["decoder"]["blocks"][1]["mlp"]["w_down"].get_value(), want,
                             rtol=1e-6)
  np.testing.assert_array_equal(merged["decoder"]["embed"].get_value(),
                                params["decoder"]["embed"].get_value())


def test_sampler_reads_the_merged_params(base):
  graphdef, params = base
  adapters = _randomize_b(_init(params, LORA, jax.random.key(1)), jax.random.key(4))
  merged = merge_lora(params, adapters, LORA)
  sampler = Sampler(graphdef, CFG, 4, 6, pad_id=0, stop_ids=())
  prompts = np.array([[1, 5, 9, 2], [1, 7, 0, 0]])
  out = sampler.generate(merged, prompts, np.array([4, 2]), jax.random.key(0), SamplingParams(0.0))
  # Greedy tokens re-scored by a full pass of the LoRA-applied model are its argmaxes.
  row = np.concatenate([prompts[0], np.asarray(out.tokens)[0]])
  logits = _fwd_lora(graphdef, params, adapters, row[None, :-1])
  np.testing.assert_array_equal(np.argmax(np.asarray(logits)[0, 3:], -1), row[4:])


def _batch(key):
  tokens = jax.random.randint(key, (4, 10), 1, 64)
  mask = jnp.zeros((4, 9)).at[:, 4:].set(1.0)
  adv = jnp.array([1.0, -1.0, 0.5, -0.5])[:, None] * mask
  return tokens, mask, adv


def test_gradient_and_optimizer_cover_only_the_adapters(base):
  graphdef, params = base
  adapters = _init(params, LORA, jax.random.key(1))
  optimizer = optax.adam(1e-2)
  state = TrainState(jnp.zeros((), jnp.int32), adapters, optimizer.init(adapters))
  # The optimizer state holds two moments of the adapters, nothing of the base.
  assert sum(x.size for x in jax.tree.leaves(state.opt_state)) == 1 + 2 * num_adapter_params(adapters)
  tokens, mask, adv = _batch(jax.random.key(5))
  sampling = SamplingParams(1.0)
  ref = _logprobs(graphdef, params, tokens, sampling)
  batch = RLBatch(tokens, mask, ref, ref, adv)
  counts = LossCounts(mask.sum(), jnp.asarray(4.0))
  step = jax.jit(lambda s, b: lora_rl_train_step(
      s, b, batch, counts, jnp.asarray(0.0), graphdef=graphdef, optimizer=optimizer,
      loss_cfg=LossConfig(), sampling=sampling, lora_cfg=LORA))

  # The traced step's gradient outputs are adapter-shaped only: no array of a
  # base-only shape (embedding [64, 32], wq [32, 4, 8], ...) is an output.
  out_shapes = {tuple(x.shape) for x in jax.tree.leaves(jax.eval_shape(step, state, params))}
  assert (64, 32) not in out_shapes and (32, 4, 8) not in out_shapes and (32, 48) not in out_shapes

  # With B = 0 the first gradient reaches B only (dL/dA = dL/dW @ B^T = 0).
  def loss(ad):
    return jnp.sum(forward_logits(graphdef, apply_lora(params, ad, LORA), tokens) ** 2)
  g = jax.jit(jax.grad(loss))(adapters)
  gab = g["decoder"]["blocks"][0]["attn"]["wq"]
  assert not np.any(np.asarray(gab["lora_a"].get_value()))
  assert np.any(np.asarray(gab["lora_b"].get_value()))

  before = jax.tree.map(np.asarray, params)
  state2, metrics = step(state, params)
  state2, _ = step(state2, params)
  assert np.isfinite(float(metrics["loss"])) if "loss" in metrics else True
  jax.tree.map(np.testing.assert_array_equal, jax.tree.map(np.asarray, params), before)
  moved = state2.params["decoder"]["blocks"][0]["attn"]["wq"]["lora_b"].get_value()
  assert np.any(np.asarray(moved))
  # The policy moved towards the positive-advantage row and away from the negative one.
  new = _logprobs(graphdef, merge_lora(params, state2.params, LORA), tokens, sampling)
  delta = np.asarray(((new - ref) * mask).sum(1))
  assert delta[0] > 0 and delta[1] < 0


def test_adapters_shard_like_their_weights(base):
  _, params = base
  adapters = _init(params, LORA, jax.random.key(1))
  mesh = make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
  sh = state_shardings(adapters, mesh, DEFAULT_RULES)
  a = sh["decoder"]["blocks"][0]["attn"]["wq"]["lora_a"].get_value()
  b = sh["decoder"]["blocks"][0]["attn"]["wq"]["lora_b"].get_value()
  assert tuple(a.spec) == ("fsdp", None) and tuple(b.spec) == (None, "tensor", None)


def test_peft_layout_and_round_trip(base, tmp_path):
  _, params = base
  adapters = _randomize_b(_init(params, LORA, jax.random.key(1)), jax.random.key(6))
  t = peft_tensors(adapters)
  name = "base_model.model.model.layers.0.self_attn.o_proj"
  assert t[f"{name}.lora_A.weight"].shape == (4, 32) and t[f"{name}.lora_B.weight"].shape == (32, 4)
  # PEFT's merge (W_hf + scale * B @ A) equals rlpt's merge in the HF layout.
  merged_hf = hf_state_dict(merge_lora(params, adapters, LORA), CFG, "llama")
  base_hf = hf_state_dict(params, CFG, "llama")
  for i in range(2):
    for mod in ("self_attn.q_proj", "self_attn.o_proj", "mlp.down_proj"):
      n = f"model.layers.{i}.{mod}.weight"
      p = f"base_model.model.model.layers.{i}.{mod}"
      np.testing.assert_allclose(
          merged_hf[n], base_hf[n] + LORA.scale * t[f"{p}.lora_B.weight"] @ t[f"{p}.lora_A.weight"],
          atol=1e-5)
  save_adapters(str(tmp_path), adapters, LORA, base_model="tiny")
  back, cfg = load_adapters(str(tmp_path), params)
  assert cfg.rank == 4 and cfg.alpha == 8.0 and set(cfg.targets) == set(LORA.targets)
  jax.tree.map(lambda x, y: np.testing.assert_allclose(np.asarray(x), np.asarray(y)),
               nnx.to_pure_dict(back), nnx.to_pure_dict(adapters))


def _merged_forward(graphdef, params, adapters, tokens):
  """The reference: the model on plain weights W + scale * A @ B."""
  return forward_logits(graphdef, merge_lora(params, adapters, LORA), tokens)


def test_factored_adapters_equal_the_merged_weights_in_logits_and_gradients(base):
  graphdef, params = base
  adapters = _randomize_b(_init(params, LORA, jax.random.key(1)), jax.random.key(6))
  tokens = jax.random.randint(jax.random.key(7), (2, 9), 0, 64)
  np.testing.assert_allclose(np.asarray(_fwd_lora(graphdef, params, adapters, tokens)),
                             np.asarray(jax.jit(_merged_forward, static_argnums=0)(
                                 graphdef, params, adapters, tokens)), atol=1e-5, rtol=1e-5)

  def loss(fwd):
    return lambda ad: jnp.sum(jnp.tanh(fwd(graphdef, params, ad, tokens)))
  factored = jax.jit(jax.grad(loss(lambda g, p, a, t: forward_logits(g, apply_lora(p, a, LORA), t))))
  merged = jax.jit(jax.grad(loss(_merged_forward)))
  for got, want in zip(jax.tree.leaves(factored(adapters)), jax.tree.leaves(merged(adapters))):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5, rtol=1e-4)


def test_the_update_forms_no_weight_sized_product(base):
  """Differentiating the factored form never builds the frozen weights'
  gradient: no dot in the traced backward has a base weight's shape (the
  merged form has one per adapted weight, x^T dy)."""
  graphdef, params = base
  adapters = _randomize_b(_init(params, LORA, jax.random.key(1)), jax.random.key(8))
  tokens = jax.random.randint(jax.random.key(9), (2, 9), 0, 64)

  def dot_shapes(fwd):
    grad = jax.jit(jax.grad(lambda ad: jnp.sum(fwd(graphdef, params, ad, tokens))))
    text = grad.lower(adapters).as_text()  # StableHLO, as autodiff built it
    return {tuple(int(d) for d in m.split("x")[:-1])
            for m in re.findall(r"stablehlo\.dot_general.*-> tensor<([\dx]+f32)>", text)}

  weights = {(32, 48), (48, 32), (32, 4, 8), (4, 8, 32), (32, 2, 8)}  # gate/up, down, wq, wo, wk/wv
  factored = dot_shapes(lambda g, p, a, t: forward_logits(g, apply_lora(p, a, LORA), t))
  merged = dot_shapes(_merged_forward)
  assert not weights & factored
  assert weights & merged  # the check can see them
