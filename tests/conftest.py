"""Forces 8 host devices before JAX is imported, so multi-device paths run on CPU,
and a fixed XLA:CPU thread count."""

import os

# XLA:CPU aborts the process when a collective's participants have not all
# arrived a minute after the first (a warning at 20 s, the end 40 s later).
# The suite's 8 devices share 2 cores with the sandbox's jobs and, in the
# asynchronous tests, with a second program on other threads, so a slow
# arrival is load, not a hang: give it 10 more minutes.
# The suite compiles far more than it runs (thousands of programs at tiny
# shapes): XLA:CPU's backend at optimisation level 0 compiles them in about half
# the time (benchmarks/device.py --quick: 81 s -> 42 s). Its bits differ from the
# default level's, so every process the suite starts compiles at the same level
# (tests/multiproc.py's cpu_env and the workers read RLPT_TEST_COMPILE_FLAGS);
# RLPT_TEST_COMPILE_FLAGS= (empty) runs the suite at XLA's default level.
os.environ.setdefault("RLPT_TEST_COMPILE_FLAGS", "--xla_backend_optimization_level=0")
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " +
                           os.environ["RLPT_TEST_COMPILE_FLAGS"] +
                           " --xla_force_host_platform_device_count=8"
                           " --xla_cpu_collective_call_terminate_timeout_seconds=600").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# XLA:CPU splits reductions by its thread count: fixed, the suite computes the
# same bits on hosts with any number of cores (as launch/ does, --cpu_threads).
os.environ.setdefault("PJRT_NPROC", "2")
# One persistent compilation cache for the session (and the processes its tests
# start): the suite builds many trainers of the same shapes, and each would
# otherwise compile the same programs again. Fresh per session, so nothing
# from an earlier checkout is loaded.
# Under pytest-xdist (make test runs two workers) each worker keeps a cache of
# its own inside the session's: JAX writes an entry in place, with no lock
# unless its cache evicts, so two processes compiling the same program could
# read each other's half-written file.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
  import atexit
  import shutil
  import tempfile
  _cache = tempfile.mkdtemp(prefix="rlpt-test-xla-")
  atexit.register(shutil.rmtree, _cache, ignore_errors=True)
  os.environ["JAX_COMPILATION_CACHE_DIR"] = _cache
  os.environ["RLPT_TEST_XLA_CACHE"] = _cache
  os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0.1"
  os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"
if _WORKER and os.environ.get("RLPT_TEST_XLA_CACHE") == os.environ["JAX_COMPILATION_CACHE_DIR"]:
  os.environ["JAX_COMPILATION_CACHE_DIR"] = os.path.join(os.environ["RLPT_TEST_XLA_CACHE"], _WORKER)
# One cache of pre-trained bases for the session (tests/bases.py): tests that do
# not test pre-training share it, so each tiny base trains once, not per test.
if "RLPT_TEST_BASES" not in os.environ:
  import atexit
  import shutil
  import tempfile
  _bases = tempfile.mkdtemp(prefix="rlpt-test-bases-")
  atexit.register(shutil.rmtree, _bases, ignore_errors=True)
  os.environ["RLPT_TEST_BASES"] = _bases


import faulthandler

import pytest
from _pytest.faulthandler import fault_handler_stderr_fd_key


@pytest.fixture(autouse=True, scope="module")
def _crashes_keep_their_traceback(request):
  """After each module, pytest's fault handler is installed again (every
  thread's stack, to the terminal). Ray's driver replaces the fatal-signal
  handlers with its own, which writes to the captured stderr, and leaves the
  defaults when it shuts down, so a later crash would end the suite with no
  word of where."""
  yield
  fd = request.config.stash.get(fault_handler_stderr_fd_key, None)
  if fd is not None:
    faulthandler.disable()
    faulthandler.enable(file=fd, all_threads=True)


@pytest.fixture(autouse=True, scope="module")
def _module_domains_do_not_leak():
  """Domains a test module registers (dataset files in its tmp_path, domains
  that raise or hang on purpose) are unregistered when the module ends, so a
  later module that lists every registered domain sees only the built-in ones."""
  from environments import bounded, registry
  before = {s.id for s in registry.list_domains()}
  yield
  for domain_id in {s.id for s in registry.list_domains()} - before:
    if not bounded.is_bounded_id(domain_id):  # cuts stay: cached selections name them
      registry.unregister(domain_id)


@pytest.fixture(autouse=True, scope="module")
def _module_programs_do_not_accumulate():
  """Compiled programs a module made are dropped when it ends. Each XLA:CPU
  executable holds memory mappings of its own; kept for the whole suite (about
  two thousand tests, many trainers and engines) they approach the kernel's
  per-process map limit (vm.max_map_count, 65530 here), past which a
  compilation aborts the process. Later modules reload what they need from the
  session's persistent compilation cache."""
  yield
  import gc

  import jax
  gc.collect()
  jax.clear_caches()


@pytest.fixture(scope="session")
def tbench_images():
  """Builds the images of the shipped terminal tasks (cached by content) once per
  session. Without a container engine the tests that need it are skipped, unless
  RLPT_REQUIRE_CONTAINERS=1 (CI sets it: there a missing engine is a failure)."""
  from environments import registry, terminal_tasks
  from environments.containers import engine
  why = engine.available()
  if why is not None:
    if os.environ.get("RLPT_REQUIRE_CONTAINERS") == "1":
      pytest.fail(f"containers are required here (RLPT_REQUIRE_CONTAINERS=1): {why}")
    pytest.skip(f"no container engine: {why}")
  for domain_id in terminal_tasks.BUILTIN_IDS:
    built = terminal_tasks.build_task(registry.domain(domain_id).folder)
    assert built.error is None, (domain_id, built.error, built.log_path)
  return terminal_tasks.BUILTIN_IDS


# The suite's longest files (seconds on the 2-core machine, from --durations),
# handed to the two workers first: `--dist loadfile` gives out files in
# collection order, and one of these collected last would run on one worker
# while the other has nothing left.
_LONGEST_FIRST = (
  "test_notebooks.py",                          # 178 s
  "experiments/test_all_domains.py",            # 145 s
  "benchmarks/test_device_benchmark.py",        # 110 s
  "launch/test_multiprocess.py",                # 56 s
  "launch/test_accelerator.py",                 # 54 s
  "launch/test_cpu_devices.py",                 # 49 s
  "engine/test_engine_multiprocess.py",         # 40 s
)


def pytest_collection_modifyitems(config, items):
  def rank(item):
    path = item.nodeid.split("::", 1)[0].removeprefix("tests/")
    return _LONGEST_FIRST.index(path) if path in _LONGEST_FIRST else len(_LONGEST_FIRST)
  items.sort(key=rank)  # stable: each file's tests, and the other files, keep their order
