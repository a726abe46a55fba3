"""Network policy of terminal episodes (environments.containers.egress): none, the package
registries through our proxy, or the host's network.

The proxy is tested first on its own (listening in this process's own network
namespace, relaying to servers of the test's own making on loopback; its checks
of names, ports, addresses and the form of requests with a listener on this
process's loopback, which needs no root), then in containers:
a container on `registries` installs a PyPI package and reaches nothing else, a
loopback server of the test's own included.
"""

import ipaddress
import logging
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
    assert egress._parse_request(b"CONNECT PyPI.org:443 HTTP/1.1\r\nHost: pypi.org:443") == egress.Request("CONNECT", "pypi.org", 443, b"")
    request = egress._parse_request(
        b"GET http://deb.debian.org/debian/dists/trixie/InRelease?x=1 HTTP/1.1\r\nHost: deb.debian.org\r\n"
        b"Proxy-Connection: keep-alive\r\nConnection: keep-alive\r\nUser-Agent: apt")
    assert (request.method, request.host, request.port, request.body) == ("GET", "deb.debian.org", 80, 0)
    assert request.upstream == (b"GET /debian/dists/trixie/InRelease?x=1 HTTP/1.1\r\nHost: deb.debian.org\r\nUser-Agent: apt\r\n"
                                b"Connection: close\r\n\r\n")
    for head, why in ((b"CONNECT pypi.org HTTP/1.1", "needs host:port"), (b"GET /simple/ HTTP/1.1", "absolute http:// URL"),
                      (b"HELLO", "malformed request line")):
        with pytest.raises(egress.BadRequest, match=why):
            egress._parse_request(head)


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


# ------------------------------------------------------------------ what the proxy checks


@pytest.fixture
def open_gate(monkeypatch):
    """make(hosts) -> (a Gate on `registries` with those registry entries, its port): a listener
    on this process's own loopback (entering a namespace, which needs root, is what the tests
    above and the container tests cover), closed after the test."""
    def listen(pid, port):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        return sock

    monkeypatch.setattr(egress, "listen_in", listen)
    gates = []

    def make(hosts):
        gate = egress.Gate(0, "registries", hosts=hosts, label="test")
        gates.append(gate)
        return gate, gate._sock.getsockname()[1]

    yield make
    for gate in gates:
        gate.close()


class _Upstream(socketserver.BaseRequestHandler):
    """An upstream of the test's own: keeps every byte a connection brings (`server.got`, one
    entry a connection) and answers every request head in it, as a server that ignores
    `Connection: close` would, until the other side is quiet for half a second."""

    def handle(self):
        got, answered = b"", 0
        self.request.settimeout(0.5)
        try:
            while chunk := self.request.recv(65536):
                got += chunk
                while got.count(b"\r\n\r\n") > answered:
                    answered += 1
                    self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        except TimeoutError:
            pass
        self.server.got.append(got)


@pytest.fixture
def upstream():
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Upstream)
    server.got = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def thread_errors(monkeypatch):
    """What reaches threading.excepthook (a handler thread's uncaught exception) during the test."""
    errors = []
    monkeypatch.setattr(threading, "excepthook", errors.append)
    return errors


def _messages(caplog):
    return [r.getMessage() for r in caplog.records if r.name == egress.log.name]


def test_internal_addresses_in_every_spelling_and_not_the_ranges_registries_resolve_to_here():
    for address in ("127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1", "0.0.0.0", "::", "169.254.169.254", "fe80::1",
                    "10.0.0.1", "172.16.0.1", "172.31.255.255", "192.168.1.1", "100.64.0.1", "fd12::1", "fc00::1",
                    "::ffff:10.0.0.1", "64:ff9b::a00:1", "2002:7f00:1::1"):
        assert egress.internal(ipaddress.ip_address(address)), address
    # Documentation and benchmarking ranges (where this machine's resolver puts every registry), and public ones.
    for address in ("203.0.113.80", "192.0.2.1", "198.51.100.7", "198.18.0.1", "2001:db8::1", "::ffff:203.0.113.80",
                    "151.101.0.223", "172.32.0.1", "100.128.0.1", "2a04:4e42::223"):
        assert egress.internal(ipaddress.ip_address(address)) is None, address
    assert ipaddress.ip_address("203.0.113.80").is_private  # why the proxy does not ask is_private


