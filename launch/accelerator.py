"""Which JAX this machine needs: ``cpu``, ``cuda12``, ``cuda13`` or ``tpu``.

    python3 launch/accelerator.py            # prints the choice (make setup reads it)
    python3 launch/accelerator.py --explain  # and why, on standard error
    python3 launch/accelerator.py --python   # the interpreter the choice installs into

``make setup`` installs ``launch/locks/<choice>.txt`` (the project's pins in
requirements.txt plus that accelerator's JAX plugin and runtime libraries).
``ACCEL=cpu|cuda12|cuda13|tpu`` overrides the detection, which is, in order:

* TPU: a TPU VM's accelerator devices (``/dev/accel*``, or PCI devices of
  Google's vendor id in the processing-accelerator class), or ``TPU_ACCELERATOR_TYPE`` /
  ``TPU_NAME`` in the environment (set on TPU VMs and GKE TPU nodes).
* NVIDIA GPU: ``nvidia-smi`` answers; its driver version picks the CUDA
  major: >= 580 runs CUDA 13 wheels, >= 525 CUDA 12 (JAX's wheels need
  those drivers), older is refused with the version named.
* Otherwise the CPU.

Standard library only: it runs before any environment exists.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys

CHOICES = ("cpu", "cuda12", "cuda13", "tpu")
# Oldest NVIDIA driver each CUDA major's JAX wheels run on (JAX's install notes).
CUDA_DRIVERS = (("cuda13", 580), ("cuda12", 525))
# JAX 0.11 and newer are built for CPython 3.12 and newer only.
MIN_PYTHON = (3, 12)
GOOGLE_PCI_VENDOR = "0x1ae0"
HERE = os.path.dirname(os.path.abspath(__file__))


class ChoiceError(ValueError):
  """A choice that cannot be made (bad override, driver too old)."""


def lock_path(choice: str) -> str:
  return os.path.join(HERE, "locks", f"{choice}.txt")


def _tpu_devices(root: str = "/") -> list[str]:
  """TPU chips the kernel exposes: /dev/accel* (v2-v4), or PCI devices of
  Google's vendor id in the processing-accelerator class (v5e, v5p, v6e; the
  class tells them from Google's virtual NICs, which share the vendor id)."""
  found = sorted(glob.glob(os.path.join(root, "dev", "accel*")))
  for dev in sorted(glob.glob(os.path.join(root, "sys", "bus", "pci", "devices", "*"))):
    try:
      with open(os.path.join(dev, "vendor")) as f, open(os.path.join(dev, "class")) as g:
        if f.read().strip() == GOOGLE_PCI_VENDOR and g.read().strip().startswith("0x12"):
          found.append(dev)
    except OSError:
      continue
  return found


def _nvidia_driver(run=subprocess.run) -> str | None:
  """The driver version nvidia-smi reports for the first GPU, or None without one."""
  if shutil.which("nvidia-smi") is None:
    return None
  try:
    out = run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
              capture_output=True, text=True, timeout=20)
  except (OSError, subprocess.TimeoutExpired):
    return None
  lines = out.stdout.strip().splitlines() if out.returncode == 0 else []
  return lines[0].strip() if lines else None


def cuda_for_driver(version: str) -> str:
  """The CUDA major whose JAX wheels run on NVIDIA driver ``version``."""
  m = re.match(r"(\d+)", version)
  if not m:
    raise ChoiceError(f"nvidia-smi reported driver version {version!r}; expected a number "
                      "such as 580.95.05.")
  major = int(m.group(1))
  for choice, least in CUDA_DRIVERS:
    if major >= least:
      return choice
  raise ChoiceError(f"NVIDIA driver {version} is older than {CUDA_DRIVERS[-1][1]}, the oldest "
                    "JAX's CUDA 12 wheels run on: update the driver, or set ACCEL=cpu.")


def detect(env=os.environ, root: str = "/", driver=_nvidia_driver) -> tuple[str, str]:
  """(choice, the reason) for this machine; ``env``'s ACCEL overrides."""
  override = env.get("ACCEL", "").strip()
  if override:
    if override not in CHOICES:
      raise ChoiceError(f"ACCEL={override!r}; expected one of {', '.join(CHOICES)}.")
    return override, f"ACCEL={override} in the environment"
  tpus = _tpu_devices(root)
  if tpus:
    return "tpu", f"TPU devices {', '.join(tpus[:4])}"
  for name in ("TPU_ACCELERATOR_TYPE", "TPU_NAME"):
    if env.get(name):
      return "tpu", f"{name}={env[name]} in the environment"
  version = driver()
  if version:
    return cuda_for_driver(version), f"nvidia-smi: driver {version}"
  return "cpu", "no TPU devices, no nvidia-smi"


def _version(python: str) -> tuple[int, int] | None:
  try:
    out = subprocess.run([python, "-c", "import sys; print(*sys.version_info[:2])"],
                         capture_output=True, text=True, timeout=30)
  except (OSError, subprocess.TimeoutExpired):
    return None
  parts = out.stdout.split()
  return (int(parts[0]), int(parts[1])) if out.returncode == 0 and len(parts) == 2 else None


def find_python(env=os.environ) -> str:
  """An interpreter JAX's current wheels support: $PYTHON if set, else the
  first of python3.12, python3, python3.13 on PATH that runs and is new
  enough, else one a pyenv installed (3.12 first: the version the locks are
  tested with). A pyenv shim naming a version that is not selected fails to
  run, so each candidate is run, not only looked up."""
  if env.get("PYTHON"):
    candidates = [env["PYTHON"]]
  else:
    candidates = [p for p in (shutil.which(n) for n in ("python3.12", "python3", "python3.13"))
                  if p]
    pyenv = env.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    for pattern in ("3.12*", "3.1[3-9]*"):
      candidates += sorted(glob.glob(os.path.join(pyenv, "versions", pattern, "bin", "python3")),
                           reverse=True)
  seen = []
  for python in candidates:
    version = _version(python)
    seen.append(f"{python} ({'.'.join(map(str, version)) if version else 'does not run'})")
    if version and version >= MIN_PYTHON:
      return python
  raise ChoiceError(f"JAX's current releases need Python >= {'.'.join(map(str, MIN_PYTHON))}; "
                    f"found {', '.join(seen) or 'no python3'}. Install one (pyenv, uv python "
                    "install 3.12, or your distribution's python3.12) or set PYTHON=/path.")


def main(argv: list[str]) -> int:
  try:
    if "--python" in argv:
      print(find_python())
      return 0
    choice, why = detect()
  except ChoiceError as e:
    print(f"launch/accelerator.py: {e}", file=sys.stderr)
    return 2
  if "--explain" in argv:
    print(f"accelerator: {choice} ({why}); installs {os.path.relpath(lock_path(choice))}",
          file=sys.stderr)
  print(choice)
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
