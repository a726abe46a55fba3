"""A model checkpoint: orbax-saved parameters plus the architecture as JSON.

Layout of ``directory``::

    model.json   ModelConfig fields and free-form metadata
    params/      orbax StandardCheckpointer tree of the parameter state
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from typing import Any

import jax
import orbax.checkpoint as ocp
from flax import nnx

from rlpt.models import ModelConfig, Transformer


def save_model(directory: str, params: nnx.State, model_cfg: ModelConfig,
               metadata: dict[str, Any] | None = None) -> None:
  """Writes params and config; the directory appears only once complete.

  In a multi-process run every process calls it with the same ``directory``
  (on a filesystem they share) and the same host ``params`` (`to_host`):
  orbax writes them once, process 0 does the rest, and each step waits for all."""
  directory = os.path.abspath(directory)
  tmp = directory + ".tmp"
  primary = jax.process_index() == 0
  if primary:
    if os.path.exists(tmp):
      shutil.rmtree(tmp)
    os.makedirs(tmp)
  _sync(f"rlpt-save-model-start:{directory}")
  ckptr = ocp.StandardCheckpointer()
  ckptr.save(os.path.join(tmp, "params"), nnx.to_pure_dict(params))
  ckptr.wait_until_finished()
  if primary:
    with open(os.path.join(tmp, "model.json"), "w") as f:
      json.dump({"model": dataclasses.asdict(model_cfg), "metadata": metadata or {}}, f, indent=2)
    if os.path.exists(directory):
      shutil.rmtree(directory)
    os.replace(tmp, directory)
  _sync(f"rlpt-save-model-done:{directory}")


def _sync(name: str) -> None:
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils
    multihost_utils.sync_global_devices(name)


def load_model(directory: str, shardings: Any = None) -> tuple[ModelConfig, nnx.GraphDef, nnx.State, dict]:
  """Returns (model config, graphdef, params, metadata) of a saved policy.

  ``shardings``: optional callable ``(abstract_state) -> shardings`` so that
  each process reads only its own shards onto the mesh.
  """
  directory = os.path.abspath(directory)
  meta_path = os.path.join(directory, "model.json")
  if not os.path.exists(meta_path):
    raise FileNotFoundError(
        f"No model checkpoint at '{directory}': expected '{meta_path}' and 'params/'. "
        "Build one with `python -m launch.pretrain` or point base.checkpoint elsewhere.")
  with open(meta_path) as f:
    meta = json.load(f)
  model_cfg = ModelConfig(**meta["model"])
  abstract_model = nnx.eval_shape(lambda: Transformer(model_cfg, nnx.Rngs(0)))
  graphdef, abstract_state = nnx.split(abstract_model)
  pure = nnx.to_pure_dict(abstract_state)
  target = jax.tree.map(ocp.utils.to_shape_dtype_struct, pure)
  if shardings is not None:
    sh = nnx.to_pure_dict(shardings(abstract_state))
    target = jax.tree.map(lambda t, s: jax.ShapeDtypeStruct(t.shape, t.dtype, sharding=s), target, sh)
  restored = ocp.StandardCheckpointer().restore(os.path.join(directory, "params"), target)
  nnx.replace_by_pure_dict(abstract_state, restored)
  return model_cfg, graphdef, abstract_state, meta.get("metadata", {})