def test_registry_entries_are_normalised_and_an_index_keeps_its_port(monkeypatch):
    assert egress.registry_entry("PyPI.ORG.") == "pypi.org"
    assert egress.registry_entry("http://LocalHost:3141/root/pypi/+simple/") == "localhost:3141"
    assert egress.registry_entry("https://[FD00:0::1]:4873") == "[fd00::1]:4873"
    assert egress.registry_entry(" verdaccio.local:4873 ") == "verdaccio.local:4873"
    for bad in ("mirror:99999", "mirror:\xb3", "[::1:5", "ftp://mirror/", "a b", "mirror:0"):
        with pytest.raises(ValueError, match="registry"):
            egress.registry_entry(bad)
    monkeypatch.setenv("PIP_INDEX_URL", "http://localhost:3141/simple")
    monkeypatch.setenv("RLPT_REGISTRY_HOSTS", "Verdaccio.Local.:4873")
    egress.registry_hosts.cache_clear()
    try:
        assert {"localhost:3141", "verdaccio.local:4873", "pypi.org"} <= egress.registry_hosts()
        monkeypatch.setenv("RLPT_REGISTRY_HOSTS", "mirror:99999")
        egress.registry_hosts.cache_clear()
        with pytest.raises(ValueError, match=r"RLPT_REGISTRY_HOSTS: registry 'mirror:99999': port out of range"):
            egress.registry_hosts()
    finally:
        egress.registry_hosts.cache_clear()


