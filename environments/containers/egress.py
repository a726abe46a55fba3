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
                after the checks below; anything else gets a 403 naming the
                host and the policy. A program that ignores the proxy variables
                reaches nothing: the namespace has no route out.
    host        the host's network (`--network=host`), as an agent on the host.

What the proxy checks. A connection carries one request: a CONNECT, after
which the connection is a tunnel to the address checked (TLS end to end), or
one absolute-form `http://` request, sent on in origin form with
`Connection: close` and followed by exactly its Content-Length of body; bytes
the client sends after it (a pipelined second request) are read and dropped,
never sent upstream. For that request, in order:

1. Its form. A request line of three parts and HTTP/1.0 or 1.1; a host that is
   an ASCII name (letters, digits, `-`, `_`, dots) or a bracketed IPv6
   address, and a port of ASCII digits in 1..65535; header lines `name: value`
   ending in CRLF, at most one Host and one Content-Length; for an
   absolute-form request, a Host header (where there is one) naming the URL's
   host. Anything else gets a 400 and a log line (a head over 64 KiB too; a
   chunked request body a 411, a head that never ends a 408), never an
   exception in the handler thread.
2. The name. Names are normalised before they are checked and logged (lower
   case, no trailing dot: `PyPI.ORG.` is `pypi.org`). It must be a registry,
   on a port it is listed with: a host listed without one (DEFAULT_HOSTS, an
   index URL without a port) on ports 80 and 443 (`PORTS`), a host listed with
   one (`http://localhost:3141/simple`, `RLPT_REGISTRY_HOSTS=mirror:4873`) on
   that port only.
3. The addresses. The name is resolved once, on the host (`resolve_host`).
   If any of its addresses is internal (`internal`: loopback, unspecified,
   link-local, RFC 1918 private, RFC 6598 shared (carrier-grade NAT, also
   what Tailscale-style overlays use), IPv6 unique-local, or an IPv6 spelling
   of one of these, such as ::ffff:127.0.0.1), the request is refused unless
   the run names the host itself: an index this machine's tools are
   configured for, or RLPT_REGISTRY_HOSTS, but never one of DEFAULT_HOSTS (a
   public registry that resolves inward is someone else's doing).
   Documentation and benchmarking ranges (192.0.2/24, 198.51.100/24,
   203.0.113/24, 198.18/15, 2001:db8::/32) are not internal: a machine whose
   resolver answers for a transparent proxy resolves every registry into one,
   and Python's `ipaddress.is_private`, which counts them private, is not used
   for that reason.
4. The connection goes to the addresses checked, never to the name again (a
   second lookup could answer otherwise: DNS rebinding). A plain HTTP request
   carries `Host:` the URL's host.

How the proxy gets into the container without giving it a network: the
episode's process enters the container's network namespace in a short-lived
thread (`setns`, root only: the engine runs rootful), binds the listening
socket there and leaves; a socket stays in the namespace it was made in, and
every upstream connection is made from the host's. Each container gets its own
listener (`Gate`), so its log is its own, and its policy can change between
the agent's turns and the tests (the verifier's network is chosen apart).

Every host asked for is logged (`Gate.asked`, and a line on this module's
logger); the hosts refused since the last look come back from
`Gate.take_refused()`, which the terminal domain puts, one line, in the turn's
reply. A malformed request has no host to put there: it is in the log only.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import ipaddress
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
from collections.abc import Iterable

log = logging.getLogger(__name__)

POLICIES = ("none", "registries", "host")
PROXY_PORT = 28793  # below the ephemeral range, and not a port services are known for (3128 is a task's squid)
# What a registry listed without a port is reached on (HTTP for the Debian/Ubuntu archives, HTTPS for the rest).
PORTS = (80, 443)
# The public registries the runner's own tools use unless configured otherwise, and the
# archives the base-image stand-ins install from (environments.containers.bases).
DEFAULT_HOSTS = ("pypi.org", "files.pythonhosted.org", "registry.npmjs.org", "deb.debian.org", "security.debian.org",
                 "archive.ubuntu.com", "security.ubuntu.com")
_HEAD_LIMIT = 64 * 1024
_HEAD_TIMEOUT_S = 30.0  # for a request head to arrive (and the client's socket's timeout until the relay takes over)
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


