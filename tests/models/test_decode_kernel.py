"""The Pallas decode-attention kernels, TPU and GPU (interpreted on CPU),
against a float64 NumPy softmax, and a sampler using each against the XLA
path; the GPU kernel lowered to Triton for an H100 with no GPU present."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlpt.models.cache import LayerKV, attention_with_lse
from rlpt.models.decode_kernel import decode_attention, gpu_splits, shared_mask_attention
from rlpt.sampling.quant import quantize_kv

B, Q, N, K, H = 4, 2, 8, 2, 16

# Lowering the GPU kernel warns that JAX will drop Pallas's Triton backend
# (docs/throughput.md, "The GPU kernel").
pytestmark = pytest.mark.filterwarnings(
    "ignore:The Pallas Triton backend is deprecated:DeprecationWarning")


def _numpy_attention(q, k, v, mask):
  """float64 softmax attention: q [B, Q, N, H], k [B, K, H, S], v [B, K, S, H],
  mask [B, S]; (out [B, Q, N, H], lse [B, Q, N]) with 0 / -inf for no keys."""
  q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
  g = q.shape[2] // k.shape[1]
  kk = np.repeat(k, g, axis=1)                       # [B, N, H, S]
  vv = np.repeat(v, g, axis=1)                       # [B, N, S, H]
  s = np.einsum("bqnh,bnhs->bqns", q, kk) / np.sqrt(q.shape[-1])
  s = np.where(mask[:, None, None, :], s, -np.inf)
  m = s.max(-1, keepdims=True)
  m = np.where(np.isfinite(m), m, 0.0)
  p = np.exp(s - m)
  d = p.sum(-1, keepdims=True)
  out = np.einsum("bqns,bnsh->bqnh", p / np.where(d == 0, 1, d), vv)
  with np.errstate(divide="ignore"):
    lse = (m + np.log(d))[..., 0]
  return out, lse


def _case(s, dtype, seed=0):
  rng = np.random.default_rng(seed)
  q = rng.normal(size=(B, Q, N, H)).astype(np.float32)
  k = rng.normal(size=(B, K, H, s)).astype(np.float32)
  v = rng.normal(size=(B, K, s, H)).astype(np.float32)
  mask = np.zeros((B, s), bool)
  mask[0, :5] = True            # a short row
  mask[1, 3:s - 7] = True       # padding on both sides
  mask[3, :] = True             # a full row; row 2 sees nothing
  cast = lambda x: np.array(jnp.asarray(x, dtype).astype(jnp.float32))
  return cast(q), cast(k), cast(v), mask, dtype


# Each kernel: the TPU one, and the GPU one with its default key splits (4 of
# a 64-slot cache at these sizes) and with none.
KERNELS = [("tpu", None), ("gpu", None), ("gpu", 1)]
KERNEL_IDS = ["tpu", "gpu", "gpu-1-split"]


def _kernel(q, k, v, mask, dtype, block, scales=(), backend="tpu", splits=None):
  fn = jax.jit(lambda q, k, v, m, *sc: decode_attention(
      q, LayerKV(k, v, *sc), m, block=block, interpret=True, backend=backend, splits=splits))
  return fn(jnp.asarray(q, dtype), jnp.asarray(k, k.dtype if scales else dtype),
            jnp.asarray(v, v.dtype if scales else dtype), jnp.asarray(mask), *scales)


# The kernel multiplies in the cache's dtype with fp32 accumulation, so bf16
# is held to bf16's rounding of the probabilities (2^-8 relative).
@pytest.mark.parametrize("dtype,tol", [(jnp.float32, 1e-5), (jnp.bfloat16, 2e-2)])
@pytest.mark.parametrize("s,block", [(64, 16), (70, 16), (12, 16)], ids=["blocks", "tail", "short"])
@pytest.mark.parametrize("backend,splits", KERNELS, ids=KERNEL_IDS)
def test_kernel_matches_numpy(dtype, tol, s, block, backend, splits):
  q, k, v, mask, dt = _case(s, dtype)
  out, lse = _kernel(q, k, v, mask, dt, block, backend=backend, splits=splits)
  want_out, want_lse = _numpy_attention(q, k, v, mask)
  np.testing.assert_allclose(np.asarray(out), want_out, atol=tol, rtol=0)
  np.testing.assert_allclose(np.asarray(lse), want_lse, atol=tol, rtol=0)
  assert np.all(np.asarray(out)[2] == 0) and np.all(np.asarray(lse)[2] == -np.inf)


@pytest.mark.parametrize("backend,splits", KERNELS, ids=KERNEL_IDS)
def test_int8_cache_matches_its_dequantized_values(backend, splits):
  q, k, v, mask, _ = _case(64, jnp.float32, seed=1)
  # quantize_kv takes [B, T, K, H]: the cache's layouts are its transposes.
  kq, ks = quantize_kv(jnp.asarray(k).transpose(0, 3, 1, 2))
  vq, vs = quantize_kv(jnp.asarray(v).transpose(0, 2, 1, 3))
  kq, ks = kq.transpose(0, 2, 3, 1), ks.transpose(0, 2, 1)   # [B, K, H, S], [B, K, S]
  vq, vs = vq.transpose(0, 2, 1, 3), vs.transpose(0, 2, 1)   # [B, K, S, H], [B, K, S]
  out, lse = _kernel(q, kq, vq, mask, jnp.float32, 16, (ks, vs), backend, splits)
  k_deq = np.asarray(kq, np.float64) * np.asarray(ks, np.float64)[:, :, None, :]
  v_deq = np.asarray(vq, np.float64) * np.asarray(vs, np.float64)[..., None]
  want_out, want_lse = _numpy_attention(q, k_deq, v_deq, mask)
  np.testing.assert_allclose(np.asarray(out), want_out, atol=1e-5, rtol=0)
  np.testing.assert_allclose(np.asarray(lse), want_lse, atol=1e-5, rtol=0)


@pytest.mark.parametrize("backend,splits", KERNELS, ids=KERNEL_IDS)
def test_blocks_past_a_rows_last_visible_key_are_never_read(backend, splits):
  # Every slot in whole blocks past a row's last visible key is NaN: reading
  # them at all would put NaN in the output (0 * NaN), as the XLA path does.
  q, k, v, mask, dt = _case(64, jnp.float32)
  mask[:] = False
  mask[:, :20] = True                     # blocks 0-1 of 4 are live (block 16)
  k[:, :, :, 32:] = np.nan
  v[:, :, 32:, :] = np.nan
  out, lse = _kernel(q, k, v, mask, dt, 16, backend=backend, splits=splits)
  want_out, want_lse = _numpy_attention(q, k[..., :20], v[:, :, :20], mask[:, :20])
  np.testing.assert_allclose(np.asarray(out), want_out, atol=1e-5, rtol=0)
  xla_out, _ = jax.jit(attention_with_lse)(
      jnp.asarray(q), LayerKV(jnp.asarray(k), jnp.asarray(v)),
      jnp.broadcast_to(jnp.asarray(mask)[:, None], (B, Q, 64)))
  assert np.isnan(np.asarray(xla_out)).any()


def test_the_gpu_kernel_skips_the_blocks_before_a_rows_first_visible_key():
  # A window: row 0 sees slots 40-49, row 1 slots 17-63. NaN in every whole
  # block before them: the GPU kernel's loop starts at the first live block.
  q, k, v, mask, dt = _case(64, jnp.float32, seed=4)
  mask[:] = False
  mask[0, 40:50] = True
  mask[1, 17:] = True
  mask[3, :] = True
  for row, start in ((0, 32), (1, 16)):
    k[row, :, :, :start] = np.nan
    v[row, :, :start, :] = np.nan
  for splits in (1, 2, 4):
    out, lse = _kernel(q, k, v, mask, dt, 16, backend="gpu", splits=splits)
    want_out, want_lse = _numpy_attention(q, np.nan_to_num(k), np.nan_to_num(v), mask)
    np.testing.assert_allclose(np.asarray(out), want_out, atol=1e-5, rtol=0)
    np.testing.assert_allclose(np.asarray(lse), want_lse, atol=1e-5, rtol=0)


def test_gpu_splits_fill_the_grid_and_divide_the_blocks():
  assert gpu_splits(256, 4, 32) == 1          # 1,024 programs already
  assert gpu_splits(64, 4, 32) == 2           # 256 -> 512
  assert gpu_splits(8, 4, 32) == 16           # 32 -> 512
  assert gpu_splits(1, 1, 12) == 12           # at most one block a split
  assert gpu_splits(8, 4, 12) == 12 and gpu_splits(16, 4, 12) == 6   # a divisor of 12
  with pytest.raises(ValueError, match="3 key splits do not divide 4 blocks"):
    q, k, v, mask, dt = _case(64, jnp.float32)
    _kernel(q, k, v, mask, dt, 16, backend="gpu", splits=3)


@pytest.mark.parametrize("kernel", ["pallas-interpret", "pallas-interpret-gpu"])
def test_xla_and_kernel_dispatch_agree(kernel):
  q, k, v, mask, dt = _case(48, jnp.float32, seed=2)
  args = (jnp.asarray(q), LayerKV(jnp.asarray(k), jnp.asarray(v)), jnp.asarray(mask))
  a = jax.jit(lambda *x: shared_mask_attention(*x, "xla"))(*args)
  b = jax.jit(lambda *x: shared_mask_attention(*x, kernel))(*args)
  for x, y in zip(a, b):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=1e-5, rtol=0)


def test_a_kernel_choice_that_cannot_run_here_is_named():
  q, k, v, mask, dt = _case(48, jnp.float32)
  args = (jnp.asarray(q), LayerKV(jnp.asarray(k), jnp.asarray(v)), jnp.asarray(mask))
  with pytest.raises(ValueError, match="decode_kernel 'triton'"):
    shared_mask_attention(*args, "triton")
  with pytest.raises(ValueError, match="'pallas' runs on a TPU or a GPU; this backend is 'cpu'"):
    shared_mask_attention(*args, "pallas")


@pytest.mark.parametrize("int8", [False, True], ids=["bf16", "int8"])
def test_the_gpu_kernel_lowers_to_triton_for_an_h100(int8):
  """Pallas's Triton lowering (what runs before Triton compiles for the chip)
  accepts the kernel at the device benchmark's decode shapes, with no GPU
  present: an abstract H100 stands in for the device."""
  from jax._src.mesh import AbstractDevice, AbstractMesh
  b, n, kh, h, s = 64, 32, 4, 64, 2049  # the 1.1B model; 2K context and a tail slot
  sd = jax.ShapeDtypeStruct
  cache = jnp.int8 if int8 else jnp.bfloat16
  args = [sd((b, 1, n, h), jnp.bfloat16), sd((b, kh, h, s), cache), sd((b, kh, s, h), cache),
          sd((b, s), jnp.bool_)] + [sd((b, kh, s), jnp.float32)] * (2 if int8 else 0)
  fn = jax.jit(lambda q, k, v, m, *sc: decode_attention(q, LayerKV(k, v, *sc), m, backend="gpu"))
  h100 = AbstractDevice("NVIDIA H100 80GB HBM3", 132, "cuda")
  with jax.sharding.use_abstract_mesh(AbstractMesh((1,), ("x",), abstract_device=h100)):
    text = fn.trace(*args).lower(lowering_platforms=("cuda",)).as_text()
  calls = re.findall(r"custom_call @__gpu\$xla\.gpu\.triton\(.*name = \"(\w+)\"", text)
  assert calls == ["rlpt_decode_attention"], calls
  # One kernel for the 2,048 slots of whole blocks; the tail slot on XLA's path.
  assert re.search(r"grid_x = 64 : i32, grid_y = 4 : i32, grid_z = 2 : i32", text)


@pytest.mark.parametrize("kernel", ["pallas-interpret", "pallas-interpret-gpu"])
@pytest.mark.parametrize("kv_int8", [False, True])
def test_a_sampler_on_the_kernel_samples_what_the_xla_path_samples(monkeypatch, kv_int8, kernel):
  from flax import nnx

  from rlpt.models import ModelConfig, Transformer
  from rlpt.models import decode_kernel
  from rlpt.sampling import SamplingParams
  from rlpt.sampling.fast import FastSampler
  from rlpt.sampling.prefix import PrefixLayout
  monkeypatch.setattr(decode_kernel, "DEFAULT_BLOCK", 8)  # several blocks at these sizes
  monkeypatch.setattr(decode_kernel, "DEFAULT_GPU_BLOCK", 8)
  cfg = ModelConfig(vocab_size=40, d_model=32, num_layers=2, num_heads=4, num_kv_heads=2,
                    head_dim=8, mlp_dim=48)
  graphdef, params = nnx.split(Transformer(cfg, nnx.Rngs(0)))
  rng = np.random.default_rng(3)
  lengths = np.array([3, 17, 9])
  ids = np.full((3, 17), 37, np.int32)
  for i, n in enumerate(lengths):
    ids[i, :n] = rng.integers(0, 36, n)
  outs = {}
  for kernel in ("xla", kernel):
    layout = PrefixLayout(2, kv_int8, aligned=True, decode_kernel=kernel)
    sampler = FastSampler(graphdef, cfg, 17, 12, 37, (39,), layout)
    outs[kernel] = sampler.generate(params, ids, lengths, jax.random.key(5),
                                    SamplingParams(1.0, top_p=0.9))
  a, b = outs["xla"], outs[kernel]
  np.testing.assert_array_equal(np.asarray(a.tokens), np.asarray(b.tokens))
  np.testing.assert_allclose(np.asarray(a.logprobs), np.asarray(b.logprobs), atol=2e-5, rtol=0)


@pytest.mark.parametrize("path", ["split-bf16-kernel", "split-int8-kernel"])
def test_a_decode_step_on_the_gpu_kernel_lowers_for_an_h100(path):
  """The fast sampler's whole decode step (the step benchmarks/decode_bytes.py
  counts) with ``decode_kernel="pallas-gpu"``, lowered for CUDA with no GPU
  present: one Triton call per layer and cache part, the rest XLA's."""
  import os
  import sys

  from jax._src.mesh import AbstractDevice, AbstractMesh
  sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
  import decode_bytes
  cfg = decode_bytes.model_config(decode_bytes.MODELS["tiny"])
  graphdef, params = decode_bytes.abstract_params(cfg)
  h100 = AbstractDevice("NVIDIA H100 80GB HBM3", 132, "cuda")
  mesh = AbstractMesh((1,), ("x",), axis_types=(jax.sharding.AxisType.Auto,), abstract_device=h100)
  with jax.sharding.use_abstract_mesh(mesh):
    text = decode_bytes.step_program(path, cfg, graphdef, params, batch=8, context=256,
                                     prompt=128, kernel="pallas-gpu", platforms=("cuda",)).as_text()
  calls = re.findall(r"custom_call @__gpu\$xla\.gpu\.triton\(", text)
  assert len(calls) == 2 * cfg.num_layers, len(calls)   # the prompt part and the generated part
