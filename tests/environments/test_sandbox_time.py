"""A job's time limits: `timeout_s` counts the CPU time of all its processes
and threads, so other jobs on the cores cannot turn a correct answer into
TIMEOUT; a wall-clock ceiling (`wall_s`) ends sleeps and hangs. A TIMEOUT
says which limit it hit.

Each case runs on the bubblewrap and the plain worker, with the CPU time read
from the worker's cgroup and summed in /proc, where this machine allows each.
"""

import os
import subprocess
import sys

import gymnasium
import pytest

import environments  # noqa: F401
from environments.sandbox import Limits, PlainLauncher, PythonJob, SandboxPool, ShellJob, Status, bwrap, cgroup, wall_ceiling

BWRAP_OK, BWRAP_REASON = bwrap.probe()
CGROUP_LAYOUT, CGROUP_REASON = cgroup.probe()
CPU_CGROUP_OK = CGROUP_LAYOUT is not None and CGROUP_LAYOUT.cpu_parent is not None


def _setup(kind: str, accounting: str):
    marks = []
    if kind == "bwrap" and not BWRAP_OK:
        marks.append(pytest.mark.skip(reason=f"bwrap unusable here: {BWRAP_REASON}"))
    if accounting == "cgroup" and not CPU_CGROUP_OK:
        marks.append(pytest.mark.skip(reason=f"no CPU cgroup here: {CGROUP_REASON}"))
    return pytest.param((kind, accounting), id=f"{kind}-{accounting}", marks=marks)


SETUPS = [_setup("bwrap", "cgroup"), _setup("bwrap", "poll"), _setup("plain", "cgroup"), _setup("plain", "poll")]
# The slow case runs on two setups that together cover both launchers and both accountings.
SETUPS_2 = [_setup("bwrap", "cgroup"), _setup("plain", "poll")]

# Burns `need` seconds of its own CPU time whatever the machine's speed.
_BURN = "import os, time\ndef f(need, cpu):\n    if cpu is not None:\n        os.sched_setaffinity(0, {cpu})\n    while time.process_time() < need:\n        pass\n    return 'done'\n"


@pytest.fixture
def pool(request):
    kind, accounting = request.param
    p = SandboxPool(size=1, launcher=bwrap.BwrapLauncher() if kind == "bwrap" else PlainLauncher(), memory_cgroups=None if accounting == "cgroup" else False)
    assert (p.cpu_accounting == "polling") == (accounting == "poll"), p.cpu_accounting
    yield p
    p.close()


@pytest.mark.parametrize("pool", SETUPS_2, indirect=True)
def test_cpu_heavy_job_passes_while_busy_loops_share_its_core(pool):
    # 60% of a 2 s CPU limit, on one core with two busy loops (as four loops
    # would load two cores): about 3.6 s of wall time, past the 2 s a
    # wall-clock limit allowed, yet a correct answer.
    cpu = min(os.sched_getaffinity(0))
    loop = f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True:\n    pass\n"
    # Each loop in a session of its own, as the sandbox's worker is: with the
    # kernel's autogroup scheduling a core is shared fairly between sessions,
    # so loops inside the test's own session would leave the job most of it.
    loops = [subprocess.Popen([sys.executable, "-c", loop], start_new_session=True) for _ in range(2)]
    try:
        result = pool.run(PythonJob(source=_BURN, entry="f", calls=((1.2, cpu),), timeout_s=2.0))
    finally:
        for proc in loops:
            proc.kill()
            proc.wait()
    assert result.status is Status.OK and result.result["results"] == [{"ok": "done"}], result
    assert 1.2 <= result.cpu_s < 2.0 and result.wall_s > 2.0, (result.cpu_s, result.wall_s)


@pytest.mark.parametrize("pool", SETUPS, indirect=True)
def test_infinite_loop_is_a_cpu_timeout(pool):
    result = pool.run(PythonJob(source="while True:\n    pass", timeout_s=1.0))
    assert result.status is Status.TIMEOUT and result.limit_hit == "cpu", result
    assert result.detail.startswith("CPU time limit of 1 s exceeded"), result.detail
    # Ended by its CPU time, long before the 31 s wall-clock ceiling (about 1 s when the machine is idle).
    assert 1.0 <= result.cpu_s < 1.3 and result.wall_s < 10.0, (result.cpu_s, result.wall_s)


