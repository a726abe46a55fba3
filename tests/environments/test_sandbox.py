"""The pre-forked worker pool: speed, isolation basics, recovery."""

import os
import signal
import subprocess
import sys
import time

import pytest

from environments.sandbox import Limits, PythonJob, SandboxPool, ShellJob, Status

ADD1 = PythonJob(source="def f(x): return x + 1", entry="f", calls=((1,), (41,)))


@pytest.fixture
def pool():
    p = SandboxPool(size=2)
    yield p
    p.close()


def _values(result):
    assert result.status is Status.OK, result
    return [r.get("ok", r.get("error")) for r in result.result["results"]]


def test_trivial_job_is_fast_and_reuses_the_worker(pool):
    assert _values(pool.run(ADD1)) == [2, 42]
    start = time.perf_counter()
    for _ in range(50):
        assert _values(pool.run(ADD1)) == [2, 42]
    per_job_s = (time.perf_counter() - start) / 50
    assert per_job_s < 0.05, per_job_s  # a few ms typically; generous for loaded CI
    assert pool.workers_started == 1


def test_values_cross_as_tagged_plain_data(pool):
    """The worker sends each returned value in the one tagged encoding
    (environments/sandbox/tagged.py): exact builtin types only, a subclass
    opaque (its type's name, never its value)."""
    job = PythonJob(
        source="class I(int):\n    pass\ndef f(k): return [1, True, 2.5, 'a', None, (1, 2), I(3), {1: [2]}, {3}, b'x'][k]",
        entry="f",
        calls=tuple((k,) for k in range(10)),
    )
    values = _values(pool.run(job))
    assert values[:5] == [1, True, 2.5, "a", None] and type(values[1]) is bool
    assert values[5:] == [{"tuple": [1, 2]}, {"opaque": "I"}, {"dict": [[1, {"list": [2]}]]}, {"set": [3]}, {"bytes": "78"}]


def test_output_is_captured_but_bounded(pool):
    job = PythonJob(source="print('hello')\nimport sys\nsys.stdout.write('x' * 5_000_000)\ndef f(): return 1", entry="f", calls=((),), timeout_s=5)
    result = pool.run(job)
    assert _values(result) == [1]
    assert result.output.startswith("hello") and len(result.output) <= job.output_limit
    assert result.output_bytes >= 5_000_000


def test_limits_apply(pool):
    big = pool.run(PythonJob(source="x = bytearray(300 << 20)", limits=Limits(address_space_bytes=128 << 20)))
    assert big.result["error_type"] == "MemoryError"
    fork = pool.run(PythonJob(source="import os\nos.fork()"))
    assert fork.result["phase"] == "load" and "Resource temporarily unavailable" in fork.result["error"]
    write = pool.run(PythonJob(source="open('f', 'wb').write(b'x' * (2 << 20))", limits=Limits(file_size_bytes=1 << 20)))
    assert write.result["phase"] == "load" and "File too large" in write.result["error"]
    slow = pool.run(PythonJob(source="import time\ntime.sleep(30)", timeout_s=0.3, wall_s=0.3))
    assert slow.status is Status.TIMEOUT and slow.limit_hit == "wall" and slow.wall_s < 2.0


def test_worker_killed_between_jobs_is_replaced_transparently(pool):
    assert _values(pool.run(ADD1)) == [2, 42]
    slot_workers = [s.worker for s in pool._all if s.worker is not None]
    os.killpg(slot_workers[0].proc.pid, signal.SIGKILL)
    slot_workers[0].proc.wait()
    for _ in range(3):
        assert _values(pool.run(ADD1)) == [2, 42]
    assert pool.workers_started == 2


def test_worker_recycled_after_max_jobs():
    pool = SandboxPool(size=1, max_jobs_per_worker=3)
    try:
        for _ in range(7):
            assert _values(pool.run(ADD1)) == [2, 42]
        assert pool.workers_started == 3
    finally:
        pool.close()


def test_unstartable_worker_is_a_sandbox_error_not_an_exception():
    class Broken:
        name = "broken"

        def argv(self, config):
            return ["/nonexistent/python"]

    pool = SandboxPool(size=1, launcher=Broken())
    result = pool.run(ADD1)
    assert result.status is Status.SANDBOX_ERROR and "could not start" in result.detail
    pool.close()


def test_shell_job_returns_workspace(pool):
    job = ShellJob(script="mkdir d && cat in.txt | tr a-z A-Z > d/out.txt && echo done", files={"in.txt": "abc\n"})
    result = pool.run(job)
    assert result.status is Status.OK and result.exit_code == 0
    assert result.output == "done\n"
    assert result.files["d/out.txt"]["data"] == "ABC\n"
    assert result.files["d"] == {"type": "dir"}


def test_environments_never_import_jax():
    code = "import sys, environments; assert not any(m.split('.')[0] in ('jax', 'jaxlib', 'flax') for m in sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))


def test_job_setup_failure_is_an_infra_error(pool):
    # An impossible rlimit makes the child's setup fail before any job code runs.
    result = pool.run(PythonJob(source="x = 1", limits=Limits(open_files=-7)))
    assert result.status is Status.SANDBOX_ERROR and "setup failed" in result.detail
    assert _values(pool.run(ADD1)) == [2, 42]


def test_default_launcher_falls_back_with_a_warning(monkeypatch, caplog):
    from environments import sandbox
    from environments.sandbox import PlainLauncher, bwrap

    monkeypatch.setattr(bwrap, "probe", lambda: (False, "no namespaces here"))
    with caplog.at_level("WARNING"):
        launcher = sandbox.default_launcher()
    assert isinstance(launcher, PlainLauncher)
    assert "no namespaces here" in caplog.text
