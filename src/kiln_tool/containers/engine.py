"""The container engine: Debian's docker.io, with dockerd started without a bridge network.

`ensure_engine()` makes `docker` answer: it installs docker.io with apt-get where dockerd is
missing (root only), starts dockerd in the background (no bridge, no iptables: containers run
with ``--network host`` or ``--network none``) and waits for it. An engine kiln started is
recorded in a pid file, so `stop_engine()` ends exactly that process and nothing else.
Standard library only.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .. import resources

CONTAINERS_FILE = resources.data_path("containers.json")
STATE_DIR = Path(os.environ.get("KILN_CONTAINER_STATE", Path.home() / ".cache" / "kiln" / "containers"))


class ContainerError(RuntimeError):
    """A container step failed: exit 1 (a build or test failed) unless said otherwise."""

    exit_code = 1


class EngineUnavailable(ContainerError):
    """No engine can be had on this machine: exit 2."""

    exit_code = 2


def load_recipe() -> dict[str, object]:
    data = json.loads(CONTAINERS_FILE.read_text())
    if not isinstance(data, dict) or data.get("schema_version") != 1:
        raise EngineUnavailable(f"{CONTAINERS_FILE}: schema_version 1 expected")
    return data


def _mem_available_gib(meminfo: Path) -> float | None:
    try:
        for line in meminfo.read_text().splitlines():
            key, _, value = line.partition(":")
            if key == "MemAvailable" and value.split() and value.split()[0].isdigit():
                return int(value.split()[0]) / (1 << 20)  # kB
    except OSError:
        return None
    return None


TMPFS_VARIABLE = "KILN_CONTAINER_TMPFS"


def scratch_tmpfs_args(meminfo: Path = Path("/proc/meminfo")) -> list[str]:
    """docker create/run arguments that put a container's scratch folder (/tmp: cibuildwheel's test venv, the
    release rehearsal's user venvs and uv's cache; written, then deleted) on a tmpfs, when this machine has the
    memory for it (data/containers.json engine.scratch_tmpfs); [] otherwise, or when KILN_CONTAINER_TMPFS=0.
    exec: the venvs' libraries are mapped executable and their scripts run from there."""
    setting = os.environ.get(TMPFS_VARIABLE, "").strip()
    if setting not in ("", "0", "1"):
        raise ContainerError(f"{TMPFS_VARIABLE}={setting[:80]!r}: expected 0 (the container's own filesystem) or 1 "
                             "(a tmpfs where memory allows, the default)")
    if setting == "0":
        return []
    engine = load_recipe()["engine"]
    recipe = engine.get("scratch_tmpfs") if isinstance(engine, dict) else None
    if recipe is None:
        return []
    path, size, floor = (recipe.get(k) for k in ("path", "size_gib", "min_available_gib")) \
        if isinstance(recipe, dict) else (None, None, None)
    if not (isinstance(path, str) and re.fullmatch(r"(/[A-Za-z0-9._-]+)+", path) and ".." not in path.split("/")
            and isinstance(size, int) and not isinstance(size, bool) and isinstance(floor, int | float)
            and not isinstance(floor, bool) and 0 < size < floor):
        raise ContainerError(f"{CONTAINERS_FILE}: engine.scratch_tmpfs must be {{path: an absolute path, size_gib: "
                             f"an integer > 0, min_available_gib: more than size_gib}}, not {recipe!r}")
    available = _mem_available_gib(meminfo)
    if available is None or available < floor:
        return []
    return [f"--tmpfs={path}:rw,exec,nosuid,nodev,size={size}g"]


@dataclass(frozen=True)
class Engine:
    docker: str
    started_pid: int | None
    """The dockerd this run started (None: it was running already)."""


def _docker_cli() -> str | None:
    return shutil.which("docker")


def engine_answers(docker: str) -> bool:
    proc = subprocess.run([docker, "version", "--format", "{{.Server.APIVersion}}"], capture_output=True,
                          text=True, timeout=30)
    return proc.returncode == 0 and bool(proc.stdout.strip())