# ------------------------------------------------------------------ names, addresses and registry entries


class BadRequest(Exception):
    """A request the proxy will not read further: answered `status` with the message, and logged."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


_NAME = re.compile(r"(?:[a-z0-9_-]{1,63}\.)*[a-z0-9_-]{1,63}\Z")
_AUTHORITY = re.compile(r"(?:\[(?P<v6>[0-9a-fA-F:.]*)\]|(?P<name>[^:\[\]@]*))(?::(?P<port>[0-9]*))?\Z")  # [0-9]: ASCII only
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+\Z")  # a method or a header name (RFC 9110 token)


def normal_host(host: str) -> str:
    """`host` as the proxy checks and logs it: a name in lower case without its trailing dot,
    an IP address in its canonical form (IPv6 given in brackets, returned without them).
    BadRequest unless it is an ASCII host name or an IP address."""
    if host.startswith("[") and host.endswith("]"):
        try:
            return ipaddress.IPv6Address(host[1:-1]).compressed
        except ValueError:
            raise BadRequest(f"not an IPv6 address: {host[:80]!r}") from None
    name = host.lower()[:-1] if host.endswith(".") else host.lower()
    if not (host.isascii() and len(name) <= 253 and _NAME.match(name)):
        raise BadRequest(f"not a host name: {host[:80]!r}")
    try:
        return str(ipaddress.IPv4Address(name))
    except ValueError:
        return name


def _authority(text: str) -> tuple[str, int | None]:
    """(normalised host, port or None) of `host`, `host:port` or `[v6]:port`; BadRequest
    for anything else, a port of other than ASCII digits or one outside 1..65535 included."""
    m = _AUTHORITY.match(text)
    if not m:
        raise BadRequest(f"not host[:port]: {text[:80]!r}")
    host = normal_host(f"[{m['v6']}]" if m["v6"] is not None else m["name"])
    if not m["port"]:  # absent, or empty ("host:"), which a URL allows: the scheme's port
        return host, None
    if len(m["port"]) > 5 or not 0 < int(m["port"]) < 65536:
        raise BadRequest(f"port out of range (1..65535): {text[:80]!r}")
    return host, int(m["port"])


def _join(host: str, port: int | None = None) -> str:
    """`host` or `host:port`, an IPv6 address in brackets: the spelling of a registry entry."""
    name = f"[{host}]" if ":" in host else host
    return name if port is None else f"{name}:{port}"


def _url_entry(url: str) -> str | None:
    """The registry entry of an http(s) index URL (`host`, or `host:port` where the URL gives
    a port), or None for a URL that has no host (file://) or that does not parse."""
    try:
        parts = urllib.parse.urlsplit(url.strip())
        port = parts.port
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return None
        return _join(normal_host(f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname), port)
    except (ValueError, BadRequest):
        return None


def registry_entry(text: str) -> str:
    """The normalised registry entry of `text`: a host (`Mirror.Example.` is `mirror.example`),
    `host:port`, `[v6]:port`, or an http(s) URL (its host, and its port if it names one).
    ValueError naming `text` for anything else."""
    text = text.strip()
    if "://" in text:
        entry = _url_entry(text)
        if entry is None:
            raise ValueError(f"registry {text[:80]!r}: not an http(s) URL with a host")
        return entry
    try:
        return _join(*_authority(text))
    except BadRequest as e:
        raise ValueError(f"registry {text[:80]!r}: {e} (a registry is host, host:port or an http(s) URL)") from None


# Addresses a registry name may not resolve to unless the run names the host itself. First
# match wins. Documentation (192.0.2/24, 198.51.100/24, 203.0.113/24, 2001:db8::/32) and
# benchmarking (198.18/15) ranges are absent on purpose: transparent proxies answer in them.
_INTERNAL = tuple((ipaddress.ip_network(net), kind) for net, kind in (
    ("0.0.0.0/8", "unspecified"), ("127.0.0.0/8", "loopback"), ("169.254.0.0/16", "link-local"),
    ("10.0.0.0/8", "private"), ("172.16.0.0/12", "private"), ("192.168.0.0/16", "private"),
    # RFC 6598 shared space: a carrier's or an overlay VPN's inside network; no public registry lives there.
    ("100.64.0.0/10", "shared (carrier-grade NAT)"),
    ("::/128", "unspecified"), ("::1/128", "loopback"), ("::/96", "IPv4-compatible"), ("fe80::/10", "link-local"),
    ("fec0::/10", "site-local"), ("fc00::/7", "unique-local (private)"),
))
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def internal(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """What kind of internal address `ip` is ("loopback", "private", ...), or None for one the
    proxy may connect to for any registry. An IPv6 address that carries an IPv4 one
    (::ffff:a.b.c.d, NAT64 64:ff9b::a.b.c.d, 6to4 2002:AABB:CCDD::) is judged by it."""
    if ip.version == 6:
        inner = ip.ipv4_mapped or ip.sixtofour or (ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF) if ip in _NAT64 else None)
        if inner is not None and (kind := internal(inner)):
            return f"{kind}, in IPv6 form"
    for net, kind in _INTERNAL:
        if net.version == ip.version and ip in net:
            return kind
    return None


def resolve_host(host: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """Every TCP address `host` (normalised) resolves to on the host, in the resolver's order,
    each once; OSError when it does not resolve. The proxy calls this once a request and
    connects only to what it returned (tests replace it to map names where they like)."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except UnicodeError as e:  # a label the IDNA codec will not take: no such host
        raise OSError(f"cannot resolve {host!r}: {e}") from None
    found = [ipaddress.ip_address(sockaddr[0]) for family, _, _, _, sockaddr in infos
             if family in (socket.AF_INET, socket.AF_INET6)]
    if not found:
        raise OSError(f"{host!r} has no IPv4 or IPv6 address")
    return list(dict.fromkeys(found))


# ------------------------------------------------------------------ registries


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
    """The registry entries (`registry_entry`) `registries` lets a container reach: DEFAULT_HOSTS
    and every http(s) index this machine's pip, apt, npm and uv are configured for (file://
    ones are local), with the index's port where its URL names one (a devpi mirror at
    http://localhost:3141/simple gives `localhost:3141`). RLPT_REGISTRY_HOSTS (comma-separated
    hosts, host:port or URLs) adds more, e.g. a private mirror; a wrong entry there is a
    ValueError naming it. Every host here but DEFAULT_HOSTS may resolve to an internal address."""
    hosts = set(DEFAULT_HOSTS)
    for url in _pip_urls() + _apt_urls() + _npm_urls() + _uv_urls():
        entry = _url_entry(url)
        if entry:
            hosts.add(entry)
    for text in os.environ.get("RLPT_REGISTRY_HOSTS", "").split(","):
        if text.strip():
            try:
                hosts.add(registry_entry(text))
            except ValueError as e:
                raise ValueError(f"RLPT_REGISTRY_HOSTS: {e}") from None
    return frozenset(hosts)


# ------------------------------------------------------------------ the proxy


@dataclasses.dataclass(frozen=True)
class Asked:
    """One request through a container's proxy (host normalised, `normal_host`)."""

    host: str
    port: int
    allowed: bool
    at: float  # time.time()
    address: str = ""  # the address connected to, or the internal one refused ("" where the name or port decided)


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


