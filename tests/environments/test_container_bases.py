"""Base-image stand-ins (environments.containers.bases) and the marks a build carries.

The task folders here are of our own making: `FROM ubuntu:24.04` with an apt pin
no archive has and a package Debian and Ubuntu renamed, and `FROM python:3.13-slim`
upgrading pip over the stand-in's pip. The tests that build skip without a
container engine, as the terminal task tests do.
"""

import os
import subprocess

import pytest

from environments.containers import bases, engine, images


def _write(root, files):
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    return str(root)


@pytest.fixture(scope="module")
def podman():
    why = engine.available()
    if why is not None:
        if os.environ.get("RLPT_REQUIRE_CONTAINERS") == "1":
            pytest.fail(f"containers are required here (RLPT_REQUIRE_CONTAINERS=1): {why}")
        pytest.skip(f"no container engine: {why}")
    return engine.Engine()


class _FakeEngine:
    pull = "never"

    def __init__(self):
        self.tagged = {}

    def image_exists(self, tag):
        return False

    def tag(self, source, *tags):
        self.tagged.update({t: source for t in tags})


def _fake_build(built):
    def build(recipe, eng, progress=None):
        built.append(recipe)
        return f"localhost/rlpt-base:{recipe.suite}" + "".join(f"+{v}" for v in recipe.built)
    return build


def test_ubuntu_names_have_ubuntu_recipes_with_debian_as_fallback():
    noble = bases.recipe_for("ubuntu:24.04")
    assert (noble.distro, noble.suite, noble.fallback.suite) == ("ubuntu", "noble", "trixie")
    assert bases.recipe_for("ubuntu:noble") == noble == bases.recipe_for("ubuntu") == bases.recipe_for(
        "ghcr.io/laude-institute/t-bench/ubuntu-24-04:20250624")
    assert bases.recipe_for("ubuntu:22.04").suite == bases.recipe_for("ubuntu:jammy").suite == "jammy"
    assert bases.recipe_for("ubuntu:25.04").distro == "debian"  # not an LTS we build: Debian 13
    # A new recipe key: stand-ins tagged ubuntu:* by the Debian-only recipe are rebuilt.
    assert noble.key() != noble.fallback.key() and "apt" in noble.packages and "ubuntu-keyring" in noble.packages
    assert bases.recipe_for("python:3.9").pip == bases.PIP_VERSION_PY39
    assert bases.recipe_for("python:3.13-slim").pip == bases.PIP_VERSION
    assert bases.recipe_for("debian:12").pip is None


def test_an_unreachable_ubuntu_archive_falls_back_to_debian_with_one_line(monkeypatch):
    monkeypatch.setattr(bases, "_ubuntu_unusable", lambda suite: "http://archive.ubuntu.com/ubuntu does not answer (timed out)")
    monkeypatch.setattr(bases, "_build", _fake_build([]))
    lines, notes = [], []
    fake = _FakeEngine()
    out = bases.ensure(["ubuntu:24.04"], fake, progress=lines.append, notes=notes)
    assert out == {"docker.io/library/ubuntu:24.04": "docker.io/library/ubuntu:24.04"}
    assert fake.tagged == {"docker.io/library/ubuntu:24.04": "localhost/rlpt-base:trixie"}
    assert notes == lines == ["docker.io/library/ubuntu:24.04: Debian trixie stands in for Ubuntu noble: "
                              "http://archive.ubuntu.com/ubuntu does not answer (timed out)"]
    assert any("Debian trixie (http://archive.ubuntu.com/ubuntu does not answer" in s for _, s in bases.table())