def _install_docker_io() -> None:
    if os.geteuid() != 0:
        raise EngineUnavailable("no dockerd here and not root: install Debian's docker.io (apt-get install docker.io)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    print("containers: installing Debian's docker.io (apt-get)", flush=True)
    for cmd in (["apt-get", "update", "-qq"],
                ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "docker.io"]):
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise EngineUnavailable(f"`{' '.join(cmd)}` failed: {proc.stderr.strip()[-500:]}")


def _pid_file() -> Path:
    return STATE_DIR / "dockerd.pid"


def ensure_engine() -> Engine:
    """A docker CLI whose engine answers; starts (and if need be installs) dockerd."""
    docker = _docker_cli()
    if docker and engine_answers(docker):
        return Engine(docker=docker, started_pid=None)
    dockerd = shutil.which("dockerd")
    if dockerd is None:
        _install_docker_io()
        dockerd = shutil.which("dockerd")
        docker = _docker_cli()
    if dockerd is None or docker is None:
        raise EngineUnavailable("docker.io is installed but dockerd or docker is not on PATH")
    recipe = load_recipe()["engine"]
    assert isinstance(recipe, dict)
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    log = STATE_DIR / "dockerd.log"
    with log.open("ab") as fh:
        proc = subprocess.Popen([dockerd, *recipe["dockerd_args"]], stdout=fh, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    _pid_file().write_text(f"{proc.pid}\n")
    deadline = time.monotonic() + float(recipe["start_timeout_s"])
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise EngineUnavailable(f"dockerd exited with {proc.returncode}; its log: {log}")
        if engine_answers(docker):
            print(f"containers: started dockerd (pid {proc.pid}, no bridge network; log {log})", flush=True)
            return Engine(docker=docker, started_pid=proc.pid)
        time.sleep(0.5)
    proc.terminate()
    raise EngineUnavailable(f"dockerd did not answer within {recipe['start_timeout_s']} s; its log: {log}")


def stop_engine(engine: Engine) -> None:
    """End the dockerd this run started (by its pid), never one that was running before."""
    if engine.started_pid is None:
        return
    try:
        os.kill(engine.started_pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    for _ in range(100):
        try:
            os.kill(engine.started_pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        os.kill(engine.started_pid, signal.SIGKILL)
    _pid_file().unlink(missing_ok=True)


@contextmanager
def running_engine(keep: bool = False) -> Iterator[Engine]:
    """An engine for the block; a dockerd started for it is ended after it unless `keep`."""
    engine = ensure_engine()
    try:
        yield engine
    finally:
        if not keep:
            stop_engine(engine)


def docker(engine: Engine, *args: str, log: Path | None = None, check: bool = True,
           capture: bool = False, stdin: int | None = None, timeout: float | None = None) -> str:
    """Run `docker ARGS`; output goes to `log` (appended) unless captured."""
    cmd = [engine.docker, *args]
    if capture:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise ContainerError(f"`docker {' '.join(args[:3])} ...` failed: {proc.stderr.strip()[-800:]}")
        return proc.stdout
    with (log or Path(os.devnull)).open("a") as fh:
        fh.write(f"$ docker {' '.join(args)}\n")
        fh.flush()
        proc2 = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=stdin, timeout=timeout)
    if check and proc2.returncode != 0:
        raise ContainerError(f"`docker {' '.join(args[:2])} ...` failed (exit {proc2.returncode}); see {log}")
    return ""


def image_exists(engine: Engine, ref: str) -> bool:
    proc = subprocess.run([engine.docker, "image", "inspect", ref], capture_output=True)
    return proc.returncode == 0


def prune_tags(engine: Engine, repository: str, keep: set[str], tag_prefix: str = "") -> list[str]:
    """Remove the images of `repository` whose tag starts with `tag_prefix` and is not in `keep`: what an
    earlier run built from other inputs (kiln's tags are digests of their inputs, never reused)."""
    out = subprocess.run([engine.docker, "image", "ls", "--format", "{{.Repository}}:{{.Tag}}", repository],
                         capture_output=True, text=True).stdout.split()
    removed = []
    for ref in out:
        tag = ref.rsplit(":", 1)[-1]
        stale = tag.startswith(tag_prefix) and ref not in keep
        if stale and subprocess.run([engine.docker, "rmi", ref], capture_output=True).returncode == 0:
            removed.append(ref)
    return removed
