"""Network policy of terminal episodes (environments.containers.egress): none, the package
registries through our proxy, or the host's network.

The proxy is tested first on its own (listening in this process's own network
namespace, relaying to servers of the test's own making), then in containers:
a container on `registries` installs a PyPI package and reaches nothing else, a
loopback server of the test's own included.
"""

import os
import socket
import socketserver
import threading
import time
import http.server
import urllib.request

import gymnasium
import pytest

from environments import registry, terminal_tasks
from environments.containers import egress
from environments.task_folders import TaskFolderError, load_task_folder


def _write(root, files):
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    return str(root)


# ------------------------------------------------------------------ policies and task.toml


def test_policy_names_are_checked_with_the_value_and_the_choices():
    assert egress.check_policy("registries", "x") == "registries"
    with pytest.raises(ValueError, match=r"x: network policy must be one of none, registries, host, got 'internet'"):
        egress.check_policy("internet", "x")


def test_registry_hosts_hold_the_public_registries_and_the_extra_ones(monkeypatch):
    monkeypatch.setenv("RLPT_REGISTRY_HOSTS", "Mirror.Example.org, pypi.internal")
    monkeypatch.setenv("PIP_INDEX_URL", "https://pip.corp.example/simple file:///opt/wheels")
    egress.registry_hosts.cache_clear()
    try:
        hosts = egress.registry_hosts()
    finally:
        egress.registry_hosts.cache_clear()
    assert {"pypi.org", "files.pythonhosted.org", "registry.npmjs.org", "deb.debian.org"} <= hosts
    assert {"mirror.example.org", "pypi.internal", "pip.corp.example"} <= hosts
    assert not any("/" in h or h == "" for h in hosts)  # file:// indexes are local: no host


@pytest.mark.parametrize("toml, agent, tests", [
    ("", "none", "none"),
    ('[environment]\nnetwork = "registries"\n', "registries", "none"),
    ("[environment]\nallow_internet = false\n", "none", "none"),
    ("[environment]\nallow_internet = true\n", "none", "none"),  # Harbor's default: the run still chooses
    ('[verifier]\nnetwork = "registries"\n', "none", "registries"),
])
def test_task_toml_chooses_the_agents_and_the_tests_network(tmp_path, toml, agent, tests):
    folder = load_task_folder(_write(tmp_path / "t", {"instruction.md": "x\n", "tests/test.sh": "true\n", "task.toml": toml}))
    assert terminal_tasks._policies(folder, "none", None) == (agent, tests)


def test_the_run_chooses_where_the_task_does_not_and_a_task_cannot_take_the_host(tmp_path):
    plain = load_task_folder(_write(tmp_path / "plain", {"instruction.md": "x\n", "tests/test.sh": "true\n"}))
    assert terminal_tasks._policies(plain, "registries", None) == ("registries", "none")
    assert terminal_tasks._policies(plain, "host", None) == ("host", "host")
    offline = load_task_folder(_write(tmp_path / "off", {"instruction.md": "x\n", "tests/test.sh": "true\n",
                                                         "task.toml": "[environment]\nallow_internet = false\n"}))
    assert terminal_tasks._policies(offline, "registries", None) == ("none", "none")
    # A test script that installs its runner gets the registries by default.
    runner = load_task_folder(_write(tmp_path / "runner", {"instruction.md": "x\n", "tests/test.sh": "pip install pytest\npytest\n"}))
    assert terminal_tasks._policies(runner, "none", None) == ("none", "registries")
    assert terminal_tasks._policies(runner, "none", "none") == ("none", "none")
    greedy = load_task_folder(_write(tmp_path / "greedy", {"instruction.md": "x\n", "tests/test.sh": "true\n",
                                                           "task.toml": '[environment]\nnetwork = "host"\n'}))
    with pytest.raises(TaskFolderError, match=r"task greedy: \[environment\] network = 'host' needs a run on the host's network"):
        terminal_tasks._policies(greedy, "registries", None)
    assert terminal_tasks._policies(greedy, "host", None) == ("host", "host")
    with pytest.raises(TaskFolderError, match=r"tests on the host's network need the agent's on it too"):
        terminal_tasks._policies(plain, "none", "host")
    with pytest.raises(ValueError, match=r"the run's network: network policy must be one of"):
        terminal_tasks._policies(plain, "open", None)


@pytest.mark.parametrize("toml, error", [
    ('[environment]\nnetwork = "wifi"\n', r"\[environment\]: network policy must be one of none, registries, host, got 'wifi'"),
    ('[environment]\nallow_internet = "no"\n', r"allow_internet must be true or false, got 'no'"),
    ('[environment]\nallow_internet = false\nnetwork = "registries"\n', r"allow_internet = false contradicts network = 'registries'"),
    ('[verifier]\nnetwork = 1\n', r"\[verifier\]: network policy must be one of"),
])
def test_a_wrong_network_in_task_toml_is_refused_naming_it(tmp_path, toml, error):
    with pytest.raises(TaskFolderError, match=error):
        load_task_folder(_write(tmp_path / "t", {"instruction.md": "x\n", "tests/test.sh": "true\n", "task.toml": toml}))