def test_a_python_the_tests_ask_uv_for_and_the_archive_lacks_is_compiled_in(monkeypatch):
    monkeypatch.setattr(bases, "_ubuntu_unusable", lambda suite: None)
    built = []
    monkeypatch.setattr(bases, "_build", _fake_build(built))
    test_sh = "curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh\nuvx \\\n  -p 3.13 \\\n  -w pytest==8.4.1 pytest /tests\n"
    assert images.tests_pythons(test_sh) == ("3.13",)
    assert images.tests_pythons("uv run --python=3.12 --with pytest pytest") == ("3.12",)
    fake, lines, notes = _FakeEngine(), [], []
    bases.ensure(["ubuntu:24.04"], fake, progress=lines.append, notes=notes, pythons=images.tests_pythons(test_sh))
    assert fake.tagged == {"docker.io/library/ubuntu:24.04": "localhost/rlpt-base:noble+3.13"} and notes == []
    assert (built[-1].distro, built[-1].built, built[-1].describe()) == ("ubuntu", ("3.13",), "Ubuntu noble with CPython 3.13 compiled")
    # The release's own Python, or none asked for: nothing compiled.
    for pythons in [("3.12",), ()]:
        fake = _FakeEngine()
        bases.ensure(["ubuntu:24.04"], fake, progress=lambda s: None, pythons=pythons)
        assert fake.tagged == {"docker.io/library/ubuntu:24.04": "localhost/rlpt-base:noble"}
    # A Python no source is known for: nothing here has it, the recipe as it is.
    assert bases.with_pythons(bases.recipe_for("python:3.13-slim"), ("3.8",)) == bases.recipe_for("python:3.13-slim")
    # A python:3.11 task whose tests ask uv for 3.13: bookworm's python3 3.11 with 3.13 beside it.
    fake = _FakeEngine()
    bases.ensure(["python:3.11-slim", "debian:12"], fake, progress=lambda s: None, pythons=("3.13",))
    assert fake.tagged == {"docker.io/library/python:3.11-slim": "localhost/rlpt-base:bookworm+3.13",
                           "docker.io/library/debian:12": "localhost/rlpt-base:bookworm+3.13"}
    py311 = bases.resolve("python:3.11-slim", ("3.13",))
    assert (py311.python, py311.built, "python3" in py311.packages) == ("3.11", ("3.13",), True)


def test_a_compile_that_fails_falls_back_with_one_line(monkeypatch):
    monkeypatch.setattr(bases, "_ubuntu_unusable", lambda suite: None)
    built = []

    def build(recipe, eng, progress=None):
        if recipe.built:
            raise engine.EngineError("compiling CPython 3.13.15 on noble failed: rlpt-cpython: compile failed at make")
        return _fake_build(built)(recipe, eng)
    monkeypatch.setattr(bases, "_build", build)
    fake, notes = _FakeEngine(), []
    bases.ensure(["ubuntu:24.04"], fake, progress=lambda s: None, notes=notes, pythons=("3.13",))
    assert fake.tagged == {"docker.io/library/ubuntu:24.04": "localhost/rlpt-base:trixie"}
    assert notes == ["docker.io/library/ubuntu:24.04: Debian trixie stands in for Ubuntu noble with CPython 3.13 compiled: "
                     "compiling CPython 3.13.15 on noble failed: rlpt-cpython: compile failed at make"]


def test_python_images_are_their_release_with_that_cpython_as_the_public_images():
    # The release the tag names; where none, the one whose python3 is 3.X, else trixie.
    cases = {"python:3.13-slim-bookworm": ("bookworm", "3.13", ("3.13",), "trixie"),
             "python:3.10-slim-bookworm": ("bookworm", "3.10", ("3.10",), "bookworm"),
             "python:3.12-slim": ("trixie", "3.12", ("3.12",), "trixie"),
             "python:3.10": ("trixie", "3.10", ("3.10",), "bookworm"),
             "python:3.11-slim": ("bookworm", "3.11", (), "trixie"),
             "python:3.13-slim-trixie": ("trixie", "3.13", (), None),
             "python:3.9-bullseye": ("bullseye", "3.9", (), "trixie")}
    for name, (suite, python, built, fallback) in cases.items():
        r = bases.recipe_for(name)
        assert (r.suite, r.python, r.built, r.fallback.suite if r.fallback else None) == (suite, python, built, fallback), name
        assert r.python_links and r.pip and ("python3" in r.packages) == (not built), name
    assert bases.recipe_for("python:3.15") is None
    assert bases.recipe_for("python:3.13-slim-bookworm").describe() == "Debian bookworm (python3 is 3.13)"
    assert bases.recipe_for("python:3.13-slim-bookworm").key() != bases.recipe_for("python:3.13-slim").key()


def test_task_image_digest_follows_the_base_the_tests_need(tmp_path, monkeypatch):
    root = _write(tmp_path, {"environment/Dockerfile": "FROM ubuntu:24.04\n",
                             "tests/test.sh": "uvx -p 3.13 -w pytest pytest /tests\n"})
    with_313 = images.digest(root)
    _write(tmp_path, {"tests/test.sh": "uvx -p 3.12 -w pytest pytest /tests\n"})
    noble_own = images.digest(root)
    _write(tmp_path, {"tests/test.sh": "uvx -p 3.13 -w pytest pytest /tests\n"})
    monkeypatch.setattr(bases, "with_pythons", lambda recipe, pythons: recipe)  # as if nothing were compiled
    assert with_313 != noble_own and images.digest(root) not in (with_313, noble_own)