@pytest.mark.parametrize("pool", SETUPS, indirect=True)
def test_sleep_is_a_wall_clock_timeout(pool):
    result = pool.run(PythonJob(source="import time\ntime.sleep(1e9)", timeout_s=1.0, wall_s=1.5))
    assert result.status is Status.TIMEOUT and result.limit_hit == "wall", result
    assert result.detail.startswith("wall-clock limit of 1.5 s exceeded"), result.detail
    assert 1.5 <= result.wall_s < 3.0 and result.cpu_s < 0.5, (result.cpu_s, result.wall_s)
    # Under the default ceiling a sleep longer than the CPU limit is no fault.
    nap = pool.run(PythonJob(source="import time\ndef f():\n    time.sleep(1.2)\n    return 1", entry="f", calls=((),), timeout_s=0.5))
    assert nap.status is Status.OK and nap.result["results"] == [{"ok": 1}], nap


@pytest.mark.parametrize("pool", SETUPS, indirect=True)
def test_processes_are_charged_together(pool):
    # Four processes of 0.4 s each: every one far under RLIMIT_CPU, 1.6 s in all.
    burn = "python3 -S -c 'import time\nwhile time.process_time() < {}: pass'"
    four = " & ".join([burn.format(0.4)] * 4)
    result = pool.run(ShellJob(script=f"{four} & wait; echo finished", timeout_s=1.0, limits=Limits(processes=16)))
    assert result.status is Status.TIMEOUT and result.limit_hit == "cpu", result
    assert result.cpu_s >= 1.0 and "finished" not in result.output, (result.cpu_s, result.output)
    two = " & ".join([burn.format(0.3)] * 2)
    fine = pool.run(ShellJob(script=f"{two} & wait; echo finished", timeout_s=1.0, limits=Limits(processes=16)))
    assert fine.status is Status.OK and fine.output == "finished\n" and 0.6 <= fine.cpu_s < 1.0, fine


# The plain worker's job uid may not read the host interpreter's library (threading, hashlib).
@pytest.mark.parametrize("pool", [_setup("bwrap", "cgroup"), _setup("bwrap", "poll")], indirect=True)
def test_threads_are_charged_together(pool):
    # hashlib releases the GIL: four threads burn CPU in parallel.
    source = (
        "import hashlib, threading\n"
        "data = bytes(4 << 20)\n"
        "def spin():\n"
        "    while True:\n"
        "        hashlib.sha256(data).digest()\n"
        "for _ in range(4):\n"
        "    threading.Thread(target=spin, daemon=True).start()\n"
        "spin()\n"
    )
    result = pool.run(PythonJob(source=source, timeout_s=1.0, limits=Limits(processes=8)))  # a thread counts as a process
    assert result.status is Status.TIMEOUT and result.limit_hit == "cpu", result
    assert 1.0 <= result.cpu_s < 1.5, result.cpu_s


def test_default_wall_ceiling_and_bad_limits():
    assert wall_ceiling(5.0) == 35.0 and wall_ceiling(20.0) == 60.0
    assert PythonJob(source="", timeout_s=5).to_wire()["wall_s"] == 35.0
    assert ShellJob(script="", timeout_s=2, wall_s=2).to_wire()["wall_s"] == 2.0
    with pytest.raises(ValueError, match="PythonJob.timeout_s must be a positive number of CPU seconds, got 0"):
        PythonJob(source="", timeout_s=0).to_wire()
    with pytest.raises(ValueError, match=r"ShellJob.wall_s must be None or a positive number of seconds, got -1"):
        ShellJob(script="", wall_s=-1).to_wire()


def test_timeout_feedback_names_the_limit():
    env = gymnasium.make("rlpt/code-linear-easy-v0")
    env.reset(seed=0)
    _, reward, _, _, info = env.step("max(iter(int, 1))")
    assert (reward, info["verdict"]) == (0.0, "TIMEOUT")
    assert info["feedback"].startswith("CPU time limit of 1 s exceeded"), info["feedback"]
