"""Hosts of a test's own on one machine, in Linux network namespaces, and real partitions between them.

A :class:`Network` is one private /24 (``10.213.X.0/24``, X picked free and reserved for this
process) switched by a Linux bridge that lives in a namespace of its own. Each host gets an
address on it:

* :meth:`Network.host` makes a namespace host (``rmqha-<pid>-<net>-<name>``): its own network stack,
  ``lo`` up, one veth to the bridge. Programs run inside it through ``ip netns exec``
  (:meth:`Host.process`, :meth:`Host.run`); they reach nothing but the other hosts, and can bind
  their ports on the host's address.
* :meth:`Network.root_host` makes a host in the root namespace: one more address on the root's
  veth to the bridge. What it runs keeps the root's loopback, so the control plane can run there
  against the machine's Postgres and Redis (127.0.0.1 only) while brokers reach it through the
  bridge at the host's address.

The root namespace always reaches every host (its first address on the bridge, ``.1``, is never cut):
the test itself is the observer and the client.

**Partitions** (:meth:`Network.partition`) drop the IP packets between two sets of hosts on the
bridge, both ways: on each bridge port, an HTB root qdisc sends the packets matched by u32 filters
(source and destination address) to a ``blackhole`` leaf, and lets everything else through
unshaped. Nothing is answered (no RST, no ICMP): a connection attempt times out, an open
connection goes silent and retransmits, exactly as across a broken switch. Packets to and from
other hosts, and ARP, pass. :meth:`Network.heal` removes every cut at once; connections that
survived retransmit on their own. (Routes of type ``blackhole``/``unreachable`` inside a namespace
would fail the local sender at once, which is not a partition; this kernel has no ``act_gact``, so
``tc ... action drop`` is not available either.)

Everything is removed by :meth:`Network.close` (or leaving the ``with`` block), also after an error:
namespaces, the root's veth, the reservation of the subnet. Leftovers of runs whose process died
(names carry its pid) are removed when the next network starts. Programs still running in a host
keep its namespace alive after ``close``: stop them first.

Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN for ``ip netns``), iproute2's ``ip`` and ``tc``, and
a kernel with veth, bridge, HTB, blackhole and u32; without them :class:`Network` raises
:class:`NetnsUnavailable` with one line saying what is missing.

Usage::

    with Network() as net:
        cp = net.root_host("cp")                  # e.g. uvicorn --host cp.ip
        n1, n2 = net.host("n1"), net.host("n2")
        broker = n1.process("broker-n1", argv, log_path, env).start()
        net.partition([cp], [n1])                 # n1 and the control plane cannot hear each other
        net.heal()
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import random
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .procs import Process

PREFIX = "rmqha"
SUBNET_BASE = "10.213"  # 10.213.X.0/24, X in 1..254: the private range these tests own
LOCK_DIR = Path(tempfile.gettempdir()) / "rmqha-netns"
BRIDGE = "br0"
ROOT_PORT = "root"  # the root namespace's veth, as seen on the bridge
FIRST_HOST_OCTET = 10  # namespace hosts get .10, .11, ...; root hosts .2, .3, ...
CUT_CLASS = "1:2"  # the HTB class whose leaf is the blackhole
COMMAND_TIMEOUT_S = 20.0


class NetnsUnavailable(RuntimeError):
    """This machine cannot make network namespaces for the test (not root, no iproute2, ...)."""


@dataclass(frozen=True)
class Host:
    """One host on the network: an address, and a namespace unless it lives in the root one."""

    name: str
    ip: str
    netns: str | None  # None: the root namespace
    bridge_port: str  # its link on the bridge (in the bridge namespace)

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` as it runs on this host."""
        return ["ip", "netns", "exec", self.netns, *argv] if self.netns else list(argv)

    def process(self, name: str, argv: Sequence[str], log_path: Path, env: dict[str, str] | None = None, **options) -> Process:
        """A (not yet started) testkit Process running ``argv`` on this host. ``ip netns exec`` execs
        the program in place, so the Process's pid, signals and process group are the program's."""
        return Process(name, self.command(argv), log_path, env, **options)

    def run(self, argv: Sequence[str], **options) -> subprocess.CompletedProcess:
        """Run ``argv`` on this host to the end (``subprocess.run`` options; output captured as text)."""
        options = {"capture_output": True, "text": True, "timeout": COMMAND_TIMEOUT_S} | options
        return subprocess.run(self.command(argv), **options)


