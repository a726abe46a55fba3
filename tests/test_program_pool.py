"""rlpt.device.ProgramPool: at most `capacity` compiled programs kept, least
recently used dropped first, the same results after a program is dropped and
made again, and dropped programs' memory handed back."""

import ctypes
import gc
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlpt import device


def _fn(x, y):
  return jnp.tanh(x @ y) * 3.0 + x.sum()


def _args(rows):
  rng = np.random.default_rng(rows)
  return (rng.standard_normal((rows, 16)).astype(np.float32),
          rng.standard_normal((16, 16)).astype(np.float32))


def test_least_recently_used_shape_is_dropped_first():
  pool = device.ProgramPool(capacity=2)
  f = pool.jit(_fn)
  f(*_args(1))
  f(*_args(2))
  f(*_args(1))  # 1 is now the most recently used
  assert len(pool) == 2 and pool.evictions == 0
  f(*_args(3))  # over the bound: 2 goes
  assert len(pool) == 2 and pool.evictions == 1
  keys = {sig[1][0][0] for sig in f.programs}  # leading dim of the first argument
  assert keys == {(1, 16), (3, 16)}


def test_results_are_identical_after_a_program_is_dropped_and_made_again():
  pool = device.ProgramPool(capacity=1)
  f = pool.jit(_fn)
  first = np.asarray(f(*_args(4)))
  f(*_args(5))  # drops the (4, 16) program
  assert pool.evictions == 1
  again = np.asarray(f(*_args(4)))
  np.testing.assert_array_equal(first, again)
  np.testing.assert_allclose(first, np.asarray(jax.jit(_fn)(*_args(4))), rtol=1e-6, atol=1e-6)


def test_the_bound_spans_functions_and_the_signature_holds_dtype_and_weak_type():
  pool = device.ProgramPool(capacity=3)
  f, g = pool.jit(_fn), pool.jit(lambda x: x + 1)
  f(*_args(2))
  g(np.ones(3, np.float32))
  g(np.ones(3, np.int32))   # another dtype: another program
  g(np.float32(1.0))        # a numpy scalar: shape ()
  assert len(pool) == 3 and pool.evictions == 1 and not f.programs
  g(1.0)                    # a Python float: weakly typed, its own program
  assert len(g.programs) == 3


def test_zero_is_no_bound_and_resize_drops_past_the_new_bound():
  pool = device.ProgramPool(capacity=0)
  f = pool.jit(_fn)
  for rows in range(1, 6):
    f(*_args(rows))
  assert len(pool) == 5 and pool.evictions == 0
  pool.resize(2)
  assert len(pool) == 2 and pool.evictions == 3 and len(f.programs) == 2
  with pytest.raises(ValueError, match=r"int >= 0 .*got -1"):
    pool.resize(-1)
  with pytest.raises(ValueError, match=r"got 2\.5"):
    device.ProgramPool(2.5)


def test_a_reservation_adds_room_for_a_fixed_set():
  pool = device.ProgramPool(capacity=2)
  f = pool.jit(_fn)
  for rows in range(1, 3):
    f(*_args(rows))
  pool.reserve(3)
  for rows in range(3, 6):
    f(*_args(rows))
  assert pool.capacity == 5 and len(pool) == 5 and pool.evictions == 0
  unbounded = device.ProgramPool(capacity=0)
  unbounded.reserve(4)
  assert unbounded.capacity == 0
  with pytest.raises(ValueError, match=r"reservation must be an int >= 0, got -1"):
    pool.reserve(-1)


def test_a_collected_function_frees_its_places():
  pool = device.ProgramPool(capacity=4)
  f = pool.jit(_fn)
  f(*_args(1))
  f(*_args(2))
  del f
  gc.collect()
  assert len(pool) == 0
  g = pool.jit(_fn)
  for rows in range(1, 5):
    g(*_args(rows))
  assert pool.evictions == 0


def test_lower_and_donation_pass_through():
  pool = device.ProgramPool(capacity=2)
  f = pool.jit(_fn)
  text = f.lower(jax.ShapeDtypeStruct((3, 16), jnp.float32),
                 jax.ShapeDtypeStruct((16, 16), jnp.float32)).as_text()
  assert "tanh" in text and len(pool) == 1
  step = pool.jit(lambda s, x: s + x, donate_argnums=0)
  s = jnp.zeros((4,))
  out = step(s, jnp.ones((4,)))
  assert s.is_deleted() and float(out.sum()) == 4.0


def test_threads_share_one_bound():
  pool = device.ProgramPool(capacity=3)
  f = pool.jit(_fn)
  want = {rows: np.asarray(jax.jit(_fn)(*_args(rows))) for rows in range(1, 7)}
  errors = []

  def work(offset):
    try:
      for i in range(12):
        rows = (i + offset) % 6 + 1
        np.testing.assert_allclose(np.asarray(f(*_args(rows))), want[rows], rtol=1e-6, atol=1e-6)
    except Exception as e:  # noqa: BLE001 (reported below)
      errors.append(e)

  threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert not errors and len(pool) <= 3 and len(f.programs) <= 3


def test_dropped_programs_hand_their_memory_back():
  """A program XLA:CPU compiled keeps megabytes resident; dropped from the
  pool, they return (the measure behind benchmarks/program_memory.py)."""
  libc = ctypes.CDLL("libc.so.6")

  def rss():
    gc.collect()
    libc.malloc_trim(0)
    return device.resident_mib()

  def body(x):  # an unrolled chain: a program of several MiB
    for i in range(60):
      x = jnp.sin(x * (1.0 + i / 1000.0)) @ jnp.eye(x.shape[-1], dtype=x.dtype)
    return x

  jax.jit(body)(np.ones((20, 8), np.float32))  # XLA's one-time allocations, outside the measure
  pool = device.ProgramPool(capacity=0)
  f = pool.jit(body)
  before = rss()
  for rows in range(1, 7):
    f(np.ones((rows, 8), np.float32))
  grown = rss() - before
  pool.resize(1)
  after = rss() - before
  # Measured here: 6 programs 50 MiB, 1 kept 20 MiB (its own 8 and what the
  # allocator does not hand back).
  assert grown > 20, f"6 programs kept only {grown:.1f} MiB: nothing to measure"
  assert after < 0.6 * grown, f"6 programs {grown:.1f} MiB, 1 kept {after:.1f} MiB"
