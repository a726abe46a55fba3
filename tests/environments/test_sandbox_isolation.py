"""Isolation between jobs, pools and the host: nothing a job creates survives
it, pools never share job uids, and a job's memory is capped as a whole.

Each case runs on the plain forked worker and, where this machine can run
it, on the bubblewrap worker.
"""

import ast
import ctypes
import os
import secrets
import subprocess
import sys
import threading
import time

import gymnasium
import pytest

import environments  # noqa: F401
from environments.grading import grade_calls
from environments.programs.values import untag
from environments.sandbox import JobResult, Limits, PlainLauncher, PythonJob, SandboxPool, ShellJob, Status, bwrap
from environments.verdicts import Verdict

BWRAP_OK, BWRAP_REASON = bwrap.probe()
ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="job uids are only dropped to when the host is root")
KINDS = ["plain", pytest.param("bwrap", marks=pytest.mark.skipif(not BWRAP_OK, reason=f"bwrap unusable here: {BWRAP_REASON}"))]
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/dev/mqueue")


def _launcher(kind):
    return PlainLauncher() if kind == "plain" else bwrap.BwrapLauncher()


@pytest.fixture
def make_pool():
    pools = []

    def make(kind, **kwargs):
        kwargs.setdefault("size", 1)
        pool = SandboxPool(launcher=_launcher(kind), **kwargs)
        pools.append(pool)
        return pool

    yield make
    for pool in pools:
        pool.close()


def _ok(result):
    assert result.status is Status.OK, result
    assert result.result["phase"] == "done", result.result
    return [untag(r["ok"]) if "ok" in r else r.get("error") for r in result.result["results"]]


def _host_processes_with_cmdline(cmdline):
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if f.read() == cmdline:
                        pids.append(int(name))
            except OSError:
                pass
    return pids


def _host_shmem_bytes():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Shmem:"):
                return int(line.split()[1]) << 10
    return 0


# ----------------------------------------------------------------------------- 4: nothing survives the job

_IPC_PRELUDE = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
libc.shmdt.argtypes = [ctypes.c_void_p]
try:
    libc.mq_open
    rt = libc
except AttributeError:
    rt = ctypes.CDLL('librt.so.1', use_errno=True)
SHM_BYTES = 128 << 20
"""

_CREATE = _IPC_PRELUDE + """
def f(key, tag, dirs):
    made = {}
    shm = libc.shmget(key, SHM_BYTES, 0o1600)  # IPC_CREAT | 0600
    if shm >= 0:
        addr = libc.shmat(shm, None, 0)
        if addr is not None and addr != ctypes.c_void_p(-1).value:
            ctypes.memset(addr, 1, SHM_BYTES)  # really allocate the pages
            libc.shmdt(ctypes.c_void_p(addr))
    made['shm'] = shm
    made['sem'] = libc.semget(key, 4, 0o1600)
    made['msg'] = libc.msgget(key, 0o1600)
    made['mq'] = rt.mq_open(('/rlpt-' + tag).encode(), os.O_CREAT | os.O_RDWR, 0o600, None)
    made['files'] = []
    for d in dirs:
        try:
            with open(os.path.join(d, 'rlpt-leak-' + tag), 'w') as fh:
                fh.write('x' * 4096)
            made['files'].append(d)
        except OSError:
            pass
    return [made['shm'], made['sem'], made['msg'], made['mq'], made['files']]  # dicts do not cross
