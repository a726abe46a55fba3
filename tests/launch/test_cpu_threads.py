"""XLA:CPU's thread pool pinned (``--cpu_threads``, ``rlpt.device.set_cpu_threads``).

XLA:CPU splits a reduction into one partial sum per intra-op thread, so
without a fixed count the same program gives other bits on a host with
another number of cores. With it, a model's loss and gradients are
bit-identical on one core and on two, under the host's own target and under
XLA's AVX2 target."""

import os
import subprocess
import sys

import pytest

from tests.multiproc import compile_flags

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A model's loss and gradients and a few reductions of the shapes the
# trainer reduces over (batch x time rows), hashed bit for bit.
PROBE = r"""
import hashlib, sys
from rlpt.device import set_cpu_threads
set_cpu_threads(int(sys.argv[1]))
import jax, jax.numpy as jnp, numpy as np
from flax import nnx
from rlpt.models import ModelConfig, Transformer
from rlpt.sampling import SamplingParams
from rlpt.steps import sequence_logprobs
cfg = ModelConfig(vocab_size=259, d_model=64, num_layers=2, num_heads=4, num_kv_heads=2,
                  head_dim=16, mlp_dim=128)
graphdef, params = nnx.split(Transformer(cfg, nnx.Rngs(0)))
rng = np.random.default_rng(0)
tokens = jnp.asarray(rng.integers(3, 259, (64, 48)), jnp.int32)
def loss(p):
  return -sequence_logprobs(graphdef, p, tokens, SamplingParams(1.0, 0, 1.0)).mean()
value, grads = jax.jit(jax.value_and_grad(loss))(params)
x = jnp.asarray(rng.standard_normal((6144, 259)), jnp.float32)
parts = [value, *jax.tree.leaves(grads), jax.jit(lambda x: x.sum(0))(x), jax.jit(jnp.sum)(x)]
print(hashlib.sha256(b"".join(np.asarray(a).tobytes() for a in parts)).hexdigest())
"""


def _run(threads, cores, xla_flags=""):
  env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "PJRT_NPROC")}
  env.update(JAX_PLATFORMS="cpu",  # the suite's compile flags (tests/conftest.py), then the test's
             XLA_FLAGS=f"{compile_flags()} {xla_flags}".strip())
  r = subprocess.run(["taskset", "-c", cores, sys.executable, "-c", PROBE, str(threads)],
                     cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr[-2000:]
  return r.stdout.strip().splitlines()[-1]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_pinned_threads_give_the_same_bits_on_one_core_and_two():
  cores = sorted(os.sched_getaffinity(0))[:2]
  one, two = str(cores[0]), f"{cores[0]},{cores[1]}"
  pinned = _run(2, two)
  assert _run(2, one) == pinned
  # Under XLA's AVX2 target too (the second CPU target CI runs under). Since
  # JAX 0.12 the AVX2 and AVX-512 targets' bits differ from each other (XLA:CPU's
  # code for each vector width, YNNPACK's dot kernels off or on), so each
  # target agrees with itself across core counts, not with the other.
  avx2 = _run(2, two, "--xla_cpu_max_isa=AVX2")
  assert _run(2, one, "--xla_cpu_max_isa=AVX2") == avx2
  # (Unpinned, one core and two differ here: the pin is what makes them agree.)


def test_threads_are_set_before_jax_starts_and_refused_after():
  code = ("from rlpt.device import set_cpu_threads; import os; set_cpu_threads(3); "
          "print(os.environ['PJRT_NPROC']); import jax; jax.devices(); set_cpu_threads(3)")
  env = {k: v for k, v in os.environ.items() if k != "PJRT_NPROC"}
  r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=dict(env, JAX_PLATFORMS="cpu"),
                     capture_output=True, text=True, timeout=120)
  assert r.stdout.strip() == "3"
  assert "3 CPU threads must be set before JAX starts" in r.stderr


def test_conflicting_environment_and_bad_counts_are_named(monkeypatch):
  from rlpt.device import set_cpu_threads
  with pytest.raises(ValueError, match="got -1"):
    set_cpu_threads(-1)
  monkeypatch.setenv("PJRT_NPROC", "4")
  with pytest.raises(ValueError, match="PJRT_NPROC is already set to '4'"):
    set_cpu_threads(2)
  set_cpu_threads(0)  # 0 leaves XLA's default (and the environment) alone
  assert os.environ["PJRT_NPROC"] == "4"


def test_cpu_only_host_reads_jax_platforms(monkeypatch):
  from rlpt.device import cpu_only_host
  monkeypatch.setenv("JAX_PLATFORMS", "cpu")
  assert cpu_only_host()
  monkeypatch.setenv("JAX_PLATFORMS", "cuda,cpu")
  assert not cpu_only_host()