def _ports_text(ports: Iterable[int]) -> str:
    ports = sorted(ports)
    if len(ports) == 1:
        return f"port {ports[0]}"
    return f"ports {', '.join(map(str, ports[:-1]))} and {ports[-1]}"


class Gate:
    """A container's proxy: a listener inside its network namespace, a policy that may
    change (`policy = "registries"` for the tests), and the log of hosts asked for.

    `hosts`: the registry entries it allows (`registry_entry` spellings: `host`,
    `host:port`, URLs), `registry_hosts()` when None. A host listed without a port is
    reached on PORTS, one listed with ports on those only; every host but
    DEFAULT_HOSTS may resolve to an internal address (the run named it)."""

    def __init__(self, pid: int, policy: str, hosts: Iterable[str] | None = None, port: int = PROXY_PORT,
                 label: str = "") -> None:
        self.policy = check_policy(policy, "egress gate")
        if self.policy == "host":
            raise ValueError("a container on the host's network needs no proxy")
        self.hosts = registry_hosts() if hosts is None else frozenset(map(registry_entry, hosts))
        self._listed: dict[str, set[int | None]] = {}  # host -> its ports, None for PORTS
        for entry in self.hosts:
            host, entry_port = _authority(entry)
            self._listed.setdefault(host, set()).add(entry_port)
        self.label = label or f"pid {pid}"
        self.asked: list[Asked] = []
        self._refused: list[str] = []
        self._inward: dict[str, str] = {}  # host:port -> the internal address it was refused for
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

    def ports(self, host: str) -> frozenset[int]:
        """The ports registry `host` (normalised) is reached on; empty for a host that is not one."""
        listed = self._listed.get(host, set())
        return frozenset({p for p in listed if p is not None} | (set(PORTS) if None in listed else set()))

    def allows(self, host: str, port: int) -> bool:
        """Whether the policy and the registry list let `host:port` through, by name and port
        (the addresses it resolves to are checked when a request comes)."""
        return self.policy == "registries" and port in self.ports(_loose(host))

    def may_be_internal(self, host: str) -> bool:
        """Whether registry `host` (normalised) may resolve to an internal address: the run
        named it itself (a configured index, RLPT_REGISTRY_HOSTS, `hosts`), and it is not
        one of the public DEFAULT_HOSTS."""
        return host in self._listed and host not in DEFAULT_HOSTS

    def refusal(self, host: str, port: int, brief: bool = False) -> str:
        """Why `host:port` is refused, one line (`brief`: without the list of registries
        or the way to allow an internal host)."""
        host = _loose(host)
        if self.policy == "none":
            return f"{host}:{port} refused: this container's network policy is 'none' (no network)"
        if host not in self._listed:
            allows = "" if brief else f" allows {', '.join(sorted(self.hosts))}"
            return f"{host}:{port} refused: not a package registry (network policy 'registries'{allows})"
        if port not in self.ports(host):
            return f"{host}:{port} refused: network policy 'registries' allows {host} on {_ports_text(self.ports(host))} only"
        with self._lock:
            address = self._inward.get(f"{host}:{port}")
        if address is None:
            return f"{host}:{port} refused"
        kind = internal(ipaddress.ip_address(address))
        why = f"{host}:{port} refused: {host} resolves to {address}, an internal address ({kind})"
        return why if brief else why + ("; only a registry the run names itself (an index it is configured for, "
                                        "RLPT_REGISTRY_HOSTS) may resolve to one, and never a public default")

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

    def _record(self, host: str, port: int, allowed: bool, address: str = "") -> None:
        with self._lock:
            self.asked.append(Asked(host, port, allowed, time.time(), address))
            if not allowed:
                self._refused.append(f"{host}:{port}")
        log.info("egress %s: %s:%d %s%s (policy %s)", self.label, host, port, "allowed" if allowed else "refused",
                 f" ({address})" if address else "", self.policy)

    def _bad(self, client: socket.socket, error: BadRequest) -> None:
        log.info("egress %s: malformed request refused (%d): %s (policy %s)", self.label, error.status, error, self.policy)
        _reply(client, error.status, f"rlpt egress proxy: {error}")
        _linger(client)

    def _open(self, client: socket.socket, request: Request) -> socket.socket | None:
        """The upstream connection for `request`, after the name, port and address checks
        (each decision recorded), or None once the client has its 403 or 502."""
        host, port = request.host, request.port
        if not self.allows(host, port):
            self._record(host, port, False)
            _reply(client, 403, "rlpt egress proxy: " + self.refusal(host, port))
            return None
        try:
            addresses = resolve_host(host)
        except OSError as e:
            self._record(host, port, True)
            _reply(client, 502, f"rlpt egress proxy: cannot resolve {host} on the host: {e}")
            return None
        inward = [ip for ip in addresses if internal(ip)]
        if inward and not self.may_be_internal(host):
            with self._lock:
                self._inward[f"{host}:{port}"] = str(inward[0])
            self._record(host, port, False, str(inward[0]))
            _reply(client, 403, "rlpt egress proxy: " + self.refusal(host, port))
            return None
        try:
            upstream = _connect(addresses, port)
        except OSError as e:
            self._record(host, port, True, str(addresses[0]))
            _reply(client, 502, f"rlpt egress proxy: cannot reach {host}:{port} from the host: {e}")
            return None
        self._record(host, port, True, upstream.getpeername()[0])
        return upstream

    def _handle(self, client: socket.socket) -> None:
        upstream = None
        try:
            client.settimeout(_HEAD_TIMEOUT_S)
            try:
                got = _read_head(client)
                if got is None:
                    return
                head, rest = got
                request = _parse_request(head)
            except BadRequest as e:
                self._bad(client, e)
                return
            upstream = self._open(client, request)
            if upstream is None:
                return
            if request.method == "CONNECT":
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                if rest:
                    upstream.sendall(rest)
                _relay(client, upstream)
            else:
                body = rest[:request.body]
                upstream.sendall(request.upstream + body)
                _relay(client, upstream, forward=request.body - len(body))
        except OSError:
            pass
        except Exception:  # a bug of ours: the client gets a reply, the trainer a log record, not a thread's traceback
            log.exception("egress %s: the proxy failed on a request", self.label)
            _reply(client, 500, "rlpt egress proxy: internal error (see the trainer's log)")
        finally:
            self._slots.release()
            for s in (client, upstream):
                if s is not None:
                    try:
                        s.close()
                    except OSError:
                        pass


