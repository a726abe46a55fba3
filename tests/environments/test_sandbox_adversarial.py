"""Hostile programs: each case asserts the verdict and that the host is intact.

Runs on the default pool (bubblewrap when `bwrap.probe()` succeeds, the plain
forked worker otherwise). Cases that only namespaces can stop are skipped
exactly when the probe says this machine cannot run bwrap.
"""

import os
import secrets
import threading
import time

import gymnasium
import pytest

import environments  # noqa: F401
from environments import sandbox
from environments.sandbox import Limits, PythonJob, ShellJob, Status, bwrap

BWRAP_OK, BWRAP_REASON = bwrap.probe()
needs_bwrap = pytest.mark.skipif(not BWRAP_OK, reason=f"bwrap unusable here: {BWRAP_REASON}")
ROOT = os.geteuid() == 0
# A job's setsid escapees are reaped by the job uid (root) or by the sandbox's
# PID namespace (bwrap); a plain worker without a uid drop cannot tell them
# from the user's own processes.
needs_reaping = pytest.mark.skipif(not (ROOT or BWRAP_OK), reason="an unsandboxed same-uid worker cannot reap setsid escapees")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _host_processes_matching(marker: str) -> list[int]:
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        pids.append(int(name))
            except OSError:
                pass
    return pids


