"""Every parameter and optimizer moment lands where its rule says; bad input
fails early with the numbers in the message."""

import jax
import numpy as np
import optax
import pytest
from flax import nnx

from rlpt.config import ConfigError, TrainConfig, from_config_dict
from rlpt.models import ModelConfig, Transformer, ValueModel
from rlpt.device import (check_batch, make_reshard, place_params, place_train_state,
                          to_device)
from rlpt.sharding import (DEFAULT_RULES, SAMPLE_RULES, check_rules, logical_to_spec, make_mesh,
                           state_shardings)

CFG = ModelConfig(vocab_size=264, d_model=32, num_layers=2, num_heads=4, num_kv_heads=2,
                  head_dim=8, mlp_dim=64)
OPT = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3))


def _mesh_2x2x2():
  return make_mesh({"data": 2, "fsdp": 2, "tensor": 2})


def _params(kind: str):
  if kind == "value":
    return nnx.split(ValueModel(CFG, nnx.Rngs(0)))[1]
  cfg = CFG if kind == "tied" else ModelConfig(**{**CFG.__dict__, "tie_embeddings": False})
  return nnx.split(Transformer(cfg, nnx.Rngs(0)))[1]


def _assert_every_leaf(placed: nnx.State, rules, mesh) -> int:
  """Asserts each leaf's sharding equals its rule; returns how many were checked."""
  n = 0
  for path, var in nnx.to_flat_state(placed):
    x = var.get_value()
    want = jax.sharding.NamedSharding(mesh, logical_to_spec(var.get_metadata()["axes"], rules))
    assert x.sharding.is_equivalent_to(want, x.ndim), (path, x.sharding.spec, want.spec)
    assert x.sharding.mesh.shape == mesh.shape
    n += 1
  return n


@pytest.mark.parametrize("kind", ["tied", "untied", "value"])
def test_params_and_moments_follow_the_train_rules(kind):
  mesh = _mesh_2x2x2()
  params = _params(kind)
  state, shardings = place_train_state(params, OPT, mesh, DEFAULT_RULES)
  n = _assert_every_leaf(state.params, DEFAULT_RULES, mesh)
  assert n == len(nnx.to_flat_state(params)) and n >= 9
  adam = state.opt_state[1][0]
  assert _assert_every_leaf(adam.mu, DEFAULT_RULES, mesh) == n
  assert _assert_every_leaf(adam.nu, DEFAULT_RULES, mesh) == n
  assert adam.count.sharding.is_fully_replicated
  # Matrices really are split over both fsdp and tensor (not silently replicated).
  wq = state.params["decoder"]["blocks"][0]["attn"]["wq"].get_value()
  assert wq.addressable_shards[0].data.shape == (32 // 2, 4 // 2, 8)


@pytest.mark.parametrize("kind", ["tied", "value"])
def test_reshard_to_the_sampling_layout(kind):
  mesh = _mesh_2x2x2()
  params = _params(kind)
  state, shardings = place_train_state(params, OPT, mesh, DEFAULT_RULES)
  sample_sh = state_shardings(params, mesh, SAMPLE_RULES)
  sample = make_reshard(shardings.params, sample_sh)(state.params)
  assert _assert_every_leaf(sample, SAMPLE_RULES, mesh) == len(nnx.to_flat_state(params))
  for a, b in zip(jax.tree.leaves(sample), jax.tree.leaves(params)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  # Sampling layout: replicated over data and fsdp, split only by tensor.
  wq = sample["decoder"]["blocks"][0]["attn"]["wq"].get_value()
  assert wq.addressable_shards[0].data.shape == (32, 4 // 2, 8)


def test_reference_in_pinned_host_memory():
  mesh = _mesh_2x2x2()
  params = _params("tied")
  kinds = {m.kind for m in jax.devices()[0].addressable_memories()}
  assert "pinned_host" in kinds, kinds  # the CPU backend has it; the trainer relies on it
  ref = place_params(params, mesh, DEFAULT_RULES, "pinned_host")
  assert {x.sharding.memory_kind for x in jax.tree.leaves(ref)} == {"pinned_host"}
  dev = to_device(ref, state_shardings(params, mesh, DEFAULT_RULES))
  assert {x.sharding.memory_kind for x in jax.tree.leaves(dev)} == {"device"}
  _assert_every_leaf(dev, DEFAULT_RULES, mesh)
  for a, b in zip(jax.tree.leaves(dev), jax.tree.leaves(params)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_per_device_param_and_optimizer_bytes_shrink_with_fsdp():
  params = _params("tied")
  n_params = sum(x.size for x in jax.tree.leaves(params))
  got = {}
  for fsdp in (1, 2, 4, 8):
    mesh = make_mesh({"data": -1, "fsdp": fsdp})
    state, _ = place_train_state(params, OPT, mesh, DEFAULT_RULES)
    got[fsdp] = sum(x.addressable_shards[0].data.nbytes for x in jax.tree.leaves(state)
                    if x.ndim)  # scalars (step, Adam count) are replicated
    # Every parameter has an embed dimension, split by fsdp: params + mu + nu,
    # fp32, divided by fsdp exactly.
    assert got[fsdp] == 3 * 4 * n_params // fsdp, (fsdp, got[fsdp])
  assert got[1] > got[2] > got[4] > got[8]


# ----------------------------------------------------------------------------
# Bad input.


def test_mesh_shape_vs_device_count():
  with pytest.raises(ValueError, match=r"has 12 devices but 8 are available"):
    make_mesh({"data": 3, "tensor": 4})
  with pytest.raises(ValueError, match=r"multiply to 3, which does not divide the 8"):
    make_mesh({"data": -1, "tensor": 3})
  with pytest.raises(ValueError, match=r"Unknown mesh axis \['model'\]"):
    make_mesh({"model": 8})


def test_rule_naming_an_unknown_axis():
  with pytest.raises(ValueError, match=r"unknown logical axis 'hidden'"):
    check_rules(DEFAULT_RULES + (("hidden", "tensor"),))
  with pytest.raises(ValueError, match=r"unknown mesh axis 'model'"):
    check_rules((("heads", "model"),))
  with pytest.raises(ConfigError, match=r"sharding.sample_rules\[0\] names unknown logical axis 'btach'"):
    from_config_dict(TrainConfig, {"sharding": {"sample_rules": [["btach", ["data", "fsdp"]]]}})
  with pytest.raises(ValueError, match=r"Logical axis 'mlp' has no rule"):
    logical_to_spec(("embed", "mlp"), (("embed", "fsdp"),))


def test_batch_not_divisible_by_the_data_axes():
  mesh = _mesh_2x2x2()
  with pytest.raises(ValueError, match=r"rollout.batch_size=6 must be a multiple of the 4 batch"):
    check_batch(6, mesh, DEFAULT_RULES, "rollout.batch_size")
  check_batch(8, mesh, DEFAULT_RULES, "rollout.batch_size")


def test_dimension_not_divisible_by_its_mesh_axis():
  mesh = _mesh_2x2x2()
  odd = ModelConfig(vocab_size=259, d_model=32, num_layers=1, num_heads=4, num_kv_heads=2,
                    head_dim=8, mlp_dim=64)
  params = nnx.split(Transformer(odd, nnx.Rngs(0)))[1]
  with pytest.raises(ValueError, match=r"\['decoder'\]\['embed'\]: dimension 0 has size 259, "
                                       r"not divisible by mesh axes \('tensor',\) of total size 2"):
    state_shardings(params, mesh, DEFAULT_RULES)