def test_ubuntu_stand_in_relaxes_missing_pins_and_maps_renamed_packages(tmp_path, podman):
    # ncompress is small and installed for real; libgl1-mesa-glx's successors pull in Mesa
    # and LLVM, so that install is simulated (-s): the rewrite is the same.
    docker = ("FROM ubuntu:24.04\n"
              "RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends ncompress=0.0-rlpt-none >/dev/null "
              "&& apt-get install -s -y libgl1-mesa-glx >/dev/null && command -v compress\n")
    path = _write(tmp_path / "apt-relaxed", {"instruction.md": "x\n", "environment/Dockerfile": docker,
                                             "tests/test.sh": "true\n"})
    built = images.build(path, "apt-relaxed", podman, timeout_s=900)
    assert built.error is None, (built.error, built.log_path)
    fell_back = [w for w in built.warnings if "stands in for Ubuntu noble" in w]
    assert [w for w in built.warnings if w not in fell_back] == [
        "apt-get install: ncompress=0.0-rlpt-none is not in this archive (it has 5.0-1): installing ncompress unpinned"
        if not fell_back else
        "apt-get install: ncompress=0.0-rlpt-none is not in this archive (it has 5.0-3): installing ncompress unpinned",
        "apt-get install: libgl1-mesa-glx is not in this archive: installing its successor(s) libgl1 libglx-mesa0"]
    release = subprocess.run(["podman", "run", "--rm", "--network=none", built.tag, "cat", "/etc/os-release"],
                             capture_output=True, text=True).stdout
    assert ("Debian GNU/Linux 13" if fell_back else 'VERSION_ID="24.04"') in release
    # A cached build reports the same marks (kept in the image's label).
    again = images.build(path, "apt-relaxed", podman, timeout_s=900)
    assert again.cached and again.warnings == built.warnings
    podman.remove_image(built.tag)


def test_pip_upgrades_over_the_python_stand_in_which_has_python_h(tmp_path, podman):
    # Debian's python3-pip, -setuptools and -wheel have no RECORD: reinstalling them would fail with
    # uninstall-no-record-file (TB2's pypi-server upgrades setuptools and wheel).
    docker = (f"FROM python:3.13-slim\nRUN test -f \"$(python3 -c 'import sysconfig; print(sysconfig.get_paths()[\"include\"])')/Python.h\" && "
              f"pip --version | grep -q /usr/local/ && "
              f"pip install -q --disable-pip-version-check --force-reinstall --upgrade pip=={bases.PIP_VERSION} && "
              f"pip install -q --disable-pip-version-check --force-reinstall {' '.join(bases.PIP_COMPANIONS)}\n")
    path = _write(tmp_path / "pip-upgrade", {"instruction.md": "x\n", "environment/Dockerfile": docker,
                                             "tests/test.sh": "true\n"})
    built = images.build(path, "pip-upgrade", podman, timeout_s=600)
    assert built.error is None and built.warnings == (), (built.error, built.log_path)
    podman.remove_image(built.tag)


def test_a_full_disk_is_the_machine_s_failure_not_the_task_s():
    out = ("STEP 4/7: RUN sh /opt/rlpt-tools/install.sh\nError: committing container for step {...}: "
           "processing tar file(write /root/.local/bin/uv: no space left on device): exit status 1\n")
    assert images._infrastructure(out).startswith(images.INFRASTRUCTURE) and "disk is full" in images._infrastructure(out)
    assert images._infrastructure("E: Unable to locate package foo\nError: building at STEP \"RUN apt-get\"") is None


def test_a_build_that_could_not_download_says_so_before_what_failed_after():
    out = ("STEP 4/6: COPY setup.sh ./\n--> 9fc9a5eb49e\nSTEP 5/6: RUN bash /app/setup.sh\nCloning into 'dclm'...\n"
           "fatal: unable to access 'https://github.com/example/repo.git/': Could not resolve host: github.com\n"
           "/app/setup.sh: line 4: cd: dclm: No such file or directory\n"
           "fatal: not a git repository (or any of the parent directories): .git\n"
           'Error: building at STEP "RUN bash /app/setup.sh": while running runtime: exit status 1\n')
    assert images._reason(out) == ("fatal: unable to access 'https://github.com/example/repo.git/': Could not resolve "
                                   "host: github.com (at RUN bash /app/setup.sh)")
    hf = ("STEP 7/9: RUN python3 prepare.py\n'[Errno -2] Name or service not known' thrown while requesting HEAD "
          "https://huggingface.co/datasets/x/y/resolve/main/README.md\nRetrying in 1s [Retry 1/5].\n"
          "FileNotFoundError: Couldn't find any data file at /app/x/y.\n"
          'Error: building at STEP "RUN python3 prepare.py": while running runtime: exit status 1\n')
    assert images._reason(hf).startswith("'[Errno -2] Name or service not known' thrown while requesting HEAD https://huggingface.co/")
    # Without one, the last cause the step printed.
    assert images._reason(out.replace("Could not resolve host: github.com", "repository not found").replace(
        "unable to access", "no repository at")).startswith("fatal: not a git repository")


