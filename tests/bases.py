"""The test session's cache of pre-trained bases (set up in tests/conftest.py)."""

import os


def base_cache_dir() -> str:
  """Where trainer tests keep their bases (``base.cache_dir``): one fresh
  directory per session, shared by the tests and the processes they start, so
  each tiny base is pre-trained once per session."""
  return os.environ["RLPT_TEST_BASES"]
