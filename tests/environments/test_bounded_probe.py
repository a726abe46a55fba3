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


def test_a_bounded_id_registers_from_its_name_alone():
    """A process that grades a run's domains without loading its config (a peer
    framework's grader) registers a bounded cut from its id: the same cut as
    register_bounded, and one line naming the id when its domain is unknown."""
    from environments import registry
    base = "rlpt/rg-basic-arithmetic-medium-v0"
    want = bounded.bounded_id(base, 44)
    assert want == "rlpt/rg-basic-arithmetic-medium-p44-v0" and not registry.is_registered(want)
    spec = bounded.register_id(want)
    assert spec.id == want and spec.max_prompt_chars == 44
    assert spec == bounded.register_bounded(base, 44)
    assert bounded.register_id(want) == spec  # again: the domain already registered
    assert bounded.register_id("rlpt/strings-reverse-hard-v0").id == "rlpt/strings-reverse-hard-v0"
    with pytest.raises(ValueError, match=r"'rlpt/no-such-thing-p40-v0' is a bounded cut of "
                                         r"'rlpt/no-such-thing-v0'"):
        bounded.register_id("rlpt/no-such-thing-p40-v0")