"""

_INSPECT = _IPC_PRELUDE + """
def f(key, tag, dirs, shm_id):
    buf = ctypes.create_string_buffer(512)
    seen = {}
    seen['shm_key'] = libc.shmget(key, 0, 0) >= 0
    seen['sem_key'] = libc.semget(key, 0, 0) >= 0
    seen['msg_key'] = libc.msgget(key, 0) >= 0
    seen['shm_id'] = libc.shmctl(shm_id, 2, buf) >= 0  # IPC_STAT
    seen['mq'] = rt.mq_open(('/rlpt-' + tag).encode(), os.O_RDONLY, 0, None) >= 0
    me = os.getuid()
    seen['sysvipc_of_my_uid'] = []
    for kind in ('shm', 'sem', 'msg'):
        with open('/proc/sysvipc/' + kind) as fh:
            lines = fh.read().splitlines()[1:]
        header = open('/proc/sysvipc/' + kind).readline().split()
        cuid = header.index('cuid')
        seen['sysvipc_of_my_uid'] += [kind for line in lines if int(line.split()[cuid]) == me]
    seen['files'] = [d for d in dirs if os.path.exists(os.path.join(d, 'rlpt-leak-' + tag))]
    return sorted(k for k, v in seen.items() if v)  # what is still visible
"""


def _host_cleanup(key, tag):
    """Removes what a leaking (unfixed) sandbox left on the host."""
    libc = ctypes.CDLL(None, use_errno=True)
    for get, ctl in ((lambda: libc.shmget(key, 0, 0), libc.shmctl), (lambda: libc.semget(key, 0, 0), None), (lambda: libc.msgget(key, 0), libc.msgctl)):
        ident = get()
        if ident >= 0:
            (ctl(ident, 0, None) if ctl is not None else libc.semctl(ident, 0, 0))
    try:
        (getattr(libc, "mq_unlink", None) or ctypes.CDLL("librt.so.1").mq_unlink)(f"/rlpt-{tag}".encode())
    except (AttributeError, OSError):
        pass
    for d in SHARED_DIRS:
        try:
            os.unlink(os.path.join(d, f"rlpt-leak-{tag}"))
        except OSError:
            pass


@pytest.mark.parametrize("kind", KINDS)
def test_ipc_objects_and_shared_files_do_not_survive_the_job(kind, make_pool):
    pool = make_pool(kind)
    key, tag = 0x5E000000 + secrets.randbelow(1 << 20), secrets.token_hex(6)
    shmem_before = _host_shmem_bytes()
    try:
        shm, sem, msg, _mq, _files = _ok(pool.run(PythonJob(source=_CREATE, entry="f", calls=((key, tag, SHARED_DIRS),), timeout_s=5)))[0]
        assert shm >= 0 and sem >= 0 and msg >= 0  # a default job may create them...
        # ...but the next job of the same worker sees none of them.
        seen = _ok(pool.run(PythonJob(source=_INSPECT, entry="f", calls=((key, tag, SHARED_DIRS, shm),), timeout_s=5)))[0]
        assert seen == []
        assert pool.workers_started == 1
        # The host keeps none of it either: no file, no segment's memory.
        assert [d for d in SHARED_DIRS if os.path.exists(os.path.join(d, f"rlpt-leak-{tag}"))] == []
        assert _host_shmem_bytes() - shmem_before < (64 << 20)
    finally:
        _host_cleanup(key, tag)


# ----------------------------------------------------------------------------- 5: pools never share job uids

_UID_JOB = PythonJob(source="import os, time\ndef f():\n    time.sleep(0.3)\n    return os.getuid()", entry="f", calls=((),), timeout_s=3)


def _uids_of(pool, n):
    out, threads = [], [threading.Thread(target=lambda: out.append(_ok(pool.run(_UID_JOB))[0])) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return set(out)


@needs_root
@pytest.mark.parametrize("kind", KINDS)
def test_two_pools_get_disjoint_job_uids(kind, make_pool):
    a, b = make_pool(kind, size=2), make_pool(kind, size=2)
    uids_a, uids_b = _uids_of(a, 2), _uids_of(b, 2)
    assert len(uids_a) == 2 and len(uids_b) == 2 and not uids_a & uids_b
    # A pool in another process (another run, an evaluation) gets yet other uids.
    code = (
        "import sys, threading; sys.path.insert(0, %r)\n"
        "from environments.sandbox import PlainLauncher, PythonJob, SandboxPool, bwrap\n"
        "job = PythonJob(source=%r, entry='f', calls=((),), timeout_s=3)\n"
        "p = SandboxPool(size=2, launcher=PlainLauncher() if %r == 'plain' else bwrap.BwrapLauncher())\n"
        "out = []\n"
        "ts = [threading.Thread(target=lambda: out.append(p.run(job).result['results'][0]['ok'])) for _ in range(2)]\n"
        "[t.start() for t in ts]; [t.join() for t in ts]; p.close(); print(sorted(out))\n"
    ) % (REPO, _UID_JOB.source, kind)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    uids_c = set(ast.literal_eval(done.stdout.strip().splitlines()[-1]))
    assert len(uids_c) == 2 and not uids_c & (uids_a | uids_b)


@pytest.mark.parametrize("kind", KINDS)
def test_process_heavy_job_in_one_pool_does_not_break_another(kind, make_pool):
    a, b = make_pool(kind), make_pool(kind)
    duration = f"30.{secrets.randbelow(10**8):08d}"  # tells this test's sleeps apart
    marker = f"sleep\0{duration}\0".encode()
    holder = ShellJob(
        script=f"i=0; while [ $i -lt 63 ]; do sleep {duration} & i=$((i+1)); done; wait",
        timeout_s=4.0,
        wall_s=4.0,
        limits=Limits(processes=64),
    )
    held = []
    thread = threading.Thread(target=lambda: held.append(a.run(holder)))
    thread.start()
    try:
        deadline = time.monotonic() + 3.0
        while len(_host_processes_with_cmdline(marker)) < 60 and time.monotonic() < deadline and thread.is_alive():
            time.sleep(0.02)
        assert len(_host_processes_with_cmdline(marker)) >= 60, held
        # A correct shell answer in the other pool still forks.
        result = b.run(ShellJob(script="cat in.txt | tr a-z A-Z > out.txt && echo done", files={"in.txt": "abc\n"}))
        assert result.status is Status.OK and result.exit_code == 0, result
        assert result.files["out.txt"]["data"] == "ABC\n"
    finally:
        thread.join()
    assert held[0].status is Status.TIMEOUT
    time.sleep(0.1)
    assert _host_processes_with_cmdline(marker) == []


# ----------------------------------------------------------------------------- 6: memory is capped per job

# Four processes, each well under the per-process RLIMIT_AS (256 MiB) but
# together above the job's 512 MiB cap.
_HOGS = "for i in 1 2 3 4; do python3 -c 'import time; x = b\"1\" * (150 << 20); time.sleep(20)' & done; wait"

_SHM_HOG = _IPC_PRELUDE + """
for _ in range(4):  # each segment alone fits RLIMIT_AS; together they exceed the cap
    shm = libc.shmget(0, 200 << 20, 0o1600)
    addr = libc.shmat(shm, None, 0)
    ctypes.memset(addr, 1, 200 << 20)
    libc.shmdt(ctypes.c_void_p(addr))
