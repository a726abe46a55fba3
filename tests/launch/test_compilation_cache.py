"""The persistent compilation cache (``--compilation_cache``,
``rlpt.device.use_compilation_cache``): a second process loads the programs
the first compiled, and computes the same bits as a process without it."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A model's loss and gradients, hashed bit for bit; then the cache's entries.
PROBE = r"""
import hashlib, os, sys
from rlpt.device import use_compilation_cache
use_compilation_cache(sys.argv[1], min_compile_secs=0.0)
import jax, jax.numpy as jnp, numpy as np
from flax import nnx
from rlpt.models import ModelConfig, Transformer
from rlpt.sampling import SamplingParams
from rlpt.steps import sequence_logprobs
cfg = ModelConfig(vocab_size=259, d_model=64, num_layers=2, num_heads=4, num_kv_heads=2,
                  head_dim=16, mlp_dim=128)
graphdef, params = nnx.split(Transformer(cfg, nnx.Rngs(0)))
tokens = jnp.asarray(np.random.default_rng(0).integers(3, 259, (16, 24)), jnp.int32)
def loss(p):
  return -sequence_logprobs(graphdef, p, tokens, SamplingParams(1.0, 0, 1.0)).mean()
value, grads = jax.jit(jax.value_and_grad(loss))(params)
print(hashlib.sha256(b"".join(np.asarray(a).tobytes() for a in [value, *jax.tree.leaves(grads)])).hexdigest())
print(sorted(os.listdir(sys.argv[1])) if sys.argv[1] else [])
"""


def _run(cache):
  env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_PERSISTENT_CACHE")
         and k != "JAX_COMPILATION_CACHE_DIR"}
  r = subprocess.run([sys.executable, "-c", PROBE, cache], cwd=ROOT, env=env,
                     capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr[-2000:]
  digest, entries = r.stdout.strip().splitlines()[-2:]
  return digest, eval(entries)


def test_a_second_process_loads_what_the_first_compiled_and_computes_the_same_bits(tmp_path):
  cache = str(tmp_path / "xla")
  first, entries = _run(cache)
  assert any(e.startswith("jit_") for e in entries), entries
  stamps = {e: os.stat(os.path.join(cache, e)).st_mtime_ns for e in entries}
  second, again = _run(cache)
  assert second == first
  assert again == entries  # nothing new compiled ...
  assert {e: os.stat(os.path.join(cache, e)).st_mtime_ns for e in again} == stamps  # ... or rewritten
  uncached, none = _run("")
  assert uncached == first and none == []
