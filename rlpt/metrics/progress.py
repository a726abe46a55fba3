"""A run's progress bar."""

import jax
from tqdm.auto import tqdm


def progress_bar(total: int, desc: str, enabled: bool):
  """A progress bar, on the primary process only (one bar for a multi-process run); None when off."""
  if not enabled or jax.process_index() != 0:
    return None
  return tqdm(total=total, desc=desc, dynamic_ncols=True)