"""

MEMORY_MODES = ["auto", "polling"]


def _memory_pool(make_pool, kind, mode):
    if mode == "auto":
        return make_pool(kind)
    pool = make_pool(kind, memory_cgroups=False)
    assert pool.memory_enforcement == "polling"
    return pool


@pytest.mark.parametrize("mode", MEMORY_MODES)
@pytest.mark.parametrize("kind", KINDS)
def test_processes_together_over_the_cap_get_the_memory_verdict(kind, mode, make_pool):
    pool = _memory_pool(make_pool, kind, mode)
    start = time.monotonic()
    result = pool.run(ShellJob(script=_HOGS, timeout_s=10.0))
    assert result.status.value == "memory", result
    assert time.monotonic() - start < 6.0  # stopped, not left to run into the timeout
    assert "memory" in result.detail
    # Under the cap the same kind of job is untouched, and the worker survives.
    fine = pool.run(ShellJob(script=_HOGS.replace("1 2 3 4", "1 2").replace("time.sleep(20)", "print(len(x))")))
    assert fine.status is Status.OK and fine.output.split() == ["157286400"] * 2, fine
    assert pool.workers_started == 1


@pytest.mark.parametrize("mode", MEMORY_MODES)
@pytest.mark.parametrize("kind", KINDS)
def test_shared_memory_segments_count_against_the_job(kind, mode, make_pool):
    pool = _memory_pool(make_pool, kind, mode)
    result = pool.run(PythonJob(source=_SHM_HOG, timeout_s=10.0))
    assert result.status.value == "memory", result
    assert _ok(pool.run(PythonJob(source="def f(): return 1", entry="f", calls=((),)))) == [1]


def test_memory_cap_is_configurable_and_reported(make_pool):
    from environments.sandbox import cgroup

    pool = make_pool("plain")
    layout, _ = cgroup.probe()  # a cgroup wherever this host allows one
    assert pool.memory_enforcement == (layout.mechanism if layout is not None else "polling")
    small = pool.run(ShellJob(script=_HOGS.replace("1 2 3 4", "1"), timeout_s=5.0, limits=Limits(processes=64, memory_bytes=64 << 20)))
    assert small.status is Status.MEMORY, small
    assert pool.memory_enforcement in small.detail


def test_memory_verdict_is_the_models_oom():
    grade = grade_calls(JobResult(Status.MEMORY, detail="memory limit exceeded"), ((1,),), [2], entry="f", timeout_s=1.0)
    assert (grade.verdict, grade.reward) == (Verdict.OOM, 0.0)
    env = gymnasium.make("rlpt/terminal-upper-easy-v0")
    env.reset(seed=0)
    hog = "for i in 1 2 3 4;do python3 -c 'import time;x=b\"1\"*(150<<20);time.sleep(9)'&done;wait"
    _, reward, _, _, info = env.step(hog)
    assert (reward, info["verdict"]) == (0.0, "OOM"), info


@pytest.mark.parametrize("kind", KINDS)
def test_killed_processes_do_not_count_against_the_next_job(kind, make_pool):
    # The processes reaped after a job are collected at once: their zombies
    # would otherwise count against the uid's RLIMIT_NPROC in the next job.
    pool = make_pool(kind)
    for _ in range(3):
        held = pool.run(ShellJob(script="i=0; while [ $i -lt 63 ]; do setsid sleep 30 & i=$((i+1)); done; echo started", timeout_s=3.0, limits=Limits(processes=64)))
        assert held.status is Status.OK and held.output == "started\n", held
        result = pool.run(ShellJob(script="cat in.txt | tr a-z A-Z > out.txt && echo done", files={"in.txt": "abc\n"}))
        assert result.status is Status.OK and result.exit_code == 0, result
    assert pool.workers_started == 1


def test_killed_plain_worker_leaves_no_files_on_the_host(make_pool):
    pool = make_pool("plain")
    where = PythonJob(source="import os\ndef f(): return os.path.dirname(os.getcwd())", entry="f", calls=((),))
    root = _ok(pool.run(where))[0]
    assert os.path.basename(root).startswith("rlpt-sandbox-") and os.path.isdir(root)
    done = []
    hang = PythonJob(source="import time\nopen('data', 'w').write('x' * 100000)\ntime.sleep(30)", timeout_s=20.0)
    thread = threading.Thread(target=lambda: done.append(pool.run(hang)))
    thread.start()
    time.sleep(0.5)
    os.kill(pool._all[0].worker.proc.pid, 9)  # the worker dies mid-job (OOM, a bug, an operator)
    thread.join()
    assert done[0].status is Status.SANDBOX_ERROR
    assert not os.path.exists(root)  # neither its directory nor the job's work dir is left