def _host_processes_named(name: str) -> list[int]:
    """Host pids whose argv[0] is `name` (a binary of that name, run by path)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    argv0 = f.read().split(b"\0", 1)[0]
            except OSError:
                continue
            if os.path.basename(argv0) == name.encode():
                pids.append(int(entry))
    return pids


def _run_watching(job: ShellJob, name: str) -> tuple[sandbox.JobResult, set[int]]:
    """Runs `job` while watching the host's /proc (which lists the sandbox's
    processes too) for processes named `name`; returns the result and the host
    pids seen while the job ran: proof that the adversary really started."""
    seen: set[int] = set()
    done = threading.Event()

    def watch():
        while not done.is_set():
            seen.update(_host_processes_named(name))
            time.sleep(0.005)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        return sandbox.run(job), seen
    finally:
        done.set()
        watcher.join()


def _marker() -> str:
    # A copy of /bin/sleep under this name marks the adversary's processes
    # (`exec -a NAME` would be simpler, but dash, the usual /bin/sh, lacks it).
    return f"rlpt_escapee_{secrets.token_hex(6)}"


def _assert_pool_healthy():
    result = sandbox.run(PythonJob(source="def f(x): return x * 2", entry="f", calls=((21,),)))
    assert result.status is Status.OK and result.result["results"] == [{"ok": 42}]


def _code_verdict(answer: str) -> tuple[float, str, str]:
    env = gymnasium.make("rlpt/code-linear-easy-v0")
    env.reset(seed=0)
    _, reward, _, _, info = env.step(answer)
    return reward, info["verdict"], info["feedback"]


def _python(source: str, **kwargs) -> sandbox.JobResult:
    return sandbox.run(PythonJob(source=source, **kwargs))


@pytest.fixture(autouse=True)
def host_intact():
    before = set(os.listdir(REPO))
    yield
    assert set(os.listdir(REPO)) == before, "a job changed the repository"
    _assert_pool_healthy()


def test_infinite_loop_times_out():
    start = time.monotonic()
    reward, verdict, feedback = _code_verdict("max(iter(int, 1))")
    assert (reward, verdict) == (0.0, "TIMEOUT") and "CPU time limit of 1 s" in feedback, feedback
    assert time.monotonic() - start < 3.0


def test_sleep_times_out_on_wall_clock():
    result = _python("import time\ntime.sleep(60)", timeout_s=0.5, wall_s=0.5)
    assert result.status is Status.TIMEOUT and result.limit_hit == "wall" and result.wall_s < 2.0 and result.cpu_s < 0.5


def test_memory_hog_is_oom():
    assert _code_verdict("len(bytearray(1 << 34))")[:2] == (0.0, "OOM")
    result = _python("x = []\nwhile True:\n    x.append(bytearray(1 << 20))", timeout_s=5)
    assert result.result["error_type"] == "MemoryError"


def test_python_fork_bomb_cannot_fork():
    result = _python("import os\nwhile True:\n    os.fork()")
    assert result.status is Status.OK and result.result["error_type"] == "BlockingIOError"


@needs_reaping
def test_shell_fork_bomb_is_contained_and_reaped():
    marker = _marker()
    # Each bomb shell leaves a sleeper in the job's process group and one in a
    # session of its own (out of reach of the process-group kill). The job's
    # own shell only waits (no fork of its own can fail), so the bomb runs for
    # about a second.
    bomb = f"f() {{ ./{marker} 30 & setsid ./{marker} 30 & f & }}"
    script = f"cp /bin/sleep ./{marker} || exit 1; {bomb}; sleep 1 & f & wait"
    result, seen = _run_watching(ShellJob(script=script, timeout_s=3.0, limits=Limits(processes=32)), marker)
    assert result.status in (Status.OK, Status.TIMEOUT)
    assert seen, f"the bomb never started a sleeper: {result.output[:300]!r}"
    assert "fork" in result.output.lower(), "the bomb never hit the process limit"  # dash: "Cannot fork"
    time.sleep(0.1)
    assert _host_processes_matching(marker) == []


@needs_reaping
def test_setsid_double_fork_escapee_is_reaped():
    marker = _marker()
    # One sleeper escapes into a new session (orphaned by its exiting parent),
    # one stays in the job's process group; the job lingers so both are seen.
    script = f"cp /bin/sleep ./{marker} || exit 1; setsid sh -c './{marker} 300 &'; ./{marker} 300 & echo started; sleep 1"
    result, seen = _run_watching(ShellJob(script=script, timeout_s=5.0, limits=Limits(processes=16)), marker)
    assert result.status is Status.OK and "started" in result.output, result.output
    assert len(seen) >= 2, f"expected both sleepers running during the job, saw {seen}"
    time.sleep(0.1)
    assert _host_processes_matching(marker) == []


def test_file_bomb_is_bounded():
    big = _python("open('big', 'wb').write(b'x' * (64 << 20))", limits=Limits(file_size_bytes=1 << 20))
    assert big.result["phase"] == "load" and "File too large" in big.result["error"]
    # Many files, each under the size limit: bounded by the timeout (and, in
    # bwrap, by the sandbox's size-limited tmpfs); the next job starts clean.
    many = _python("i = 0\nwhile True:\n    open(f'f{i}', 'wb').write(b'x' * (1 << 19)); print(i, flush=True); i += 1", timeout_s=1.0)
    assert many.status in (Status.TIMEOUT, Status.OK)
    assert many.output.startswith("0\n1\n2\n"), many.output[:100]  # it did write files
    clean = sandbox.run(ShellJob(script="ls | wc -l"))
    assert clean.output.strip() == "0"


@needs_bwrap
def test_network_is_unreachable():
    result = _python("import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=2)")
    assert result.result["error_type"] in ("OSError", "TimeoutError", "ConnectionRefusedError")
    assert "unreachable" in result.result["error"].lower()


def test_cannot_write_outside_the_work_dir():
    target = os.path.join(REPO, "pwned.txt")
    result = _python(f"open({target!r}, 'w').write('x')")
    assert result.result["phase"] == "load"
    assert result.result["error_type"] in ("PermissionError", "FileNotFoundError", "OSError")
    assert not os.path.exists(target)


@pytest.mark.skipif(not (ROOT or BWRAP_OK), reason="an unsandboxed same-uid job can read the host's files")
def test_cannot_read_host_files(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("hunter2")
    secret.chmod(0o600)
    result = _python(f"print(open({str(secret)!r}).read())")
    assert result.result["error_type"] in ("PermissionError", "FileNotFoundError")
    assert "hunter2" not in result.output


@pytest.mark.skipif(not ROOT, reason="without a uid drop a job may signal its own worker")
def test_cannot_kill_the_worker():
    result = _python("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)")
    assert result.status is Status.OK and result.result["error_type"] == "PermissionError"


def test_sys_exit_and_os_exit_earn_nothing():
    reward, verdict, feedback = _code_verdict("__import__('sys').exit(0)")
    assert (reward, verdict) == (0.0, "ERROR") and "SystemExit" in feedback, feedback
    reward, verdict, feedback = _code_verdict("__import__('os')._exit(0)")
    assert (reward, verdict) == (0.0, "ERROR") and "exit code 0" in feedback, feedback


def test_printing_pass_earns_nothing():
    reward, verdict, feedback = _code_verdict("print('PASS') or print('OK', flush=True)")
    assert (reward, verdict) == (0.0, "FAIL")
    assert "got None" in feedback, feedback  # the prints ran (print returns None)


@pytest.mark.parametrize(
    "tamper",
    [
        "import builtins\nbuiltins.isinstance = lambda *a: True\nbuiltins.AssertionError = Exception",
        "import os\nos.write(3, b'\\x00\\x00\\x00\\x04PASS')",  # forged frame on the result pipe
        "import sys\nsys.modules['__main__']._rlpt_tag = lambda v, d=0: 7",  # patch the worker's encoder
        "import gc\nfor o in gc.get_objects():\n    if isinstance(o, dict) and 'expected' in o: o['expected'] = 0",
        "open('test_code.py', 'w').write('assert True')",  # "edit the tests"
    ],
)
def test_test_tampering_earns_nothing(tamper):
    # Expected values live only in the host; the child sees inputs only.
    from environments.grading import grade_calls

    calls = ((1,), (2,))
    job = PythonJob(source=tamper + "\nprint('tampered', flush=True)\ndef f(x):\n    return -1\n", entry="f", calls=calls)
    result = sandbox.run(job)
    assert "tampered" in result.output, result  # the tampering ran to completion
    if "_rlpt_tag" in tamper:  # the patched encoder did send the results: forged ones earn nothing
        assert result.result["results"] == [{"ok": 7}, {"ok": 7}], result
    grade = grade_calls(result, calls, [3, 5], entry="f", timeout_s=job.timeout_s)
    assert grade.reward == 0.0 and grade.verdict.value in ("FAIL", "ERROR"), grade


def test_job_state_never_leaks_into_the_next_job():
    assert _python("import builtins\nbuiltins.len = lambda x: 0\nprint(len('abc'))").output == "0\n"
    assert _python("def f(): return len('abc')", entry="f", calls=((),)).result["results"] == [{"ok": 3}]


def test_stdout_flood_is_bounded():
    result = _python("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)", timeout_s=0.5, output_limit=1000)
    assert result.status is Status.TIMEOUT
    assert len(result.output) == 1000 and result.output_bytes > 1000


def test_gigabyte_print_gets_a_clean_verdict():
    reward, verdict, _ = _code_verdict("print('x' * 10**9)")
    assert reward == 0.0 and verdict in ("OOM", "TIMEOUT")
