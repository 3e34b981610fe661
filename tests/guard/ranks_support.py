"""What the distributed-check tests share: "hosts" (a Python with torch, plus a folder on PYTHONPATH holding what
that host has installed), torchrun jobs of one torchrun per host on loopback or across network namespaces
joined by veth pairs to a bridge, and a reader of the check's table.

The namespaces are all new ones (the bridge lives in a namespace of its own: nothing is added to this
machine's own network), named after this process, and removed with their /etc/netns/<name>/ hosts files
when the job ends, as are the processes (each torchrun leads a process group of its own).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
TORCH213 = REPO / ".venvs" / "torch2.13-cpu-py3.11" / "bin" / "python"
TORCH214 = REPO / ".venvs" / "torch2.14-cu130-py3.11" / "bin" / "python"
SUBNET = "10.213.{}.{}"


@dataclass(frozen=True)
class Host:
    """One machine of the job: its name, the Python it runs (with its torch) and what it has installed
    (a folder on PYTHONPATH, or nothing)."""

    name: str
    python: Path
    site: Path | None = None
    argv: tuple[str, ...] | None = None
    """This host's worker command instead of the job's (e.g. one that never joins the check)."""


@dataclass
class Outcome:
    host: Host
    returncode: int
    output: str
    seconds: float


def unpack(wheel: Path, dest: Path) -> Path:
    """The wheel's files as pip lays them out in site-packages (its .dist-info with RECORD included)."""
    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(dest)
    return dest


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _env(host: Host) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME") and not k.startswith(("PYTEST_", "KILN_"))}
    if host.site is not None:
        env["PYTHONPATH"] = str(host.site)
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def namespaces_unavailable() -> str | None:
    """Why network namespaces cannot be made here, or None when they can."""
    if sys.platform != "linux":
        return "network namespaces are Linux only"
    if os.geteuid() != 0:
        return "making network namespaces needs root"
    for tool in ("ip", "unshare"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (iproute2, util-linux: scripts/ci/system-deps.sh)"
    name = f"kr-probe-{os.getpid()}"
    proc = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        return f"`ip netns add` fails here: {proc.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
    return None


@dataclass(frozen=True)
class Network:
    """Host i of the job lives in namespace names[i] at address addresses[i]."""

    names: list[str]
    addresses: list[str]


@contextlib.contextmanager
def namespaces(hosts: Sequence[Host]) -> Iterator[Network]:
    """One network namespace per host, each joined by a veth pair to a bridge in a namespace of its own, with
    an /etc/hosts (ip netns exec mounts /etc/netns/<name>/hosts) that names every host; all removed after."""
    tag = f"{os.getpid() % 100000}"
    switch = f"kr{tag}-sw"
    names = [f"kr{tag}-h{i}" for i in range(len(hosts))]
    third = os.getpid() % 250 + 1
    addresses = [SUBNET.format(third, i + 1) for i in range(len(hosts))]
    hosts_file = "127.0.0.1 localhost\n" + "".join(f"{a} {h.name}\n" for a, h in zip(addresses, hosts, strict=True))
    made: list[str] = []

    def ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, text=True)

    try:
        ip("netns", "add", switch)
        made.append(switch)
        ip("-n", switch, "link", "add", "br0", "type", "bridge")
        ip("-n", switch, "link", "set", "br0", "up")
        for i, (name, address) in enumerate(zip(names, addresses, strict=True)):
            ip("netns", "add", name)
            made.append(name)
            etc = Path("/etc/netns") / name
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text(hosts_file)
            # Created inside the switch's namespace, one end then moved: nothing touches this machine's network.
            ip("-n", switch, "link", "add", f"p{i}", "type", "veth", "peer", "name", "eth0", "netns", name)
            ip("-n", switch, "link", "set", f"p{i}", "master", "br0")
            ip("-n", switch, "link", "set", f"p{i}", "up")
            ip("-n", name, "addr", "add", f"{address}/24", "dev", "eth0")
            ip("-n", name, "link", "set", "eth0", "up")
            ip("-n", name, "link", "set", "lo", "up")
        yield Network(names, addresses)
    finally:
        for name in reversed(made):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
            shutil.rmtree(Path("/etc/netns") / name, ignore_errors=True)