# ------------------------------------------------------------------ the proxy alone


def test_the_container_itself_and_its_services_are_reached_without_the_proxy():
    # urllib's own no_proxy matching (what pip's requests does too) is the reference.
    no = egress.proxy_env(local=("db",))["no_proxy"]
    for host in ("localhost", "127.0.0.1", "0.0.0.0", "db"):  # 0.0.0.0: a server bound there, asked for by that name
        assert urllib.request.proxy_bypass_environment(host, proxies={"no": no}), host
    assert not urllib.request.proxy_bypass_environment("pypi.org", proxies={"no": no})


def test_requests_are_parsed_for_connect_and_absolute_urls():
    assert egress._parse_request(b"CONNECT PyPI.org:443 HTTP/1.1\r\nHost: pypi.org:443") == ("CONNECT", "pypi.org", 443, b"")
    method, host, port, head = egress._parse_request(
        b"GET http://deb.debian.org/debian/dists/trixie/InRelease?x=1 HTTP/1.1\r\nHost: deb.debian.org\r\n"
        b"Proxy-Connection: keep-alive\r\nConnection: keep-alive\r\nUser-Agent: apt")
    assert (method, host, port) == ("GET", "deb.debian.org", 80)
    assert head == (b"GET /debian/dists/trixie/InRelease?x=1 HTTP/1.1\r\nHost: deb.debian.org\r\nUser-Agent: apt\r\n"
                    b"Connection: close\r\n\r\n")
    assert "needs host:port" in egress._parse_request(b"CONNECT pypi.org HTTP/1.1")
    assert "absolute http:// URL" in egress._parse_request(b"GET /simple/ HTTP/1.1")
    assert "malformed request line" in egress._parse_request(b"HELLO")


class _Echo(socketserver.BaseRequestHandler):
    def handle(self):
        while data := self.request.recv(65536):
            self.request.sendall(data.upper())


