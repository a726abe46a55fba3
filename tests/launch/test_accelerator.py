"""launch/accelerator.py (which JAX `make setup` installs) and launch/locks/.

The detection runs on fake machines (a directory tree standing for /dev and
/sys, a stand-in for nvidia-smi); the locks are resolved by pip's own
resolver against the package index (nothing is installed), so a pin that
conflicts with another in any lock fails here, not on a user's GPU node.
"""

import concurrent.futures
import os
import subprocess
import sys

import pytest

from launch import accelerator
from launch.accelerator import ChoiceError, cuda_for_driver, detect, find_python

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NO_GPU = lambda: None


def _pci(root, name, vendor, cls):
  d = root / "sys" / "bus" / "pci" / "devices" / name
  d.mkdir(parents=True)
  (d / "vendor").write_text(vendor + "\n")
  (d / "class").write_text(cls + "\n")


def test_nothing_found_is_the_cpu(tmp_path):
  assert detect({}, str(tmp_path), NO_GPU)[0] == "cpu"


def test_tpu_from_its_devices_and_from_its_environment(tmp_path):
  (tmp_path / "dev").mkdir()
  (tmp_path / "dev" / "accel0").touch()
  choice, why = detect({}, str(tmp_path), NO_GPU)
  assert choice == "tpu" and "accel0" in why
  v5e = tmp_path / "v5e"
  _pci(v5e, "0000:00:05.0", "0x1ae0", "0x120000")   # a TPU chip: processing accelerator
  assert detect({}, str(v5e), NO_GPU)[0] == "tpu"
  assert detect({"TPU_ACCELERATOR_TYPE": "v6e-8"}, str(tmp_path / "none"), NO_GPU) == (
      "tpu", "TPU_ACCELERATOR_TYPE=v6e-8 in the environment")


def test_a_google_network_card_is_not_a_tpu(tmp_path):
  _pci(tmp_path, "0000:00:04.0", "0x1ae0", "0x020000")  # gVNIC: same vendor, network class
  _pci(tmp_path, "0000:00:06.0", "0x10de", "0x030200")  # an NVIDIA GPU's PCI entry
  assert detect({}, str(tmp_path), NO_GPU)[0] == "cpu"


@pytest.mark.parametrize("driver,choice", [("580.95.05", "cuda13"), ("590.1", "cuda13"),
                                           ("575.57.08", "cuda12"), ("525.60.13", "cuda12")])
def test_the_driver_picks_the_cuda_major(tmp_path, driver, choice):
  assert cuda_for_driver(driver) == choice
  assert detect({}, str(tmp_path), lambda: driver) == (choice, f"nvidia-smi: driver {driver}")


def test_an_old_driver_or_a_garbled_version_is_refused_by_name():
  with pytest.raises(ChoiceError, match=r"470\.82\.01 is older than 525"):
    cuda_for_driver("470.82.01")
  with pytest.raises(ChoiceError, match="'N/A'"):
    cuda_for_driver("N/A")


def test_the_override_wins_and_a_wrong_one_names_the_choices(tmp_path):
  (tmp_path / "dev").mkdir()
  (tmp_path / "dev" / "accel0").touch()
  for choice in accelerator.CHOICES:
    assert detect({"ACCEL": choice}, str(tmp_path), lambda: "580.1")[0] == choice
  with pytest.raises(ChoiceError, match=r"ACCEL='gpu'; expected one of cpu, cuda12, cuda13, tpu"):
    detect({"ACCEL": "gpu"}, str(tmp_path), NO_GPU)


def test_every_choice_has_a_lock_built_on_the_project_pins():
  for choice in accelerator.CHOICES:
    with open(accelerator.lock_path(choice)) as f:
      lines = [ln.strip() for ln in f if ln.strip() and not ln.startswith("#")]
    assert lines[0] == "-r ../../requirements.txt", choice
    assert all("==" in ln for ln in lines[1:]), f"{choice}: every added package is pinned"
  with open(os.path.join(ROOT, "requirements.txt")) as f:
    pins = dict(ln.split("#")[0].strip().split("==") for ln in f
                if "==" in ln.split("#")[0])
  assert pins["jax"] == pins["jaxlib"]
  with open(accelerator.lock_path("cuda13")) as f:
    assert f"jax-cuda13-plugin[with-cuda]=={pins['jax']}" in f.read()
  with open(accelerator.lock_path("cuda12")) as f:
    assert f"jax-cuda12-plugin[with-cuda]=={pins['jax']}" in f.read()


def test_an_interpreter_too_old_for_jax_is_refused_with_what_was_found(tmp_path):
  old = tmp_path / "python3.11"
  old.write_text("#!/bin/sh\necho 3 11\n")
  old.chmod(0o755)
  with pytest.raises(ChoiceError, match=r"Python >= 3\.12; found .*python3\.11 \(3\.11\)"):
    find_python({"PYTHON": str(old)})
  assert find_python({"PYTHON": sys.executable}) == sys.executable


def test_make_setup_installs_the_chosen_lock():
  for choice in accelerator.CHOICES:
    out = subprocess.run(["make", "-n", "-B", f"ACCEL={choice}", "PYTHON=python3",
                          ".venv/.installed-" + choice], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert f"pip install --quiet -r launch/locks/{choice}.txt" in out.stdout


@pytest.mark.slow
def test_every_accelerator_lock_resolves_with_pip():
  """pip's resolver over each accelerator's lock for this interpreter (a dry
  run: it reads the index, installs nothing); their wheels are manylinux
  x86_64, so any Linux x86_64 host resolves them without the hardware. The
  CPU lock is the one `make setup` installed for this suite."""

  def resolve(choice):
    return choice, subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
         "--disable-pip-version-check", "-r", accelerator.lock_path(choice)],
        cwd="/", capture_output=True, text=True, timeout=600)

  with concurrent.futures.ThreadPoolExecutor(3) as pool:
    for choice, out in pool.map(resolve, ("cuda12", "cuda13", "tpu")):
      errors = [ln for ln in out.stderr.splitlines() if not ln.startswith("WARNING")]
      assert out.returncode == 0, f"{choice}: " + "\n".join(errors[-5:])
