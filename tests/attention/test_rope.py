"""RoPE scaling for long contexts: linear interpolation and Llama-3 frequency scaling."""

import math

import jax.numpy as jnp
import numpy as np
import pytest

from rlpt.attention import RopeScaling, apply_rope_with_frequencies, rope_frequencies
from rlpt.models.transformer import apply_rope


def _x_and_positions(t=16, h=64):
  x = jnp.asarray(np.random.default_rng(0).standard_normal((2, t, 3, h)), jnp.float32)
  pos = jnp.broadcast_to(jnp.arange(t) * 37, (2, t))
  return x, pos


def test_no_scaling_matches_the_model_rope_exactly():
  x, pos = _x_and_positions()
  out = apply_rope_with_frequencies(x, pos, rope_frequencies(64, 10_000.0, RopeScaling()))
  np.testing.assert_array_equal(np.asarray(out), np.asarray(apply_rope(x, pos, 10_000.0)))


def test_linear_scaling_is_position_interpolation():
  x, pos = _x_and_positions()
  scaled = apply_rope_with_frequencies(
      x, pos, rope_frequencies(64, 10_000.0, RopeScaling("linear", factor=4.0)))
  interpolated = apply_rope_with_frequencies(x, pos / 4.0, rope_frequencies(64, 10_000.0))
  np.testing.assert_allclose(np.asarray(scaled), np.asarray(interpolated), atol=1e-5)


def _llama3_reference(freqs, factor, low, high, orig):
  """Transcription of the scalar loop in Meta's Llama 3.1 reference code."""
  low_wavelen, high_wavelen = orig / low, orig / high
  out = []
  for f in freqs:
    wavelen = 2 * math.pi / f
    if wavelen < high_wavelen:
      out.append(f)
    elif wavelen > low_wavelen:
      out.append(f / factor)
    else:
      smooth = (orig / wavelen - low) / (high - low)
      out.append((1 - smooth) * f / factor + smooth * f)
  return np.array(out)


def test_llama3_scaling_matches_reference_recipe():
  cfg = RopeScaling("llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                    original_max_position=8192)
  base = np.asarray(rope_frequencies(128, 500_000.0))
  got = np.asarray(rope_frequencies(128, 500_000.0, cfg))
  np.testing.assert_allclose(got, _llama3_reference(base.astype(np.float64), 8.0, 1.0, 4.0, 8192),
                             rtol=1e-6)
  # All three bands occur: kept, blended and fully interpolated pairs.
  assert np.any(got == base) and np.any(np.isclose(got, base / 8))
  assert np.any((got < base) & (got > base / 8))
  assert np.all(np.diff(got) < 0)  # still strictly decreasing with pair index


@pytest.mark.parametrize("kw,match", [
    (dict(kind="yarn"), "kind must be one of"),
    (dict(kind="linear", factor=0.5), "factor must be >= 1"),
    (dict(kind="llama3", low_freq_factor=4.0, high_freq_factor=1.0), "low_freq_factor"),
])
def test_bad_scaling_raises(kw, match):
  with pytest.raises(ValueError, match=match):
    RopeScaling(**kw)