def _ip(*args: str, netns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    return _run(["ip", *(("-n", netns) if netns else ()), *args], check)


def _tc(*args: str, netns: str, check: bool = True) -> subprocess.CompletedProcess:
    return _run(["tc", "-n", netns, *args], check)


def _run(argv: list[str], check: bool) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    if check and done.returncode != 0:
        raise RuntimeError(f"`{' '.join(argv)}` failed ({done.returncode}): {done.stderr.strip()}")
    return done


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def check_available() -> None:
    """NetnsUnavailable unless this process can make namespaces, veths and tc filters."""
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        raise NetnsUnavailable(f"real partitions need iproute2's {' and '.join(missing)} (Debian package iproute2)")
    if os.geteuid() != 0:
        raise NetnsUnavailable("real partitions need root (CAP_NET_ADMIN, CAP_SYS_ADMIN) for `ip netns add`")


def reap_leftovers() -> list[str]:
    """Remove the namespaces and root veths of networks whose process is gone; returns their names."""
    gone: list[str] = []
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        m = re.fullmatch(rf"{PREFIX}-(\d+)-\d+-\S+", name)
        if m and not _pid_alive(int(m.group(1))):
            _ip("netns", "del", name, check=False)
            gone.append(name)
    for line in _ip("-o", "link", "show", check=False).stdout.splitlines():
        m = re.match(r"\d+:\s+(rmq(\d+)x\d+)[@:]", line)
        if m and not _pid_alive(int(m.group(2))):
            _ip("link", "del", m.group(1), check=False)
            gone.append(m.group(1))
    return gone


class Network:
    """A private /24 with a bridge, hosts on it, and partitions between them (see the module docstring)."""

    _count = 0  # networks made by this process: part of every name

    def __init__(self) -> None:
        check_available()
        reap_leftovers()
        Network._count += 1
        self.id = f"{os.getpid()}-{Network._count}"
        self.root_link = f"rmq{os.getpid()}x{Network._count}"
        self.bridge_ns = f"{PREFIX}-{self.id}-br"
        self.hosts: dict[str, Host] = {}
        self._namespaces: list[str] = []
        self._root_octets = iter(range(2, FIRST_HOST_OCTET))
        self._ns_octets = iter(range(FIRST_HOST_OCTET, 255))
        self._cut_ports: dict[str, int] = {}  # bridge port -> filters on it
        self._lock_fd: int | None = None
        self.subnet = self._reserve_subnet()
        self.root_ip = self._addr(1)  # the root namespace's own address on the bridge: never cut
        try:
            self._build_bridge()
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Network:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Network({self.subnet}, hosts={sorted(self.hosts)})"

    # --- set-up -------------------------------------------------------------------------------------

    def _reserve_subnet(self) -> ipaddress.IPv4Network:
        """A 10.213.X.0/24 no route or address of the root namespace touches, locked for this process
        (one flock per X, dropped by the kernel when the process dies)."""
        LOCK_DIR.mkdir(parents=True, exist_ok=True)
        in_use = _ip("-4", "route", "show", "table", "all", check=False).stdout + _ip("-4", "addr", check=False).stdout
        octets = list(range(1, 255))
        random.shuffle(octets)
        for x in octets:
            if f"{SUBNET_BASE}.{x}." in in_use:
                continue
            fd = os.open(LOCK_DIR / f"{x}.lock", os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            self._lock_fd = fd
            return ipaddress.IPv4Network(f"{SUBNET_BASE}.{x}.0/24")
        raise NetnsUnavailable(f"no free subnet in {SUBNET_BASE}.0.0/16")

    def _addr(self, octet: int) -> str:
        return str(self.subnet.network_address + octet)

    def _add_namespace(self, name: str) -> None:
        try:
            _ip("netns", "add", name)
        except RuntimeError as exc:
            raise NetnsUnavailable(f"real partitions need `ip netns add` to work: {exc}") from None
        self._namespaces.append(name)
        _ip("link", "set", "lo", "up", netns=name)

    def _build_bridge(self) -> None:
        ns = self.bridge_ns
        self._add_namespace(ns)
        _ip("link", "add", BRIDGE, "type", "bridge", netns=ns)
        _ip("link", "set", BRIDGE, "up", netns=ns)
        _ip("link", "add", self.root_link, "type", "veth", "peer", "name", ROOT_PORT, "netns", ns)
        _ip("link", "set", ROOT_PORT, "master", BRIDGE, "up", netns=ns)
        _ip("addr", "add", f"{self.root_ip}/24", "dev", self.root_link)
        _ip("link", "set", self.root_link, "up")

    def host(self, name: str) -> Host:
        """A new host in a namespace of its own, joined to the bridge."""
        self._check_new(name)
        ip = self._addr(next(self._ns_octets))
        ns = f"{PREFIX}-{self.id}-{name}"
        port = f"p{len(self.hosts)}"
        self._add_namespace(ns)
        _ip("link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns, netns=self.bridge_ns)
        _ip("link", "set", port, "master", BRIDGE, "up", netns=self.bridge_ns)
        _ip("addr", "add", f"{ip}/24", "dev", "eth0", netns=ns)
        _ip("link", "set", "eth0", "up", netns=ns)
        self.hosts[name] = host = Host(name, ip, ns, port)
        return host

    def root_host(self, name: str) -> Host:
        """A new host in the root namespace: one more address on the root's link to the bridge."""
        self._check_new(name)
        ip = self._addr(next(self._root_octets))
        _ip("addr", "add", f"{ip}/24", "dev", self.root_link)
        self.hosts[name] = host = Host(name, ip, None, ROOT_PORT)
        return host

    def _check_new(self, name: str) -> None:
        if name in self.hosts:
            raise ValueError(f"host {name!r} exists already")
        if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,15}", name):
            raise ValueError(f"host name {name!r}: up to 16 of a-z, 0-9 and '-'")

    # --- partitions ---------------------------------------------------------------------------------

    def partition(self, a_hosts: Iterable[Host], b_hosts: Iterable[Host]) -> None:
        """No IP packet passes between a host of ``a_hosts`` and one of ``b_hosts``, either way, until
        :meth:`heal`. Cuts add up: calling it again cuts more."""
        a, b = list(a_hosts), list(b_hosts)
        if {h.name for h in a} & {h.name for h in b}:
            raise ValueError("a host cannot be on both sides of a partition")
        for x in a:
            for y in b:
                self._drop(x, y)
                self._drop(y, x)

    def _drop(self, src: Host, dst: Host) -> None:
        """Drop src -> dst where the bridge hands packets to dst's link (its port's egress)."""
        ns, port = self.bridge_ns, dst.bridge_port
        if port not in self._cut_ports:
            # default 0: what no filter classifies is sent at once, unshaped
            _tc("qdisc", "add", "dev", port, "root", "handle", "1:", "htb", netns=ns)
            _tc("class", "add", "dev", port, "parent", "1:", "classid", CUT_CLASS, "htb", "rate", "1mbit", netns=ns)
            _tc("qdisc", "add", "dev", port, "parent", CUT_CLASS, "handle", "2:", "blackhole", netns=ns)
            self._cut_ports[port] = 0
        _tc(
            *("filter", "add", "dev", port, "parent", "1:", "protocol", "ip", "prio", "1", "u32"),
            *("match", "ip", "src", f"{src.ip}/32", "match", "ip", "dst", f"{dst.ip}/32", "flowid", CUT_CLASS),
            netns=ns,
        )
        self._cut_ports[port] += 1

    def heal(self) -> None:
        """Remove every cut."""
        for port in list(self._cut_ports):
            _tc("qdisc", "del", "dev", port, "root", netns=self.bridge_ns, check=False)
            del self._cut_ports[port]

    def dropped_packets(self) -> int:
        """Packets the cuts in place have dropped so far (for a report)."""
        total = 0
        for port in self._cut_ports:
            out = _tc("-s", "qdisc", "show", "dev", port, netns=self.bridge_ns, check=False).stdout
            m = re.search(r"qdisc blackhole .*?dropped (\d+)", out, re.S)
            total += int(m.group(1)) if m else 0
        return total

    # --- tear-down ----------------------------------------------------------------------------------

    def close(self) -> None:
        """Remove everything this network made; safe to call twice. The root's veth goes first: a
        namespace is destroyed asynchronously, and the veth with it only later."""
        with contextlib.suppress(Exception):
            self.heal()
        _ip("link", "del", self.root_link, check=False)
        for ns in reversed(self._namespaces):
            _ip("netns", "del", ns, check=False)
        self._namespaces.clear()
        self.hosts.clear()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
