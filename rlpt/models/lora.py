"""LoRA adapters for the policy, applied as a pure params transform.

``W_eff = W + (alpha / rank) * A @ B`` for every targeted projection, computed
inside the jitted step by ``apply_lora(base, adapters, cfg)``. The step
differentiates with respect to the adapters only, so the base weights get no
gradient (JAX never builds their cotangents), no optimizer state and no
update; the reference policy is the base itself (adapters off), so it costs
no extra weights. ``apply_lora`` outside a step gives the merged, plain
``nnx.State`` that the sampler reads (``merge_lora``).

Adapters mirror the weight they adapt: for a weight with input dims ``I`` and
output dims ``O`` (wq: I = (D,), O = (N, H); wo: I = (N, H), O = (D,)),
``lora_a`` is [*I, r] and ``lora_b`` is [r, *O], with the weight's logical axes
on I and O, so the rules shard them like their weight. A starts random
(PEFT's Kaiming-uniform bound 1/sqrt(fan_in)), B at zero: the adapted model
starts exactly at the base.

``save_adapters`` writes them alone as a PEFT-compatible
``adapter_model.safetensors`` (``base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight``
[r, in], ``lora_B.weight`` [out, r]) with ``adapter_config.json``.
"""

from __future__ import annotations

import json
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rlpt.config.model import LORA_TARGETS as TARGETS
from rlpt.config.model import LoraConfig
from rlpt.models.adapted import LoraWeight
from rlpt.models.hf import SafetensorsReader, write_safetensors

def _weight(params: nnx.State, layer: int, target: str) -> nnx.Variable:
  return params["decoder"]["blocks"][layer][TARGETS[target][0]][target]


def _num_layers(params: nnx.State) -> int:
  return len(params["decoder"]["blocks"])


def init_lora(params: nnx.State, cfg: LoraConfig, key: jax.Array) -> nnx.State:
  """Adapters for ``params`` (values or abstract): A random, B zero, fp32.

  Returns a State {"decoder": {"blocks": {i: {module: {target: {"lora_a", "lora_b"}}}}}}
  whose Params carry logical axes (shard it with rlpt.sharding.state_shardings).
  """
  blocks = {}
  for i in range(_num_layers(params)):
    mods: dict = {}
    for t in cfg.targets:
      w = _weight(params, i, t)
      module, n_in, _ = TARGETS[t]
      shape, axes = w.get_value().shape, w.get_metadata()["axes"]
      fan_in = math.prod(shape[:n_in])
      key, sub = jax.random.split(key)
      bound = fan_in ** -0.5
      a = jax.random.uniform(sub, (*shape[:n_in], cfg.rank), jnp.float32, -bound, bound)
      b = jnp.zeros((cfg.rank, *shape[n_in:]), jnp.float32)
      mods.setdefault(module, {})[t] = {
          "lora_a": nnx.Param(a, axes=(*axes[:n_in], None)),
          "lora_b": nnx.Param(b, axes=(None, *axes[n_in:]))}
    blocks[i] = mods
  return nnx.State({"decoder": {"blocks": blocks}})


def _value(x):
  return x.get_value() if isinstance(x, nnx.Variable) else x


def apply_lora(params: nnx.State, adapters: nnx.State, cfg: LoraConfig) -> nnx.State:
  """The params with every adapted weight's value a ``LoraWeight`` (the frozen
  weight and its adapters, which the model applies factored); pure, jittable,
  the form to differentiate. Untouched weights are passed through;
  ``merge_lora`` gives plain merged weights instead."""
  blocks = adapters["decoder"]["blocks"]
  found = {}
  for i in blocks:
    for module, targets in blocks[i].items():
      for t, ab in targets.items():
        found[("decoder", "blocks", int(i), module, t)] = (_value(ab["lora_a"]), _value(ab["lora_b"]))

  def one(path, var):
    key = tuple(getattr(p, "key", getattr(p, "idx", None)) for p in path)
    ab = found.get(key)
    if ab is None:
      return var
    return var.replace(LoraWeight(var.get_value(), *ab, cfg.scale))

  return jax.tree_util.tree_map_with_path(one, params,
                                          is_leaf=lambda x: isinstance(x, nnx.Variable))


