"""run_key: a pure function of (seed, purpose, indices), distinct for each."""

import pathlib
import re

import jax
import numpy as np
import pytest

from rlpt.keys import PURPOSES, run_key


def _data(key):
  return tuple(np.asarray(jax.random.key_data(key)).tolist())


def test_keys_are_pure_and_distinct():
  assert _data(run_key(0, "rollout", 3, 1)) == _data(run_key(0, "rollout", 3, 1))
  keys = [_data(run_key(seed, p, *idx)) for seed in (0, 1) for p in PURPOSES
          for idx in ((), (0,), (1,), (0, 1), (1, 0), (2**32 - 1,))]
  assert len(set(keys)) == len(keys)
  assert len(set(PURPOSES.values())) == len(PURPOSES)


def test_bad_purpose_or_index_is_named():
  with pytest.raises(ValueError, match="unknown key purpose 'evaluation'.*'eval'"):
    run_key(0, "evaluation")
  with pytest.raises(ValueError, match=r"index -1 is outside \[0, 2\*\*32\)"):
    run_key(0, "rollout", -1)


def test_seeded_streams_keep_their_seeding():
  # The bases' fingerprint and published figures depend on these bit for bit.
  from rlpt.keys import SEEDED_STREAMS, init_key, seeded_rng
  assert seeded_rng("pretrain_noise", 3).integers(2**62) == np.random.default_rng(10).integers(2**62)
  assert seeded_rng("task_draw", 3, 5).integers(2**62) == np.random.default_rng([3, 5]).integers(2**62)
  for stream in ("pretrain_tasks", "task_domains", "eval_set", "task_sampler"):
    assert seeded_rng(stream, 11).integers(2**62) == np.random.default_rng(11).integers(2**62)
  assert _data(init_key(4)) == _data(jax.random.key(4))
  assert all(desc for _, desc in SEEDED_STREAMS.values())
  with pytest.raises(ValueError, match="unknown seeded stream 'noise'.*'pretrain_noise'"):
    seeded_rng("noise", 0)


# Constructors of a random stream; rlpt makes them in rlpt/keys.py only.
_STREAM_MAKERS = re.compile(r"default_rng\(|RandomState\(|random\.Random\(|random\.seed\(|"
                            r"jax\.random\.(?:key|PRNGKey)\(|nnx\.Rngs\((?!0\)|ctx\.key\(|init_key\()")
# Where a constructor makes no stream a run depends on (values all replaced, or test fixtures).
_NOT_STREAMS = {
    "rlpt/models/lora.py": "load_adapters builds the adapter tree with a fixed key, then overwrites every value",
    "rlpt/models/hf_fixtures.py": "random-init models written as Hugging Face fixtures for parity tests",
}


def test_no_random_stream_outside_keys():
  root = pathlib.Path(__file__).resolve().parents[1]
  found = []
  for path in sorted((root / "rlpt").rglob("*.py")):
    rel = path.relative_to(root).as_posix()
    hits = [f"{rel}:{n}: {line.strip()}" for n, line in enumerate(path.read_text().splitlines(), 1)
            if _STREAM_MAKERS.search(line)]
    if rel in _NOT_STREAMS:
      assert hits, f"{rel} is listed in _NOT_STREAMS but makes no stream; drop it from the list"
    elif rel != "rlpt/keys.py":
      found += hits
  assert not found, "random streams made outside rlpt.keys:\n" + "\n".join(found)


def test_stream_check_sees_a_new_stream():
  assert _STREAM_MAKERS.search("rng = np.random.default_rng(seed + 3)")
  assert _STREAM_MAKERS.search("model = Transformer(cfg, nnx.Rngs(seed))")
  assert not _STREAM_MAKERS.search("abstract = nnx.eval_shape(lambda: Transformer(cfg, nnx.Rngs(0)))")
