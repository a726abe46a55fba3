"""JobScheduler: priority order, ageing, resource-class isolation, hung jobs, backoff delays."""

import threading
import time

import pytest

from rlpt.rollout.scheduler import JobScheduler, JobTimeout


def _gate(s, resource):
  """Occupies the class's single worker until the returned event is set."""
  release, started = threading.Event(), threading.Event()

  def hold():
    started.set()
    release.wait(10)
  f = s.submit(hold, resource=resource)
  assert started.wait(5)
  return release, f


def test_higher_priority_runs_first():
  s = JobScheduler({"a": 1}, aging_s=1e6)
  try:
    release, gate = _gate(s, "a")
    order = []
    futures = [s.submit(order.append, p, resource="a", priority=p) for p in (0, 5, 1, 3)]
    release.set()
    for f in futures:
      f.result(5)
    assert order == [5, 3, 1, 0]
  finally:
    s.close()


def test_ageing_lets_old_low_priority_work_overtake():
  s = JobScheduler({"a": 1}, aging_s=0.01)
  try:
    release, _ = _gate(s, "a")
    order = []
    old = s.submit(order.append, "old-low", resource="a", priority=0)
    time.sleep(0.1)  # 10 priority units of waiting
    new = s.submit(order.append, "new-high", resource="a", priority=2)
    release.set()
    old.result(5), new.result(5)
    assert order == ["old-low", "new-high"]
  finally:
    s.close()


def test_a_busy_class_does_not_block_another():
  s = JobScheduler({"sandbox": 1, "cheap": 2})
  try:
    release, slow = _gate(s, "sandbox")
    t = time.perf_counter()
    assert [s.submit(lambda x: x * 2, i, resource="cheap").result(5) for i in range(20)] == [
        2 * i for i in range(20)]
    assert time.perf_counter() - t < 2 and not slow.done()
    release.set()
    slow.result(5)
  finally:
    s.close()


def test_hung_job_times_out_and_its_thread_is_replaced():
  s = JobScheduler({"a": 1}, timeout_s=0.3)
  try:
    stuck = threading.Event()
    hung = s.submit(stuck.wait, 30, resource="a")
    with pytest.raises(JobTimeout, match="timeout"):
      hung.result(5)
    # Capacity is back: the next job runs although the hung thread still waits.
    assert s.submit(lambda: "ok", resource="a").result(5) == "ok"
    assert s.reset_stats()["timeouts"] == 1
    stuck.set()
  finally:
    s.close()


def test_delay_holds_a_job_back_without_blocking_others():
  s = JobScheduler({"a": 1})
  try:
    t0 = time.monotonic()
    delayed = s.submit(time.monotonic, resource="a", priority=10, delay_s=0.3)
    now = s.submit(time.monotonic, resource="a").result(5)
    assert now - t0 < 0.25  # ran while the higher-priority job waited out its delay
    assert delayed.result(5) - t0 >= 0.3
  finally:
    s.close()


def test_errors_reach_the_caller_and_bad_arguments_are_named():
  s = JobScheduler({"a": 1})
  try:
    def boom():
      raise KeyError("nope")
    with pytest.raises(KeyError):
      s.submit(boom, resource="a").result(5)
    with pytest.raises(ValueError, match="unknown resource class 'gpu'"):
      s.submit(boom, resource="gpu")
  finally:
    s.close()
  with pytest.raises(ValueError, match="at least one worker"):
    JobScheduler({"a": 0})
