"""What an episode's container may reach: nothing, the package registries, or the host's network.

Policies (`POLICIES`):

    none        the container's network namespace has only its own loopback
                (`podman run --network=none`): no name resolves, no address answers.
    registries  the same loopback-only namespace, plus an HTTP proxy of ours
                listening inside it on 127.0.0.1:PROXY_PORT (`http_proxy`,
                `https_proxy` and their upper-case forms point at it, so pip,
                apt, npm, uv, curl, git and Python's urllib use it). The proxy
                opens connections from the host, and only to the package
                registries this machine is configured for (`registry_hosts`),
                on ports 80 and 443; anything else gets a 403 naming the host
                and the policy. A program that ignores the proxy variables
                reaches nothing: the namespace has no route out.
    host        the host's network (`--network=host`), as an agent on the host.

How the proxy gets into the container without giving it a network: the
episode's process enters the container's network namespace in a short-lived
thread (`setns`, root only: the engine runs rootful), binds the listening
socket there and leaves; a socket stays in the namespace it was made in, and
every upstream connection is made from the host's. Each container gets its own
listener (`Gate`), so its log is its own, and its policy can change between
the agent's turns and the tests (the verifier's network is chosen apart).

Every host asked for is logged (`Gate.asked`); the hosts refused since the
last look come back from `Gate.take_refused()`, which the terminal domain
puts, one line, in the turn's reply.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import json
import logging
import os
import re
import selectors
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse

log = logging.getLogger(__name__)

POLICIES = ("none", "registries", "host")
PROXY_PORT = 28793  # below the ephemeral range, and not a port services are known for (3128 is a task's squid)
PORTS = (80, 443)  # what a registry is reached on (HTTP for the Debian/Ubuntu archives, HTTPS for the rest)
# The public registries the runner's own tools use unless configured otherwise, and the
# archives the base-image stand-ins install from (environments.containers.bases).
DEFAULT_HOSTS = ("pypi.org", "files.pythonhosted.org", "registry.npmjs.org", "deb.debian.org", "security.debian.org",
                 "archive.ubuntu.com", "security.ubuntu.com")
_HEAD_LIMIT = 64 * 1024
MAX_CONNECTIONS = 64  # open at once through one container's proxy
_IDLE_S = 300.0  # a relayed connection with no bytes either way for this long is closed


def check_policy(value: object, where: str) -> str:
    """`value` if it names a policy, else a ValueError naming it, `where` it came from and the choices."""
    if value not in POLICIES:
        raise ValueError(f"{where}: network policy must be one of {', '.join(POLICIES)}, got {value!r}")
    return str(value)


def proxy_env(port: int = PROXY_PORT, local: tuple[str, ...] = ()) -> dict[str, str]:
    """The variables that point a container's tools at its proxy; `local` names (sidecar
    services on the shared loopback) and the container itself (loopback, and 0.0.0.0,
    which a client on Linux reaches as this host: a server bound there is asked for
    as http://0.0.0.0:PORT) are reached directly."""
    url = f"http://127.0.0.1:{port}"
    no_proxy = ",".join(("localhost", "127.0.0.1", "::1", "0.0.0.0", *local))
    return {"http_proxy": url, "https_proxy": url, "HTTP_PROXY": url, "HTTPS_PROXY": url,
            "no_proxy": no_proxy, "NO_PROXY": no_proxy, "npm_config_proxy": url, "npm_config_https_proxy": url}


def proxy_config_script(port: int = PROXY_PORT) -> str:
    """Shell lines (run as root in the container) that point what does not read the
    proxy variables at the proxy: apt's own configuration, and sudo, whose env_reset
    drops them (`sudo apt-get install`, `sudo pip install` in a solution). Each is
    written only where its tool's configuration folder exists; harmless where the
    policy then lets nothing out."""
    url = f"http://127.0.0.1:{port}"
    keep = " ".join(proxy_env(port))
    apt = f'Acquire::http::Proxy "{url}";\\nAcquire::https::Proxy "{url}";\\n'
    return (f"{{ ! test -d /etc/apt/apt.conf.d || printf '{apt}' > /etc/apt/apt.conf.d/99rlpt-proxy; }}\n"
            f"{{ mkdir -p /etc/sudoers.d && printf 'Defaults env_keep += \"{keep}\"\\n' > /etc/sudoers.d/rlpt-proxy "
            f"&& chmod 0440 /etc/sudoers.d/rlpt-proxy; }}\n")


# ------------------------------------------------------------------ registries


def _host_of(url: str) -> str | None:
    try:
        parts = urllib.parse.urlsplit(url.strip())
    except ValueError:
        return None
    return parts.hostname.lower() if parts.scheme in ("http", "https") and parts.hostname else None


def _pip_urls() -> list[str]:
    urls = [os.environ.get(k, "") for k in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL")]
    pip = shutil.which("pip3") or shutil.which("pip")
    if pip:
        try:
            out = subprocess.run([pip, "config", "list"], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired):
            out = ""
        for line in out.splitlines():
            key, _, value = line.partition("=")
            if key.strip().endswith(("index-url", "index_url")):
                urls += value.strip().strip("'\"").split()
    return [u for text in urls for u in text.split()]


def _apt_urls() -> list[str]:
    urls = []
    for path in glob.glob("/etc/apt/sources.list") + sorted(glob.glob("/etc/apt/sources.list.d/*.list")):
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                for line in f:
                    words = line.split("#", 1)[0].split()
                    if words and words[0] in ("deb", "deb-src"):
                        urls += [w for w in words[1:] if "://" in w][:1]
        except OSError:
            continue
    for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                for line in f:
                    if line.startswith("URIs:"):
                        urls += line.split(":", 1)[1].split()
        except OSError:
            continue
    return urls


def _npm_urls() -> list[str]:
    urls = [os.environ.get("NPM_CONFIG_REGISTRY", ""), os.environ.get("npm_config_registry", "")]
    npmrc = os.path.expanduser("~/.npmrc")
    for path in (npmrc, "/etc/npmrc", "/usr/etc/npmrc"):
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                urls += [line.split("=", 1)[1] for line in f if re.match(r"\s*(@[\w-]+:)?registry\s*=", line)]
        except OSError:
            continue
    return urls


def _uv_urls() -> list[str]:
    urls = [os.environ.get(k, "") for k in ("UV_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_DEFAULT_INDEX", "UV_INDEX")]
    for path in ("/etc/uv/uv.toml", os.path.expanduser("~/.config/uv/uv.toml")):
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                urls += re.findall(r"""url\s*=\s*["']([^"']+)["']""", f.read())
        except OSError:
            continue
    return [u for text in urls for u in text.replace(",", " ").split()]


@functools.cache
def registry_hosts() -> frozenset[str]:
    """The hosts `registries` lets a container reach: DEFAULT_HOSTS and every http(s) index
    this machine's pip, apt, npm and uv are configured for (file:// ones are local).
    RLPT_REGISTRY_HOSTS (comma-separated) adds more, e.g. a private mirror."""
    hosts = set(DEFAULT_HOSTS)
    for url in _pip_urls() + _apt_urls() + _npm_urls() + _uv_urls():
        host = _host_of(url)
        if host:
            hosts.add(host)
    hosts |= {h.strip().lower() for h in os.environ.get("RLPT_REGISTRY_HOSTS", "").split(",") if h.strip()}
    return frozenset(hosts)


# ------------------------------------------------------------------ the proxy


@dataclasses.dataclass(frozen=True)
class Asked:
    """One request through a container's proxy."""

    host: str
    port: int
    allowed: bool
    at: float  # time.time()


def listen_in(pid: int, port: int = PROXY_PORT) -> socket.socket:
    """A listening TCP socket on 127.0.0.1:`port` in the network namespace of process `pid`.
    The calling thread never changes namespace: a helper thread enters it, binds, and ends."""
    box: dict = {}

    def enter() -> None:
        try:
            fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
            try:
                os.setns(fd, os.CLONE_NEWNET)
            finally:
                os.close(fd)
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))
            sock.listen(64)
            box["sock"] = sock
        except OSError as e:
            box["error"] = e

    thread = threading.Thread(target=enter, name=f"rlpt-egress-enter-{pid}", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        e = box["error"]
        hint = " (entering a container's network needs root: the engine runs rootful)" if isinstance(e, PermissionError) else ""
        raise OSError(f"cannot open the egress proxy in process {pid}'s network: {e}{hint}")
    return box["sock"]


class Gate:
    """A container's proxy: a listener inside its network namespace, a policy that may
    change (`policy = "registries"` for the tests), and the log of hosts asked for."""

    def __init__(self, pid: int, policy: str, hosts: frozenset[str] | None = None, port: int = PROXY_PORT,
                 label: str = "") -> None:
        self.policy = check_policy(policy, "egress gate")
        if self.policy == "host":
            raise ValueError("a container on the host's network needs no proxy")
        self.hosts = registry_hosts() if hosts is None else frozenset(h.lower() for h in hosts)
        self.label = label or f"pid {pid}"
        self.asked: list[Asked] = []
        self._refused: list[str] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._sock = listen_in(pid, port)
        self._thread = threading.Thread(target=self._serve, name=f"rlpt-egress-{self.label}", daemon=True)
        self._thread.start()

    # -- what the runner reads

    def take_refused(self) -> list[str]:
        """`host:port` of every request refused since the last call (each once, in order)."""
        with self._lock:
            out, self._refused = list(dict.fromkeys(self._refused)), []
        return out

    def allows(self, host: str, port: int) -> bool:
        return self.policy == "registries" and port in PORTS and host.lower().rstrip(".") in self.hosts

    def refusal(self, host: str, port: int, brief: bool = False) -> str:
        """Why `host:port` is refused, one line (`brief`: without the list of registries)."""
        if self.policy == "none":
            return f"{host}:{port} refused: this container's network policy is 'none' (no network)"
        if host.lower().rstrip(".") not in self.hosts:
            allows = "" if brief else f" allows {', '.join(sorted(self.hosts))}"
            return f"{host}:{port} refused: not a package registry (network policy 'registries'{allows})"
        return f"{host}:{port} refused: network policy 'registries' allows ports {' and '.join(map(str, PORTS))} only"

    def close(self) -> None:
        self._closed.set()
        try:
            self._sock.close()
        except OSError:
            pass

    # -- serving

    def _serve(self) -> None:
        self._sock.settimeout(1.0)
        while not self._closed.is_set():
            try:
                client, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if not self._slots.acquire(blocking=False):  # a container may not take the trainer's threads
                _refuse_over_cap(client)
                continue
            threading.Thread(target=self._handle, args=(client,), daemon=True).start()

    def _record(self, host: str, port: int, allowed: bool) -> None:
        with self._lock:
            self.asked.append(Asked(host, port, allowed, time.time()))
            if not allowed:
                self._refused.append(f"{host}:{port}")
        log.info("egress %s: %s:%d %s (policy %s)", self.label, host, port, "allowed" if allowed else "refused", self.policy)

    def _handle(self, client: socket.socket) -> None:
        upstream = None
        try:
            client.settimeout(30.0)
            head, rest = _read_head(client)
            if head is None:
                return
            parsed = _parse_request(head)
            if isinstance(parsed, str):
                _reply(client, 400, parsed)
                return
            method, host, port, forwarded = parsed
            allowed = self.allows(host, port)
            self._record(host, port, allowed)
            if not allowed:
                _reply(client, 403, "rlpt egress proxy: " + self.refusal(host, port))
                return
            try:
                upstream = socket.create_connection((host, port), timeout=30.0)
            except OSError as e:
                _reply(client, 502, f"rlpt egress proxy: cannot reach {host}:{port} from the host: {e}")
                return
            if method == "CONNECT":
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                if rest:
                    upstream.sendall(rest)
            else:
                upstream.sendall(forwarded + rest)
            _relay(client, upstream)
        except OSError:
            pass
        finally:
            self._slots.release()
            for s in (client, upstream):
                if s is not None:
                    try:
                        s.close()
                    except OSError:
                        pass


def _read_head(sock: socket.socket) -> tuple[bytes | None, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            return None, b""
        data += chunk
        if len(data) > _HEAD_LIMIT:
            _reply(sock, 431, "rlpt egress proxy: request head over 64 KiB")
            return None, b""
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def _parse_request(head: bytes) -> tuple[str, str, int, bytes] | str:
    """(method, host, port, the head to send upstream) for CONNECT or an absolute-form
    HTTP request, or why the request cannot be proxied."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3:
        return f"rlpt egress proxy: malformed request line {lines[0][:80]!r}"
    method, target, version = parts
    if method == "CONNECT":
        host, _, port = target.rpartition(":")
        host = host.strip("[]")
        if not host or not port.isdigit():
            return f"rlpt egress proxy: CONNECT needs host:port, got {target[:80]!r}"
        return method, host.lower(), int(port), b""
    url = urllib.parse.urlsplit(target)
    if url.scheme != "http" or not url.hostname:
        return f"rlpt egress proxy: a proxied request needs an absolute http:// URL, got {target[:80]!r}"
    path = url.path or "/"
    if url.query:
        path += "?" + url.query
    # Origin-form upstream, one request per connection (the next may be for another host).
    headers = [h for h in lines[1:] if h.split(":", 1)[0].strip().lower() not in
               ("proxy-connection", "connection", "keep-alive", "proxy-authorization")]
    upstream = "\r\n".join([f"{method} {path} {version}", *headers, "Connection: close"]) + "\r\n\r\n"
    return method, url.hostname.lower(), url.port or 80, upstream.encode("latin-1")


def _reply(sock: socket.socket, status: int, message: str) -> None:
    reason = {400: "Bad Request", 403: "Forbidden", 431: "Request Header Fields Too Large", 502: "Bad Gateway",
              503: "Service Unavailable"}[status]
    body = (message + "\n").encode()
    try:
        sock.sendall(f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
                     f"X-Rlpt-Egress: {json.dumps(message)[:200]}\r\nConnection: close\r\n\r\n".encode("latin-1", "replace") + body)
    except OSError:
        pass


def _relay(a: socket.socket, b: socket.socket) -> None:
    """Copies bytes both ways until both sides have closed (or nothing moves for _IDLE_S).
    epoll, not select(): a trainer holds far more than 1,024 descriptors."""
    peer = {a: b, b: a}
    with selectors.DefaultSelector() as sel:
        for s in (a, b):
            s.setblocking(True)
            s.settimeout(_IDLE_S)
            sel.register(s, selectors.EVENT_READ)
        live = 2
        while live:
            events = sel.select(_IDLE_S)
            if not events:
                return
            for key, _ in events:
                src = key.fileobj
                try:
                    data = src.recv(65536)
                except OSError:
                    return
                if not data:
                    sel.unregister(src)
                    live -= 1
                    try:
                        peer[src].shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                    continue
                try:
                    peer[src].sendall(data)
                except OSError:
                    return


def _refuse_over_cap(client: socket.socket) -> None:
    """The one-line 503 for a connection over the cap, delivered: the request is read
    first and the socket half-closed before it is closed, since closing a socket with
    unread bytes resets the connection and the client could lose the reply. Bounded
    to a fraction of a second, on the accept loop (no thread for it)."""
    try:
        client.settimeout(0.2)
        try:
            client.recv(_HEAD_LIMIT)
        except OSError:
            pass
        _reply(client, 503, f"rlpt egress proxy: over {MAX_CONNECTIONS} connections at once from this container")
        client.shutdown(socket.SHUT_WR)
        try:
            client.recv(_HEAD_LIMIT)
        except OSError:
            pass
    except OSError:
        pass
    finally:
        client.close()
