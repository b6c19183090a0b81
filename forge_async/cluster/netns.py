"""Simulated hosts on one machine: Linux network namespaces (root only), for tests and benchmarks.

Node i gets its own network namespace with address 192.0.2.(i+1)/24 (a documentation
range, assigned to these namespaces only), joined to the others by a bridge that lives
in a namespace of its own (nothing is added to the machine's own network), and its
own /dev/shm and hostname: a "holder" process keeps a private mount + UTS namespace
that every command run on that node joins. Everything is torn down on exit, also
when the test fails: every process in the namespaces is killed, the namespaces deleted.
"""

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager

SUBNET = "192.0.2"


def available() -> str | None:
    """Why simulated hosts cannot be made here, or None if they can."""
    if os.geteuid() != 0:
        return "needs root (ip netns)"
    for tool in ("ip", "nsenter", "unshare"):
        if shutil.which(tool) is None:
            return f"needs `{tool}` (iproute2 / util-linux)"
    return None


def address(node: int) -> str:
    return f"{SUBNET}.{node + 1}"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


class Cluster:
    def __init__(self, nodes: int):
        self.nodes = nodes
        self.tag = uuid.uuid4().hex[:6]
        self.bridge_ns = f"fa{self.tag}br"
        self.namespaces = [f"fa{self.tag}n{i}" for i in range(nodes)]
        self.holders: list[subprocess.Popen] = []
        self.started: list[subprocess.Popen] = []

    def up(self) -> None:
        _ip("netns", "add", self.bridge_ns)
        _ip("-n", self.bridge_ns, "link", "set", "lo", "up")
        _ip("-n", self.bridge_ns, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.bridge_ns, "link", "set", "br0", "up")
        for i, ns in enumerate(self.namespaces):
            _ip("netns", "add", ns)
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", self.bridge_ns, "link", "add", f"p{i}", "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("-n", self.bridge_ns, "link", "set", f"p{i}", "master", "br0")
            _ip("-n", self.bridge_ns, "link", "set", f"p{i}", "up")
            _ip("-n", ns, "addr", "add", f"{address(i)}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            holder = subprocess.Popen(
                [
                    "ip",
                    "netns",
                    "exec",
                    ns,
                    "unshare",
                    "-m",
                    "-u",
                    "--propagation",
                    "private",
                    "sh",
                    "-c",
                    f"mount -t tmpfs -o size=1g tmpfs /dev/shm && hostname node{i} && exec sleep infinity",
                ],
                start_new_session=True,
            )
            self.holders.append(holder)
        for i in range(self.nodes):
            self._wait_for_holder(i)

    def _wait_for_holder(self, node: int) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            result = subprocess.run(self._enter(node, ["hostname"]), capture_output=True, text=True)
            if result.stdout.strip() == f"node{node}":
                return
            time.sleep(0.1)
        raise RuntimeError(f"simulated node {node} did not come up")

    def _enter(self, node: int, command: list[str]) -> list[str]:
        # --wd: entering the mount namespace would otherwise reset the working directory to /
        return ["nsenter", "-t", str(self.holders[node].pid), "-n", "-m", "-u", f"--wd={os.getcwd()}", "--", *command]

    def start(self, node: int, command: list[str], **popen) -> subprocess.Popen:
        """Start `command` on simulated node `node` (in the caller's working directory)."""
        proc = subprocess.Popen(self._enter(node, command), start_new_session=True, **popen)
        self.started.append(proc)
        return proc

    def run(self, node: int, command: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run(self._enter(node, command), capture_output=True, text=True, timeout=60)

    def pids(self, node: int) -> list[int]:
        """Every process on node `node` except its holder."""
        out = subprocess.run(["ip", "netns", "pids", self.namespaces[node]], capture_output=True, text=True)
        return [int(p) for p in out.stdout.split() if int(p) != self.holders[node].pid]

    def kill_node(self, node: int) -> None:
        """Everything on node `node` dies at once, as if the machine lost power."""
        for pid in self.pids(node):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def down(self) -> None:
        for ns in [*self.namespaces, self.bridge_ns]:
            out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
            for pid in out.stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for proc in [*self.started, *self.holders]:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for ns in [*self.namespaces, self.bridge_ns]:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@contextmanager
def simulated_hosts(nodes: int):
    cluster = Cluster(nodes)
    try:
        cluster.up()
        yield cluster
    finally:
        cluster.down()


def launch_command(nnodes: int, node: int, *app_args: str, port: int = 29400, join_timeout: int = 120) -> list[str]:
    """`python -m forge_async.cluster` for node `node` of a simulated cluster (master: node 0)."""
    return [
        sys.executable,
        "-m",
        "forge_async.cluster",
        "--nnodes",
        str(nnodes),
        "--node-rank",
        str(node),
        "--master-addr",
        address(0),
        "--master-port",
        str(port),
        "--join-timeout",
        str(join_timeout),
        "--",
        *app_args,
    ]
