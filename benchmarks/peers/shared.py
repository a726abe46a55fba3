"""The files rlpt hands to each peer so that all of them run the same work.

``prepare(directory, seed)`` writes

* ``model/``: the workload's randomly initialised Llama as a Hugging Face
  checkpoint (``config.json`` + ``model.safetensors``, float32), exported
  from rlpt's own initialisation with ``rlpt.models.hf.save_hf_checkpoint``;
* ``prompts.npz``: ``sample`` [32, 32] int32 (the sampler prompts),
  ``grpo`` [STEPS, 8, 32] int32 (the prompts of each GRPO step, warm-up
  steps first) and ``check`` [4, 32] int32 (prompts whose last-position
  logits every peer reports, to show it loaded the same weights);
* ``check_logits.npy``: rlpt's logits for those, [4, VOCAB] float32;

and returns the paths. Token ids are in [1, VOCAB); id 0 is never drawn as a
prompt token. The peers' scripts (``trl_workload.py``, ``tunix_workload.py``)
read these files and write one JSON result (see ``run.py``).
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import workload as W  # noqa: E402


def prepare(directory: str, seed: int = 0) -> dict[str, str]:
  """Writes the model and prompts for one run; returns {"model": dir, "prompts": file}."""
  from flax import nnx

  from rlpt.models import Transformer
  from rlpt.models.hf import save_hf_checkpoint

  cfg = W.model_config()
  _, params = nnx.split(Transformer(cfg, nnx.Rngs(seed)))
  model_dir = save_hf_checkpoint(os.path.join(directory, "model"), params, cfg, family="llama",
                                 extra_config={"bos_token_id": 1, "eos_token_id": None,
                                               "pad_token_id": 0})
  path = os.path.join(directory, "prompts.npz")
  data = W.prompts(seed)
  np.savez(path, **data)
  logits = os.path.join(directory, "check_logits.npy")
  np.save(logits, check_logits(cfg, params, data["check"]))
  return {"model": model_dir, "prompts": path, "check_logits": logits}


def check_logits(cfg, params, tokens_BxT: np.ndarray) -> np.ndarray:
  """rlpt's fp32 logits at the last position of each check prompt, [B, V]."""
  import jax.numpy as jnp
  from flax import nnx

  from rlpt.models import Transformer, causal_mask

  model = nnx.merge(nnx.graphdef(Transformer(cfg, nnx.Rngs(0))), params)
  b, t = tokens_BxT.shape
  pos = jnp.broadcast_to(jnp.arange(t), (b, t))
  logits = model(jnp.asarray(tokens_BxT), pos, causal_mask(pos, pos))
  logits = logits[0] if isinstance(logits, tuple) else logits
  return np.asarray(logits[:, -1], np.float32)


def compare_logits(expected_BxV: np.ndarray, got: list) -> float:
  """Largest |difference| between rlpt's check logits and a peer's."""
  return float(np.max(np.abs(expected_BxV - np.asarray(got, np.float32))))


if __name__ == "__main__":
  out = sys.argv[1] if len(sys.argv) > 1 else ".cache/peers/run0"
  print(prepare(out, 0))
