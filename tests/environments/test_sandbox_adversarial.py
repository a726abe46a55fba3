"""Hostile programs: each case asserts the verdict and that the host is intact.

Runs on the default pool (bubblewrap when `bwrap.probe()` succeeds, the plain
forked worker otherwise). Cases that only namespaces can stop are skipped
exactly when the probe says this machine cannot run bwrap.
"""

import os
import time

import gymnasium
import pytest

import environments  # noqa: F401
from environments import sandbox
from environments.sandbox import Limits, PythonJob, ShellJob, Status, bwrap

BWRAP_OK, BWRAP_REASON = bwrap.probe()
needs_bwrap = pytest.mark.skipif(not BWRAP_OK, reason=f"bwrap unusable here: {BWRAP_REASON}")
ROOT = os.geteuid() == 0
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
    assert _code_verdict("max(iter(int, 1))")[:2] == (0.0, "TIMEOUT")
    assert time.monotonic() - start < 3.0


def test_sleep_times_out_on_wall_clock():
    result = _python("import time\ntime.sleep(60)", timeout_s=0.5)
    assert result.status is Status.TIMEOUT and result.wall_s < 2.0 and result.cpu_s < 0.5


def test_memory_hog_is_oom():
    assert _code_verdict("len(bytearray(1 << 34))")[:2] == (0.0, "OOM")
    result = _python("x = []\nwhile True:\n    x.append(bytearray(1 << 20))", timeout_s=5)
    assert result.result["error_type"] == "MemoryError"


def test_python_fork_bomb_cannot_fork():
    result = _python("import os\nwhile True:\n    os.fork()")
    assert result.status is Status.OK and result.result["error_type"] == "BlockingIOError"


def test_shell_fork_bomb_is_contained_and_reaped():
    marker = "forkbomb4711"
    script = f"f() {{ (exec -a {marker} sleep 30) & f & }}; f"
    result = sandbox.run(ShellJob(script=script, timeout_s=1.0, limits=Limits(processes=32)))
    assert result.status in (Status.OK, Status.TIMEOUT)
    time.sleep(0.1)
    assert _host_processes_matching(marker) == []


def test_setsid_double_fork_escapee_is_reaped():
    marker = "escapee0815"
    script = f"setsid sh -c '(exec -a {marker} sleep 300) &' ; (exec -a {marker} sleep 300) & echo started"
    result = sandbox.run(ShellJob(script=script, timeout_s=1.0, limits=Limits(processes=16)))
    assert result.status is Status.OK and "started" in result.output
    time.sleep(0.1)
    assert _host_processes_matching(marker) == []


def test_file_bomb_is_bounded():
    big = _python("open('big', 'wb').write(b'x' * (64 << 20))", limits=Limits(file_size_bytes=1 << 20))
    assert big.result["phase"] == "load" and "File too large" in big.result["error"]
    # Many files, each under the size limit: bounded by the timeout (and, in
    # bwrap, by the sandbox's size-limited tmpfs); the next job starts clean.
    many = _python("i = 0\nwhile True:\n    open(f'f{i}', 'wb').write(b'x' * (1 << 19)); i += 1", timeout_s=1.0)
    assert many.status in (Status.TIMEOUT, Status.OK)
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
    assert _code_verdict("__import__('sys').exit(0)")[:2] == (0.0, "ERROR")
    assert _code_verdict("__import__('os')._exit(0)")[:2] == (0.0, "ERROR")


def test_printing_pass_earns_nothing():
    reward, verdict, _ = _code_verdict("print('PASS') or print('OK', flush=True)")
    assert (reward, verdict) == (0.0, "FAIL")


@pytest.mark.parametrize(
    "tamper",
    [
        "import builtins\nbuiltins.isinstance = lambda *a: True\nbuiltins.AssertionError = Exception",
        "import os\nos.write(3, b'\\x00\\x00\\x00\\x04PASS')",  # forged frame on the result pipe
        "import sys\nsys.modules['__main__']._encode_value = lambda v, d=0: 7",  # patch the harness
        "import gc\nfor o in gc.get_objects():\n    if isinstance(o, dict) and 'expected' in o: o['expected'] = 0",
        "open('test_code.py', 'w').write('assert True')",  # "edit the tests"
    ],
)
def test_test_tampering_earns_nothing(tamper):
    # Expected values live only in the host; the child sees inputs only.
    from environments.grading import grade_calls

    calls = ((1,), (2,))
    job = PythonJob(source=tamper + "\ndef f(x):\n    return -1\n", entry="f", calls=calls)
    grade = grade_calls(sandbox.run(job), calls, [3, 5], entry="f", timeout_s=job.timeout_s)
    assert grade.reward == 0.0 and grade.verdict.value in ("FAIL", "ERROR"), grade


def test_job_state_never_leaks_into_the_next_job():
    _python("import builtins\nbuiltins.len = lambda x: 0")
    assert _python("def f(): return len('abc')", entry="f", calls=((),)).result["results"] == [{"ok": 3}]


def test_stdout_flood_is_bounded():
    result = _python("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)", timeout_s=0.5, output_limit=1000)
    assert result.status is Status.TIMEOUT
    assert len(result.output) == 1000 and result.output_bytes > 1000


def test_gigabyte_print_gets_a_clean_verdict():
    reward, verdict, _ = _code_verdict("print('x' * 10**9)")
    assert reward == 0.0 and verdict in ("OOM", "TIMEOUT")