def _loose(host: str) -> str:
    """`host` normalised as far as it goes, for callers that pass what a log holds."""
    try:
        return normal_host(f"[{host}]" if ":" in host and not host.startswith("[") else host)
    except BadRequest:
        return host.lower()


def _connect(addresses: list[ipaddress.IPv4Address | ipaddress.IPv6Address], port: int) -> socket.socket:
    """A TCP connection to the first of `addresses` that answers on `port`: addresses, never
    a name, so nothing is looked up again between the check and the connection."""
    error: OSError = OSError("no address")
    for ip in addresses:
        sock = socket.socket(socket.AF_INET6 if ip.version == 6 else socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.settimeout(30.0)
            sock.connect((str(ip), port))
            return sock
        except OSError as e:
            sock.close()
            error = e
    raise error


def _read_head(sock: socket.socket) -> tuple[bytes, bytes] | None:
    """(the request head without its blank line, the bytes after it), or None for a client
    that closed without sending anything. BadRequest for a head over _HEAD_LIMIT, one whose
    lines end in a bare LF, one cut short, or one that does not end within _HEAD_TIMEOUT_S."""
    data = b""
    while b"\r\n\r\n" not in data:
        if b"\n\n" in data:
            raise BadRequest("request head lines must end in CRLF")
        if len(data) > _HEAD_LIMIT:
            raise BadRequest(f"request head over {_HEAD_LIMIT // 1024} KiB")
        try:
            chunk = sock.recv(4096)
        except TimeoutError:
            raise BadRequest(f"no complete request head within {_HEAD_TIMEOUT_S:g} s", status=408) from None
        if not chunk:
            if data:
                raise BadRequest(f"the connection closed before the request head ended ({len(data)} bytes)")
            return None
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    if len(head) > _HEAD_LIMIT:
        raise BadRequest(f"request head over {_HEAD_LIMIT // 1024} KiB")
    return head, rest


@dataclasses.dataclass(frozen=True)
class Request:
    """One request as the proxy read it, checked for form (not yet for policy)."""

    method: str
    host: str  # normal_host
    port: int
    upstream: bytes  # the head sent upstream (b"" for CONNECT: inside the tunnel is the client's)
    body: int = 0  # bytes of body after the head (Content-Length) that go upstream with it


_HOP_BY_HOP = ("proxy-connection", "connection", "keep-alive", "proxy-authorization", "te", "upgrade")


def _parse_request(head: bytes) -> Request:
    """The request in `head` (CONNECT host:port, or an absolute-form http:// request, whose
    head is rewritten to origin form for upstream: Host the URL's host, hop-by-hop headers
    dropped, `Connection: close`). BadRequest (400, 411 for a chunked body) for anything
    malformed, ambiguous or not proxied."""
    text = head.decode("latin-1")
    lines = text.split("\r\n")
    if "\0" in text or any("\r" in line or "\n" in line for line in lines):
        raise BadRequest("a bare CR or LF, or a NUL, in the request head")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not _TOKEN.match(parts[0]) or not all(33 <= ord(c) < 127 for c in parts[1]):
        raise BadRequest(f"malformed request line {lines[0][:80]!r}")
    method, target, version = parts
    if version not in ("HTTP/1.0", "HTTP/1.1"):
        raise BadRequest(f"unsupported HTTP version {version[:20]!r}")
    fields: list[tuple[str, str, str]] = []  # (line, lower-case name, value)
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not _TOKEN.match(name):  # also a folded line (leading space) and a space before the colon
            raise BadRequest(f"malformed header line {line[:80]!r}")
        fields.append((line, name.lower(), value.strip(" \t")))

    def one(key: str) -> str | None:
        values = [value for _, k, value in fields if k == key]
        if len(values) > 1:
            raise BadRequest(f"{len(values)} {key} headers in one request")
        return values[0] if values else None

    if method == "CONNECT":
        host, port = _authority(target)
        if port is None:
            raise BadRequest(f"CONNECT needs host:port, got {target[:80]!r}")
        return Request(method, host, port, b"")
    scheme, sep, rest = target.partition("://")
    if not sep or scheme.lower() != "http":
        raise BadRequest(f"a proxied request needs an absolute http:// URL, got {target[:80]!r}")
    cut = min((i for i in map(rest.find, "/?#") if i >= 0), default=len(rest))
    host, port = _authority(rest[:cut].rpartition("@")[2])  # userinfo is not the host
    port = 80 if port is None else port
    path = rest[cut:].partition("#")[0]
    path = path if path.startswith("/") else "/" + path
    given = one("host")
    if given is not None:
        try:
            named, _ = _authority(given)
        except BadRequest as e:
            raise BadRequest(f"the Host header is {given[:80]!r}: {e}") from None
        if named != host:  # the port may differ: the Host sent on is the URL's
            raise BadRequest(f"the Host header names {named}, the URL {host}: they must agree")
    if one("transfer-encoding") is not None:
        raise BadRequest("a request body in chunks is not relayed: send it with Content-Length", status=411)
    length = one("content-length")
    if length is not None and not (length.isascii() and length.isdigit() and len(length) <= 15):
        raise BadRequest(f"malformed Content-Length {length[:40]!r}")
    authority = _join(host, None if port == 80 else port)
    headers = [f"{line.partition(':')[0]}: {authority}" if key == "host" else line
               for line, key, _ in fields if key not in _HOP_BY_HOP]
    if given is None:
        headers.insert(0, f"Host: {authority}")
    # Origin form upstream, one request per connection (the next may be for another host).
    upstream = "\r\n".join([f"{method} {path} {version}", *headers, "Connection: close"]) + "\r\n\r\n"
    return Request(method, host, port, upstream.encode("latin-1"), int(length or 0))


def _reply(sock: socket.socket, status: int, message: str) -> None:
    reason = {400: "Bad Request", 403: "Forbidden", 408: "Request Timeout", 411: "Length Required",
              500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable"}[status]
    body = (message + "\n").encode()
    try:
        sock.sendall(f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
                     f"X-Rlpt-Egress: {json.dumps(message)[:200]}\r\nConnection: close\r\n\r\n".encode("latin-1", "replace") + body)
    except OSError:
        pass


def _relay(client: socket.socket, upstream: socket.socket, forward: int | None = None) -> None:
    """Copies bytes both ways until both sides have closed (or nothing moves for _IDLE_S).
    `forward`: how many more of the client's bytes go upstream (the rest of one request's
    body); what the client sends after them is read and dropped, so a second request on
    the connection never reaches upstream. None: no limit (a CONNECT tunnel).
    epoll, not select(): a trainer holds far more than 1,024 descriptors."""
    peer = {client: upstream, upstream: client}
    with selectors.DefaultSelector() as sel:
        for s in (client, upstream):
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
                if src is client and forward is not None:
                    data, forward = data[:forward], forward - len(data[:forward])
                    if not data:
                        continue
                try:
                    peer[src].sendall(data)
                except OSError:
                    return


def _linger(client: socket.socket, seconds: float = 0.5) -> None:
    """Half-closes `client` and reads what it still sends, for at most `seconds` (and 1 MiB),
    so that closing it then does not reset the connection: a reset can cost the client a
    reply it has not read yet (a 400 for a head it is still sending)."""
    try:
        client.shutdown(socket.SHUT_WR)
        deadline = time.monotonic() + seconds
        for _ in range(16):
            left = deadline - time.monotonic()
            if left <= 0:
                return
            client.settimeout(left)
            if not client.recv(65536):
                return
    except OSError:
        pass


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