def test_the_day_a_task_s_published_image_was_built_is_read_from_its_tag(tmp_path):
    def folder(name, toml):
        return _write(tmp_path / name, {"task.toml": toml, "environment/Dockerfile": "FROM python:3.13-slim\n",
                                        "tests/test.sh": "true\n"})
    dated = folder("dated", '[environment]\ndocker_image = "alexgshaw/mteb-retrieve:20251031"\n')
    assert images.as_of(dated) == "2025-10-31"
    assert images.as_of(folder("latest", '[environment]\ndocker_image = "example/x:latest"\n')) is None
    assert images.as_of(folder("none", '[metadata]\ndifficulty = "easy"\n')) is None
    assert images.as_of(folder("bad-day", '[environment]\ndocker_image = "example/x:20251340"\n')) is None
    assert images.as_of(folder("broken", "[environment\n")) is None
    assert bases.resolve_as_of("2025-10-31") == {"PIP_UPLOADED_PRIOR_TO": "2025-11-01T00:00:00Z",
                                                 "UV_EXCLUDE_NEWER": "2025-11-01T00:00:00Z",
                                                 "npm_config_before": "2025-11-01T00:00:00Z"}
    # The date is part of what the image is built from.
    assert images.digest(dated) != images.digest(folder("later", '[environment]\ndocker_image = "alexgshaw/mteb-retrieve:20251130"\n'))


def test_tasks_without_a_dated_image_take_the_run_s_day(tmp_path, monkeypatch):
    def folder(name, toml):
        return _write(tmp_path / name, {"task.toml": toml, "environment/Dockerfile": "FROM python:3.13-slim\n",
                                        "tests/test.sh": "true\n"})
    harbor = folder("harbor", '[metadata]\ndifficulty = "easy"\n')
    dated = folder("dated", '[environment]\ndocker_image = "alexgshaw/mteb-retrieve:20251031"\n')
    plain = images.digest(harbor)
    monkeypatch.setenv(images.AS_OF_ENV, "2026-05-30")
    assert images.as_of(harbor) == "2026-05-30" and images.as_of(dated) == "2025-10-31"  # the task's own day first
    assert images.digest(harbor) != plain  # a rebuild, with the day's layer
    for bad in ("2026-5-30", "20260530", "2026-02-30", "yesterday"):
        monkeypatch.setenv(images.AS_OF_ENV, bad)
        with pytest.raises(ValueError, match=f"RLPT_PACKAGES_AS_OF='{bad}': expected a day as YYYY-MM-DD"):
            images.as_of(harbor)
    monkeypatch.setenv(images.AS_OF_ENV, "")
    assert images.as_of(harbor) is None and images.digest(harbor) == plain


def test_a_dated_task_gets_its_base_with_the_as_of_layer(monkeypatch):
    monkeypatch.setattr(bases, "_build", _fake_build([]))
    layered = []
    monkeypatch.setattr(bases, "_as_of_image", lambda source, recipe, day, eng: layered.append((source, day)) or f"{source}-{day}")
    fake = _FakeEngine()
    bases.ensure(["python:3.13-slim"], fake, progress=lambda s: None, as_of="2025-10-31")
    assert fake.tagged == {"docker.io/library/python:3.13-slim": "localhost/rlpt-base:trixie-2025-10-31"}
    assert layered == [("localhost/rlpt-base:trixie", "2025-10-31")]


def test_pip_in_a_dated_stand_in_resolves_as_of_that_day(tmp_path, podman):
    # six 1.14.0 was uploaded on 2020-01-15; 1.13.0 on 2019-11-05.
    docker = "FROM python:3.13-slim\nRUN pip install --dry-run --no-deps --disable-pip-version-check six | grep 'Would install six-1.13.0'\n"
    path = _write(tmp_path / "as-of", {"instruction.md": "x\n", "environment/Dockerfile": docker, "tests/test.sh": "true\n",
                                       "task.toml": '[environment]\ndocker_image = "example/as-of:20200101"\n'})
    built = images.build(path, "as-of", podman, timeout_s=600)
    assert built.error is None, (built.error, built.log_path)
    env = subprocess.run(["podman", "run", "--rm", "--network=none", built.tag, "sh", "-c", "echo $UV_EXCLUDE_NEWER"],
                         capture_output=True, text=True).stdout.strip()
    assert env == "2020-01-02T00:00:00Z"
    podman.remove_image(built.tag)
