"""AsyncRollout and BusyClock: deterministic versions, ordered draws, bounded lead, errors."""

import random
import threading
import time

import pytest

from rlpt.device import BusyClock
from rlpt.rollout.pipeline import AsyncRollout


def test_idle_fraction_against_hand_computed_union():
  clock = BusyClock()
  # Intervals [0,1], [0.5,2] (overlap), [3,4] inside the window [0, 5]: busy 3 of 5.
  for iv in [(0.0, 1.0), (0.5, 2.0), (3.0, 4.0)]:
    clock.record(*iv)
  assert clock.idle_fraction(0.0, 5.0) == pytest.approx(0.4)
  # A window cutting intervals: [1.5, 3.5] holds busy [1.5,2] and [3,3.5].
  assert clock.idle_fraction(1.5, 3.5) == pytest.approx(0.5)
  with clock.busy():
    time.sleep(0.01)
  assert clock.idle_fraction(10.0, 10.0) == 0.0


@pytest.mark.parametrize("staleness", [1, 2, 3])
def test_versions_are_deterministic_and_draws_in_order(staleness):
  drawn, lock = [], threading.Lock()
  rng = random.Random(staleness)

  def prepare(wave, version):
    with lock:
      drawn.append(wave)
    return wave * 10

  def execute(wave, version, prepared):
    time.sleep(rng.random() * 0.02)  # waves finish out of order
    return (wave, version, prepared)

  ar = AsyncRollout(prepare, execute, staleness, first_wave=4)  # resumed after step 3
  try:
    for step in range(3, 15):
      w = ar.get(step + 1)
      wave, version, prepared = w.item
      assert wave == step + 1 and prepared == wave * 10
      assert version == w.version == max(3, wave - 1 - staleness)
      assert step - version <= staleness  # the staleness bound
      time.sleep(0.005)  # "update"
      ar.publish(step + 1)
  finally:
    ar.close()
  assert drawn == sorted(drawn) and drawn[:12] == list(range(4, 16))


def test_producers_never_run_more_than_staleness_ahead():
  started = []

  def prepare(wave, version):
    started.append(wave)

  ar = AsyncRollout(prepare, lambda w, v, p: w, staleness=2)
  try:
    time.sleep(0.2)
    # No version published yet: waves 1..3 (versions 0) only.
    assert started == [1, 2, 3]
    ar.get(1)
    ar.publish(1)
    time.sleep(0.2)
    assert started == [1, 2, 3, 4]
  finally:
    ar.close()


def test_producer_failure_reaches_the_consumer():
  def execute(wave, version, prepared):
    if wave == 2:
      raise ValueError("environment pool exploded")
    return wave

  ar = AsyncRollout(lambda w, v: None, execute, staleness=1)
  try:
    assert ar.get(1).item == 1
    ar.publish(1)
    with pytest.raises(RuntimeError, match="failed on wave 2") as e:
      ar.get(2)
    assert isinstance(e.value.__cause__, ValueError)
  finally:
    ar.close()
  with pytest.raises(ValueError, match="staleness >= 1"):
    AsyncRollout(lambda w, v: None, lambda w, v, p: None, staleness=0)


def test_wait_version_blocks_until_published():
  """A wave's part at a smaller staleness waits for its (newer) version."""
  seen = []

  def execute(wave, version, prepared):
    v = pipe.version_for(wave, 0)  # fully fresh part: the previous update's weights
    pipe.wait_version(v)
    seen.append((wave, version, v))
    return wave

  pipe = AsyncRollout(lambda w, v: None, execute, staleness=2, start=False)
  pipe.start()
  try:
    assert pipe.get(1).item == 1  # version 0 is there from the start
    pipe.publish(1)
    assert pipe.get(2).item == 2
    pipe.publish(2)
    assert pipe.get(3).item == 3
  finally:
    pipe.close()
  assert sorted(seen)[:3] == [(1, 0, 0), (2, 0, 1), (3, 0, 2)]
