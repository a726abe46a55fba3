"""Forces 8 host devices before JAX is imported, so multi-device paths run on CPU,
and a fixed XLA:CPU thread count."""

import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# XLA:CPU splits reductions by its thread count: fixed, the suite computes the
# same bits on hosts with any number of cores (as launch/ does, --cpu_threads).
os.environ.setdefault("PJRT_NPROC", "2")