def test_a_registry_name_that_resolves_inward_is_refused_and_logged_by_its_normal_name(open_gate, upstream, monkeypatch,
                                                                                          caplog, thread_errors):
    port = upstream.server_address[1]
    monkeypatch.setattr(egress, "PORTS", (port,))  # the loopback server stands where the registry's port would be
    answers = {"pypi.org": ["127.0.0.1"], "registry.npmjs.org": ["::ffff:127.0.0.1"],
               "deb.debian.org": ["203.0.113.80", "127.0.0.1"],  # one inward answer among others is enough
               "files.pythonhosted.org": ["10.1.2.3"]}
    looked_up = []

    def resolve(host):
        looked_up.append(host)
        return [ipaddress.ip_address(a) for a in answers[host]]

    monkeypatch.setattr(egress, "resolve_host", resolve)
    caplog.set_level(logging.INFO, logger=egress.log.name)
    gate, proxy = open_gate(egress.DEFAULT_HOSTS)
    reply = _ask(proxy, f"CONNECT PyPI.ORG.:{port} HTTP/1.1\r\nHost: PyPI.ORG.:{port}\r\n\r\n".encode())
    assert reply.startswith(b"HTTP/1.1 403 Forbidden"), reply
    assert f"pypi.org:{port} refused: pypi.org resolves to 127.0.0.1, an internal address (loopback)".encode() in reply
    for host in ("registry.npmjs.org", "deb.debian.org", "files.pythonhosted.org"):
        reply = _ask(proxy, f"GET http://{host}:{port}/simple/ HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
        assert reply.startswith(b"HTTP/1.1 403") and b"an internal address" in reply, reply
    assert _ask(proxy, b"CONNECT EXAMPLE.com.:443 HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 403")  # not a registry
    assert upstream.got == []  # nothing reached the loopback server
    assert looked_up == ["pypi.org", "registry.npmjs.org", "deb.debian.org", "files.pythonhosted.org"]
    mapped = str(ipaddress.ip_address("::ffff:127.0.0.1"))
    assert [(a.host, a.port, a.allowed, a.address) for a in gate.asked] == [
        ("pypi.org", port, False, "127.0.0.1"), ("registry.npmjs.org", port, False, mapped),
        ("deb.debian.org", port, False, "127.0.0.1"), ("files.pythonhosted.org", port, False, "10.1.2.3"),
        ("example.com", 443, False, "")]
    assert gate.take_refused() == [f"pypi.org:{port}", f"registry.npmjs.org:{port}", f"deb.debian.org:{port}",
                                   f"files.pythonhosted.org:{port}", "example.com:443"]
    # What the terminal domain puts in the turn's reply, from the host:port it took.
    assert gate.refusal("pypi.org", port, brief=True) == f"pypi.org:{port} refused: pypi.org resolves to 127.0.0.1, an internal address (loopback)"
    messages = _messages(caplog)
    assert f"egress test: pypi.org:{port} refused (127.0.0.1) (policy registries)" in messages, messages
    assert "egress test: example.com:443 refused (policy registries)" in messages
    assert thread_errors == []


def test_an_index_the_run_names_on_loopback_is_reached_on_its_own_port_only(open_gate, servers, upstream, monkeypatch):
    echo_port, page_port = servers
    index = upstream.server_address[1]
    # The run's configuration, through the one code path: a pip index, and RLPT_REGISTRY_HOSTS.
    monkeypatch.setenv("PIP_INDEX_URL", f"http://localhost:{index}/simple")
    monkeypatch.setenv("RLPT_REGISTRY_HOSTS", f"LocalHost.:{echo_port}")
    egress.registry_hosts.cache_clear()
    try:
        gate, proxy = open_gate(None)
    finally:
        egress.registry_hosts.cache_clear()
    assert {f"localhost:{index}", f"localhost:{echo_port}"} <= gate.hosts
    reply = _ask(proxy, f"GET http://localhost:{index}/simple/six/ HTTP/1.1\r\nHost: localhost:{index}\r\n\r\n".encode())
    assert reply.startswith(b"HTTP/1.1 200") and reply.endswith(b"ok"), reply
    assert upstream.got == [f"GET /simple/six/ HTTP/1.1\r\nHost: localhost:{index}\r\nConnection: close\r\n\r\n".encode()]
    with socket.create_connection(("127.0.0.1", proxy), timeout=10) as s:  # RLPT_REGISTRY_HOSTS' entry: a tunnel
        s.sendall(f"CONNECT localhost:{echo_port} HTTP/1.1\r\n\r\n".encode())
        assert s.recv(4096) == b"HTTP/1.1 200 Connection established\r\n\r\n"
        s.sendall(b"hi")
        assert s.recv(4096) == b"HI"
    # The host's other ports: a server of the test's own, and the web ports every service on it would have.
    for request in (f"GET http://localhost:{page_port}/ HTTP/1.1\r\nHost: localhost\r\n\r\n",
                    "CONNECT localhost:443 HTTP/1.1\r\n\r\n", "GET http://localhost/ HTTP/1.1\r\n\r\n"):
        reply = _ask(proxy, request.encode())
        assert reply.startswith(b"HTTP/1.1 403") and b"network policy 'registries' allows localhost on ports" in reply, reply
    assert [(a.host, a.port, a.allowed) for a in gate.asked] == [
        ("localhost", index, True), ("localhost", echo_port, True), ("localhost", page_port, False),
        ("localhost", 443, False), ("localhost", 80, False)]


def test_the_proxy_connects_to_the_address_it_checked_and_looks_up_once(open_gate, upstream, monkeypatch):
    index = upstream.server_address[1]
    lookups = []

    def rebinding(host):  # the first answer is the one checked; a second lookup would get one nobody listens on
        lookups.append(host)
        return [ipaddress.ip_address("127.0.0.1" if len(lookups) == 1 else "192.0.2.1")]

    monkeypatch.setattr(egress, "resolve_host", rebinding)
    gate, proxy = open_gate([f"mirror.test:{index}"])  # .test: no resolver of the machine's knows it
    reply = _ask(proxy, f"GET http://MIRROR.test.:{index}/simple/ HTTP/1.1\r\nHost: Mirror.Test:{index}\r\n\r\n".encode())
    assert reply.startswith(b"HTTP/1.1 200"), reply
    assert lookups == ["mirror.test"]
    assert upstream.got == [f"GET /simple/ HTTP/1.1\r\nHost: mirror.test:{index}\r\nConnection: close\r\n\r\n".encode()]
    assert [(a.host, a.port, a.allowed, a.address) for a in gate.asked] == [("mirror.test", index, True, "127.0.0.1")]


def test_a_host_header_that_names_another_host_is_refused_and_logged(open_gate, upstream, caplog, thread_errors):
    index = upstream.server_address[1]
    caplog.set_level(logging.INFO, logger=egress.log.name)
    gate, proxy = open_gate([f"localhost:{index}"])
    reply = _ask(proxy, f"GET http://localhost:{index}/ HTTP/1.1\r\nHost: internal.example\r\n\r\n".encode())
    assert reply.startswith(b"HTTP/1.1 400 Bad Request"), reply
    assert b"the Host header names internal.example, the URL localhost: they must agree" in reply
    assert upstream.got == [] and gate.asked == []
    assert any("malformed request refused (400): the Host header names internal.example" in m for m in _messages(caplog))
    assert thread_errors == []


@pytest.mark.parametrize("split", [False, True], ids=["at-once", "body-later"])
def test_a_pipelined_second_request_never_reaches_upstream(open_gate, upstream, split):
    index = upstream.server_address[1]
    gate, proxy = open_gate([f"localhost:{index}"])
    head = f"POST http://localhost:{index}/upload HTTP/1.1\r\nHost: localhost:{index}\r\nContent-Length: 5\r\n\r\n".encode()
    after = (b"hello" + f"GET http://localhost:{index}/second HTTP/1.1\r\nHost: localhost:{index}\r\n\r\n".encode()
             + b"GET http://internal.example/ HTTP/1.1\r\nHost: internal.example\r\n\r\n")
    with socket.create_connection(("127.0.0.1", proxy), timeout=10) as s:
        if split:  # the body (and what follows it) comes in a later packet: the relay counts it out
            s.sendall(head)
            time.sleep(0.1)
            s.sendall(after)
        else:
            s.sendall(head + after)
        reply = b""
        while chunk := s.recv(65536):
            reply += chunk
    assert reply == b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"  # one answer, then the connection ends
    assert upstream.got == [f"POST /upload HTTP/1.1\r\nHost: localhost:{index}\r\nContent-Length: 5\r\n"
                            "Connection: close\r\n\r\nhello".encode()]
    assert [(a.host, a.port) for a in gate.asked] == [("localhost", index)]


@pytest.mark.parametrize("request_bytes, why", [
    (b"CONNECT pypi.org:\xb3 HTTP/1.1\r\n\r\n", "malformed request line"),  # a digit, but not an ASCII one
    (b"GET http://pypi.org:99999/ HTTP/1.1\r\nHost: pypi.org\r\n\r\n", "port out of range"),
    (b"CONNECT pypi.org:0 HTTP/1.1\r\n\r\n", "port out of range"),
    (b"GET http://[::1:8080/ HTTP/1.1\r\n\r\n", "not host[:port]"),
    (b"CONNECT pypi.org HTTP/1.1\r\n\r\n", "CONNECT needs host:port"),
    (b"\x16\x03\x01\x02\x01 garbage\r\n\r\n", "malformed request line"),  # a TLS hello, sent plain
    (b"GET http://pypi.org/ HTTP/1.1\r\nX: \x00\r\n\r\n", "a NUL"),
    (b"GET http://pyp\xc4\xb1.org/ HTTP/1.1\r\n\r\n", "malformed request line"),
    (b"GET http://pypi.org/ HTTP/2\r\n\r\n", "unsupported HTTP version"),
    (b"GET http://pypi.org/ HTTP/1.1\r\nX-Pad: " + b"a" * (70 * 1024) + b"\r\n\r\n", "request head over 64 KiB"),
    (b"GET http://pypi.org/ HTTP/1.1\nHost: pypi.org\n\n", "must end in CRLF"),
    (b"GET http://pypi.org/ HTTP/1.1\r\nX: a\nHost: internal.example\r\n\r\n", "a bare CR or LF"),
    (b"GET http://pypi.org/ HTTP/1.1\r\nHost: pypi.org\r\nHost: pypi.org\r\n\r\n", "2 host headers"),
    (b"GET http://pypi.org/ HTTP/1.1\r\nHost : pypi.org\r\n\r\n", "malformed header line"),
    (b"GET http://pypi.org/ HTTP/1.1\r\nHost: pypi.org\r\n folded: x\r\n\r\n", "malformed header line"),
    (b"GET http://pypi.org/ HTTP/1.1\r\nContent-Length: -1\r\n\r\n", "malformed Content-Length"),
], ids=["non-ascii-digit-port", "port-99999", "port-0", "broken-ipv6", "connect-no-port", "garbage", "nul", "non-ascii-host",
        "http2", "overlong-head", "bare-lf", "bare-lf-inside", "two-hosts", "space-before-colon", "folded", "bad-length"])
def test_a_malformed_request_gets_a_400_and_a_log_line_and_raises_nothing(open_gate, caplog, thread_errors,
                                                                           request_bytes, why):
    caplog.set_level(logging.INFO, logger=egress.log.name)
    gate, proxy = open_gate(egress.DEFAULT_HOSTS)
    reply = _ask(proxy, request_bytes)
    assert reply.startswith(b"HTTP/1.1 400 Bad Request") and why.encode() in reply, reply
    assert [m for m in _messages(caplog) if "malformed request refused (400)" in m and why in m], _messages(caplog)
    assert gate.asked == [] and thread_errors == []


def test_a_head_cut_short_or_too_slow_and_a_chunked_body_are_answered_and_logged(open_gate, caplog, thread_errors,
                                                                                   monkeypatch):
    monkeypatch.setattr(egress, "_HEAD_TIMEOUT_S", 0.3)
    caplog.set_level(logging.INFO, logger=egress.log.name)
    gate, proxy = open_gate(egress.DEFAULT_HOSTS)
    reply = _ask(proxy, b"POST http://pypi.org/ HTTP/1.1\r\nHost: pypi.org\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 411 Length Required"), reply
    assert _ask(proxy, b"GET http://pypi.org/ HTTP/1.1\r\n").startswith(b"HTTP/1.1 408 Request Timeout")
    with socket.create_connection(("127.0.0.1", proxy), timeout=10) as s:
        s.sendall(b"GET http://pypi")
        s.shutdown(socket.SHUT_WR)
        assert s.recv(4096).startswith(b"HTTP/1.1 400")
    logged = [m for m in _messages(caplog) if "malformed request refused" in m]
    assert len(logged) == 3 and "(411)" in logged[0] and "(408)" in logged[1] and "closed before" in logged[2], logged
    assert gate.asked == [] and thread_errors == []


def test_a_fault_of_the_proxys_own_is_a_500_and_a_log_record_not_a_threads_traceback(open_gate, monkeypatch, caplog,
                                                                                       thread_errors):
    def broken(host):
        raise RuntimeError("resolver bug")

    monkeypatch.setattr(egress, "resolve_host", broken)
    gate, proxy = open_gate(egress.DEFAULT_HOSTS)
    assert _ask(proxy, b"CONNECT pypi.org:443 HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 500")
    assert any(r.exc_info and "resolver bug" in str(r.exc_info[1]) for r in caplog.records if r.name == egress.log.name)
    assert thread_errors == []


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
