"""bounded.probe: how many draws a bound's verdict takes, against a count of
the draws themselves (a generator that can take seconds per task is drawn no
more than the verdict needs)."""

import numpy as np
import pytest

from environments import bounded
from environments.verdicts import Problem


class Lengths:
  """A stand-in domain whose i-th draw has a prompt of lengths[i % len] bytes."""

  def __init__(self, *lengths):
    self.lengths, self.draws = lengths, 0

  def sample(self, rng: np.random.Generator) -> Problem:
    n = self.lengths[self.draws % len(self.lengths)]
    self.draws += 1
    return Problem(key=str(self.draws), prompt="x" * n, demonstration="y")


@pytest.mark.parametrize("lengths,draws,ok", [
    ((100,), 8, 8),              # every task fits: kept at 1/8 of 64
    ((201,), 4, 0),              # all over twice the bound: refused after 4
    ((200,), 16, 0),             # twice exactly: not the 4-draw rule; over 1.25x: after 16
    ((125,), 57, 0),             # 1.25x exactly: refused once 8 of 64 cannot fit
    ((201, 201, 201, 90), 32, 8),  # one in four fits: kept
    ((180, 180, 180, 180, 90), 40, 8),  # none of the first 4 fits (under 2x), then one in five
])
def test_draws_until_the_verdict(lengths, draws, ok):
  domain = Lengths(*lengths)
  got, tasks = bounded.probe(domain, 100)
  assert (domain.draws, got) == (draws, ok) and len(tasks) == draws
  # The verdict is the one all 64 draws give, for these generators.
  full = sum(bounded.fits(domain.sample(None), 100) for _ in range(64))
  assert (got >= bounded.MIN_SHARE * bounded.PROBES) == (full >= bounded.MIN_SHARE * bounded.PROBES)