def _merge(params: nnx.State, adapters: nnx.State, cfg: LoraConfig) -> nnx.State:
  def one(var):
    w = var.get_value()
    return var.replace(w.merged()) if isinstance(w, LoraWeight) else var
  return jax.tree.map(one, apply_lora(params, adapters, cfg),
                      is_leaf=lambda x: isinstance(x, nnx.Variable))


merge_lora = jax.jit(_merge, static_argnums=2)
merge_lora.__doc__ = ("The params with every adapted weight merged, W + scale * A @ B in W's "
                      "dtype (plain arrays: the sampler's weights, exports); jitted.")


def num_adapter_params(adapters: nnx.State) -> int:
  return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(adapters))


# ----------------------------------------------------------------------------
# Adapters alone on disk (PEFT layout).


def peft_tensors(adapters: nnx.State) -> dict[str, np.ndarray]:
  """{PEFT name: fp32 array}: lora_A [r, in], lora_B [out, r] per adapted module."""
  out = {}
  blocks = adapters["decoder"]["blocks"]
  for i in blocks:
    for targets in blocks[i].values():
      for t, ab in targets.items():
        a = np.asarray(jax.device_get(_value(ab["lora_a"])), np.float32)
        b = np.asarray(jax.device_get(_value(ab["lora_b"])), np.float32)
        r = a.shape[-1]
        name = f"base_model.model.model.layers.{int(i)}.{TARGETS[t][2]}"
        out[f"{name}.lora_A.weight"] = np.ascontiguousarray(a.reshape(-1, r).T)
        out[f"{name}.lora_B.weight"] = np.ascontiguousarray(b.reshape(r, -1).T)
  return out


def save_adapters(directory: str, adapters: nnx.State, cfg: LoraConfig,
                  base_model: str = "") -> str:
  """adapter_model.safetensors + adapter_config.json (PEFT's names and layout)."""
  os.makedirs(directory, exist_ok=True)
  write_safetensors(os.path.join(directory, "adapter_model.safetensors"),
                    peft_tensors(adapters), {"format": "pt"})
  modules = sorted({TARGETS[t][2].split(".")[-1] for t in cfg.targets})
  with open(os.path.join(directory, "adapter_config.json"), "w") as f:
    json.dump({"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": cfg.rank,
               "lora_alpha": cfg.alpha, "lora_dropout": 0.0, "target_modules": modules,
               "bias": "none", "fan_in_fan_out": False, "inference_mode": True,
               "base_model_name_or_path": base_model}, f, indent=2)
  return directory


def load_adapters(directory: str, params: nnx.State) -> tuple[nnx.State, LoraConfig]:
  """Reads ``save_adapters``' output back for ``params``' architecture."""
  with open(os.path.join(directory, "adapter_config.json")) as f:
    meta = json.load(f)
  by_module = {v[2].split(".")[-1]: k for k, v in TARGETS.items()}
  unknown = [m for m in meta["target_modules"] if m not in by_module]
  if unknown:
    raise ValueError(f"adapter_config.json targets {unknown}, which rlpt does not adapt.")
  cfg = LoraConfig(int(meta["r"]), float(meta["lora_alpha"]),
                   tuple(sorted(by_module[m] for m in meta["target_modules"])))
  adapters = init_lora(params, cfg, jax.random.key(0))
  reader = SafetensorsReader(directory)
  try:
    for i in range(_num_layers(params)):
      for t in cfg.targets:
        module, n_in, hf = TARGETS[t]
        ab = adapters["decoder"]["blocks"][i][module][t]
        name = f"base_model.model.model.layers.{i}.{hf}"
        a_shape, b_shape = ab["lora_a"].get_value().shape, ab["lora_b"].get_value().shape
        a = reader.read(f"{name}.lora_A.weight", (slice(None),) * 2).T.reshape(a_shape)
        b = reader.read(f"{name}.lora_B.weight", (slice(None),) * 2).T.reshape(b_shape)
        ab["lora_a"] = ab["lora_a"].replace(jnp.asarray(a, jnp.float32))
        ab["lora_b"] = ab["lora_b"].replace(jnp.asarray(b, jnp.float32))
  finally:
    reader.close()
  return adapters, cfg