class _Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = f"{self.path} {self.headers.get('Connection')}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def servers():
    echo = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    page = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    for s in (echo, page):
        threading.Thread(target=s.serve_forever, daemon=True).start()
    yield echo.server_address[1], page.server_address[1]
    for s in (echo, page):
        s.shutdown()
        s.server_close()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ask(port, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


@pytest.mark.skipif(os.geteuid() != 0, reason="entering a network namespace needs root (the container engine runs rootful)")
def test_the_proxy_relays_allowed_hosts_and_refuses_the_rest_in_one_line(servers, monkeypatch):
    echo_port, page_port = servers
    monkeypatch.setattr(egress, "PORTS", (echo_port, page_port))
    port = _free_port()
    gate = egress.Gate(os.getpid(), "registries", hosts=frozenset({"localhost"}), port=port, label="test")
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:  # a tunnel, bytes both ways
            s.sendall(f"CONNECT localhost:{echo_port} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
            assert s.recv(4096) == b"HTTP/1.1 200 Connection established\r\n\r\n"
            s.sendall(b"hello")
            assert s.recv(4096) == b"HELLO"
        page = _ask(port, f"GET http://localhost:{page_port}/simple/six/?a=1 HTTP/1.1\r\nHost: localhost\r\n"
                          "Proxy-Connection: keep-alive\r\n\r\n".encode())
        assert page.startswith(b"HTTP/1.0 200") and page.endswith(b"/simple/six/?a=1 close"), page  # origin form, one request
        refused = _ask(port, f"CONNECT 127.0.0.1:{echo_port} HTTP/1.1\r\n\r\n".encode())  # not by its name: not a registry
        assert refused.startswith(b"HTTP/1.1 403 Forbidden")
        assert f"127.0.0.1:{echo_port} refused: not a package registry (network policy 'registries' allows localhost)".encode() in refused
        assert b"ports" in _ask(port, b"CONNECT localhost:22 HTTP/1.1\r\n\r\n")
        assert _ask(port, b"GET /relative HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 400")
        gate.policy = "none"
        assert b"network policy is 'none'" in _ask(port, f"CONNECT localhost:{echo_port} HTTP/1.1\r\n\r\n".encode())
        assert [(a.host, a.port, a.allowed) for a in gate.asked] == [
            ("localhost", echo_port, True), ("localhost", page_port, True), ("127.0.0.1", echo_port, False),
            ("localhost", 22, False), ("localhost", echo_port, False)]
        assert gate.take_refused() == [f"127.0.0.1:{echo_port}", "localhost:22", f"localhost:{echo_port}"]
        assert gate.take_refused() == []
    finally:
        gate.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="entering a network namespace needs root (the container engine runs rootful)")
def test_a_container_cannot_hold_more_than_its_share_of_connections(servers, monkeypatch):
    echo_port, _ = servers
    monkeypatch.setattr(egress, "PORTS", (echo_port,))
    monkeypatch.setattr(egress, "MAX_CONNECTIONS", 2)
    port = _free_port()
    gate = egress.Gate(os.getpid(), "registries", hosts=frozenset({"localhost"}), port=port)
    held = []
    try:
        for _ in range(2):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(f"CONNECT localhost:{echo_port} HTTP/1.1\r\n\r\n".encode())
            assert s.recv(4096).startswith(b"HTTP/1.1 200")
            held.append(s)
        assert b"over 2 connections at once" in _ask(port, f"CONNECT localhost:{echo_port} HTTP/1.1\r\n\r\n".encode())
        held.pop().close()
        deadline = time.monotonic() + 10
        while b"200 Connection established" not in (reply := _ask_first(port, echo_port)) and time.monotonic() < deadline:
            time.sleep(0.05)  # the freed slot comes back once its relay has seen the close
        assert b"200 Connection established" in reply
    finally:
        for s in held:
            s.close()
        gate.close()


def _ask_first(port, echo_port) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(f"CONNECT localhost:{echo_port} HTTP/1.1\r\n\r\n".encode())
        return s.recv(4096)


def test_a_gate_cannot_open_in_a_process_that_is_not_there():
    with pytest.raises(OSError, match=r"cannot open the egress proxy in process 999999999's network"):
        egress.Gate(999999999, "registries", hosts=frozenset())


# ------------------------------------------------------------------ in containers


class _Counter(socketserver.BaseRequestHandler):
    hits = 0

    def handle(self):
        type(self).hits += 1
        self.request.sendall(b"HTTP/1.0 200 OK\r\n\r\nsecret\n")


def _pypi_reachable() -> bool:
    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
        return True
    except OSError:
        return False


@pytest.mark.usefixtures("tbench_images")
def test_a_container_on_registries_installs_from_pypi_and_reaches_nothing_else(tmp_path):
    if not _pypi_reachable():
        pytest.skip("this machine does not reach pypi.org")
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Counter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    path = _write(tmp_path / "net-install", {"instruction.md": "Install six.\n",
                                             "tests/test.sh": 'python3 -c "import six" && test -f "$APP_DIR/done.txt"\n'})
    try:
        spec_id = terminal_tasks.register_task_folder(path, validate=False, network="registries", verifier_network="none")
        domain = registry.domain(spec_id)
        assert (domain.network, domain.verifier_network) == ("registries", "none") and "network-registries" in domain.spec.tags
        env = gymnasium.make(spec_id)
        env.reset(seed=0)
        obs, _, _, _, step = env.step("pip install --quiet --root-user-action=ignore six==1.16.0 && python3 -c 'import six; print(six.__version__)'")
        assert step["verdict"] == "TOOL" and "[exit 0]" in obs and "1.16.0" in obs, obs
        # What drops the proxy variables still finds the proxy: apt by its own configuration, sudo keeps them.
        obs, *_ = env.step("env -u http_proxy -u HTTP_PROXY -u https_proxy -u HTTPS_PROXY apt-get update -qq && echo apt-ok; "
                           "grep -c 'env_keep += \"http_proxy https_proxy' /etc/sudoers.d/rlpt-proxy")
        assert "apt-ok" in obs and obs.rstrip().endswith("1"), obs
        # The test's own server: not on the container's loopback, and the proxy will not go there.
        obs, *_ = env.step(f"curl -sS --noproxy '*' -m 5 http://127.0.0.1:{port}/; echo; curl -sS -m 5 --noproxy '' -x \"$http_proxy\" "
                           f"http://127.0.0.1:{port}/ -o /dev/null -w '%{{http_code}}'")
        assert "Could not connect to server" in obs, obs
        assert f"[exit 0] [network: 127.0.0.1:{port} refused: not a package registry" in obs and obs.rstrip().endswith("403"), obs
        obs, *_ = env.step("curl -sS -m 5 https://example.com/ >/dev/null; getent hosts pypi.org || echo no-dns")
        assert "] [network: example.com:443 refused: not a package registry" in obs and "no-dns" in obs, obs
        episode = env.unwrapped.task.hidden
        assert {"pypi.org:443", "files.pythonhosted.org:443"} <= {f"{a.host}:{a.port}" for a in episode.gate.asked if a.allowed}
        assert episode.refused == [f"127.0.0.1:{port}", "example.com:443"]
        _, reward, terminated, _, step = env.step("touch done.txt\nDONE")
        assert (reward, terminated, step["verdict"]) == (1.0, True, "PASS"), step
        assert _Counter.hits == 0
        assert episode.gate._closed.is_set() and episode.gate not in terminal_tasks._GATES.values()  # gone with the episode
    finally:
        server.shutdown()
        server.server_close()
    # The same task on "none": pip finds no network, and no proxy is there.
    none_id = terminal_tasks.register_task_folder(path, version=1, validate=False)
    env = gymnasium.make(none_id)
    env.reset(seed=0)
    obs, *_ = env.step("pip install --quiet six==1.16.0 2>&1 | tail -1; echo \"proxy=${https_proxy:-unset}\"; "
                       "ls /etc/apt/apt.conf.d/99rlpt-proxy /etc/sudoers.d/rlpt-proxy 2>/dev/null | wc -l")
    assert "[network:" not in obs and "proxy=unset" in obs and env.unwrapped.task.hidden.gate is None, obs
    assert obs.rstrip().endswith("0"), obs  # neither proxy file
    env.close()


@pytest.mark.usefixtures("tbench_images")
def test_the_tests_network_is_chosen_apart_from_the_agents(tmp_path):
    if not _pypi_reachable():
        pytest.skip("this machine does not reach pypi.org")
    # `pip download` is not baked into the image at build: the tests need the registries.
    path = _write(tmp_path / "net-tests", {"instruction.md": "Make done.txt.\n", "tests/test.sh":
                  'python3 -m pip download --quiet --no-deps -d /tmp/dl six==1.16.0 && test -f "$APP_DIR/done.txt"\n'})
    offline = registry.domain(terminal_tasks.register_task_folder(path, validate=False, verifier_network="none"))
    online = registry.domain(terminal_tasks.register_task_folder(path, version=1, validate=False, verifier_network="registries"))
    results = {}
    for domain in (offline, online):
        task = domain.sample(None)
        domain.grade(task, "curl -sS -m 5 https://pypi.org/simple/ >/dev/null; echo rc=$?")
        results[domain.verifier_network] = (domain.grade(task, "touch done.txt\nDONE"), task.hidden)
    grade, episode = results["registries"]
    assert grade.verdict.value == "PASS", grade
    # The agent (policy none) had no proxy; the tests' was opened for them and asked only for PyPI.
    assert {a.host for a in episode.gate.asked} == {"pypi.org", "files.pythonhosted.org"} and episode.refused == []
    grade, episode = results["none"]
    assert grade.verdict.value == "VERIFIER_ERROR" and "network" in grade.feedback, grade
    assert episode.gate is None


COMPOSE = """services:
  main:
    environment:
      - API_URL=http://api:8000
  api:
    build:
      context: ./api
    healthcheck:
      test: ["CMD", "python3", "-c", "import socket; socket.create_connection(('localhost', 8000), timeout=2)"]
      interval: 1s
      retries: 10
"""


@pytest.mark.usefixtures("tbench_images")
def test_a_pod_on_registries_reaches_its_services_by_name_and_the_registries_through_the_proxy(tmp_path):
    if not _pypi_reachable():
        pytest.skip("this machine does not reach pypi.org")
    # The service saves the proxy it was given, so the test can see services are on the pod's policy too.
    path = _write(tmp_path / "net-pod", {
        "instruction.md": "Fetch the greeting.\n", "tests/test.sh": "grep -qx hi /app/got.txt\n",
        "environment/docker-compose.yaml": COMPOSE,
        "environment/api/Dockerfile": ("FROM python:3.13-slim\nWORKDIR /srv\n"
                                       'CMD ["sh", "-c", "echo hi > greeting.txt && echo ${https_proxy:-none} > proxy.txt '
                                       '&& exec python3 -m http.server 8000"]\n')})
    env = gymnasium.make(terminal_tasks.register_task_folder(path, validate=False, network="registries"))
    env.reset(seed=0)
    fetch = "import os, urllib.request as u; print(u.urlopen(os.environ['API_URL'] + '/{0}').read().decode().strip())"
    obs, *_ = env.step(f'python3 -c "{fetch.format("greeting.txt")}" > got.txt; python3 -c "{fetch.format("proxy.txt")}"; '
                       "pip download --quiet --no-deps -d /tmp/dl six==1.16.0 && ls /tmp/dl")
    assert "[exit 0]" in obs and f"http://127.0.0.1:{egress.PROXY_PORT}" in obs and "six-1.16.0" in obs, obs
    episode = env.unwrapped.task.hidden
    pod = episode.pod
    assert pod and episode.gate is terminal_tasks._GATES[pod] and episode.refused == []
    _, reward, _, _, step = env.step("DONE")
    assert (reward, step["verdict"]) == (1.0, "PASS"), step
    assert pod not in terminal_tasks._GATES and episode.gate._closed.is_set()