def run_job(hosts: Sequence[Host], worker: Sequence[str], *, network: Network | None = None,
            timeout: float = 120.0) -> list[Outcome]:
    """One torchrun per host, one worker each, all started at once; returns each host's outcome.

    On loopback the rendezvous is static (host i is node rank i, so rank i), on 127.0.0.1; across
    namespaces it is c10d on host 0's address, each torchrun in its host's namespace under that host's name
    (a UTS namespace of its own), so ranks come in join order and the table's host column tells them apart.
    Hosts still running at `timeout` are killed (their process group) and reported with returncode -9, as are
    the hosts that never join (`argv`) once the others have ended."""
    port = free_port() if network is None else 29400
    procs: list[tuple[Host, subprocess.Popen[str], float]] = []
    try:
        for i, host in enumerate(hosts):
            run = [str(host.python), "-m", "torch.distributed.run", "--nnodes", str(len(hosts)),
                   "--nproc-per-node", "1", "--max-restarts", "0"]
            if network is None:
                run += ["--node-rank", str(i), "--master-addr", "127.0.0.1", "--master-port", str(port)]
            else:
                run += ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"{network.addresses[0]}:{port}",
                        "--rdzv-id", f"kiln-ranks-{os.getpid()}", "--local-addr", network.addresses[i]]
            if host.argv is not None:
                run += ["--no-python", *host.argv]
            else:
                run += list(worker)
            if network is not None:
                shell = f"hostname {host.name} && exec {' '.join(map(_quote, run))}"
                run = ["ip", "netns", "exec", network.names[i], "unshare", "--uts", "sh", "-c", shell]
            procs.append((host, subprocess.Popen(run, env=_env(host), stdout=subprocess.PIPE,
                                                 stderr=subprocess.STDOUT, text=True, start_new_session=True),
                          time.monotonic()))
        end = time.monotonic() + timeout
        # The hosts that run the check first; a host that never joins it (argv) is ended once they are done.
        order = sorted(range(len(procs)), key=lambda i: procs[i][0].argv is not None)
        found: dict[int, Outcome] = {}
        for i in order:
            host, proc, started = procs[i]
            try:
                out, _ = proc.communicate(timeout=0.01 if host.argv is not None else max(end - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                _kill(proc)
                out, _ = proc.communicate()
            found[i] = Outcome(host, proc.returncode, out, time.monotonic() - started)
        return [found[i] for i in range(len(procs))]
    finally:
        for _, proc, _ in procs:
            if proc.poll() is None:
                _kill(proc)
                proc.communicate()


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (torchrun starts its workers in sessions of their own)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _kill(proc: subprocess.Popen[str]) -> None:
    """End the host's torchrun, its workers and whatever they started."""
    for pid in [*_descendants(proc.pid), proc.pid]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _quote(word: str) -> str:
    return shlex.quote(word)


# --- reading the check's output --------------------------------------------------------------------------------

_ROW = re.compile(r"^(\d+)\s{2,}(\S+)\s{2,}(\S+)\s{2,}(\S+)\s{2,}(\S+)\s{2,}(\S+)\s{2,}(\S+)\s{2,}(.*)$")


@dataclass
class Row:
    rank: int
    host: str
    version: str
    build: str
    torch: str
    cuda: str
    gpu: str
    notes: list[str]

    @property
    def text(self) -> str:
        return "\n".join(self.notes)


def table(output: str) -> dict[int, Row]:
    """The rows of the check's table in ``output`` (one torchrun's log): rank -> its cells and notes (problem
    lines, each followed by its "fix:" line)."""
    rows: dict[int, Row] = {}
    last: Row | None = None
    inside = False
    for line in output.splitlines():
        if (" stops: " in line and "differ" in line) or "no rank of" in line:
            inside, last = True, None
            continue
        if not inside:
            continue
        if line.startswith("rank  "):
            continue
        match = _ROW.match(line)
        if match:
            last = Row(int(match[1]), match[2], match[3], match[4], match[5], match[6], match[7], [match[8].strip()])
            rows[last.rank] = last
        elif last is not None and line.startswith(" ") and line.strip():
            last.notes.append(line.strip())
        else:
            inside = False
    return rows


def answers(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded
