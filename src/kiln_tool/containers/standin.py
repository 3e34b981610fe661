"""The STAND-IN for the manylinux_2_28 base image, built locally where no registry can be reached.

The real base (data/matrix.json platforms.*.manylinux_base) is pulled by digest where that
works. Where it does not, two images are built from Debian with debootstrap
(data/containers.json ``standin``):

- the runtime image: Debian minbase, this machine's CA certificates, every CPython of the matrix
  that this machine has (its pyenv builds, which run on this Debian) as venvs at
  ``/opt/python/cpXY-cpXY`` the way manylinux lays them out, and a utility Python at
  ``/opt/python/cp39-cp39`` for cibuildwheel. No compiler: it is also the "fresh user machine" of
  the release rehearsal;
- the build image: the runtime image plus build-essential and git.

Both say they are stand-ins in their name (``kiln-standin-<suite>-glibc<version>``), in their
labels (``kiln.standin``, ``kiln.glibc``, ``kiln.manylinux_tag``) and in what kiln prints.
Their tag is a digest of everything that went in, so a rerun with nothing changed builds nothing.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import shlex
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..build_env import BuildEnvError, find_python
from ..matrix_data import load as load_matrix
from .engine import STATE_DIR, ContainerError, Engine, docker, image_exists, load_recipe, prune_tags

HOST_CA_DIR = Path("/usr/local/share/ca-certificates")
UTILITY_PYTHON = "/opt/python/cp39-cp39"
# Raise it when how the images are made changes in a way the inputs below do not show.
RECIPE_VERSION = 1


@dataclass(frozen=True)
class HostPython:
    version: str
    """X.Y"""
    prefix: Path
    """The installation root (sys.base_prefix), copied into the image at the same path."""
    full_version: str
    copied: bool = True
    """False: the image's own (Debian's) CPython, installed by apt, not copied from this machine."""

    @property
    def cp(self) -> str:
        return "cp" + self.version.replace(".", "")


@dataclass(frozen=True)
class StandinImages:
    runtime: str
    build: str
    glibc: str
    manylinux_tag: str
    suite: str
    tool_python: str = ""
    """A CPython of the image, for docker/Dockerfile's TOOL_PYTHON."""

    def describe(self) -> str:
        return (f"STAND-IN base (Debian {self.suite}, glibc {self.glibc}; gives {self.manylinux_tag} wheels, "
                "not the real manylinux_2_28 image)")


def _recipe() -> dict[str, object]:
    standin = load_recipe()["standin"]
    assert isinstance(standin, dict)
    return standin


def python_source(arch: str) -> str:
    sources = _recipe()["python_source"]
    assert isinstance(sources, dict)
    if arch not in sources:
        raise ContainerError(f"no stand-in python_source for {arch} (data/containers.json)")
    return str(sources[arch])


def image_pythons(arch: str) -> tuple[list[HostPython], list[str], list[str]]:
    """The stand-in's CPythons for `arch`, the Debian packages debootstrap installs for them, and those
    apt-get installs in the image afterwards (Debian's python3.X-venv does not configure inside a
    foreign-architecture debootstrap)."""
    if python_source(arch) == "host":
        pythons = host_pythons()
        return pythons, _elf_packages(pythons), []
    debian = _recipe()["debian_python"]
    assert isinstance(debian, dict)
    version = str(debian["version"])
    return ([HostPython(version=version, prefix=Path("/usr"), full_version=f"debian-{version}", copied=False)],
            [], [str(p) for p in debian["packages"]])


def ensure_emulation(arch: str) -> None:
    """binfmt handlers for `arch` (qemu-user-static) when it is not this machine's architecture."""
    if arch == platform.machine():
        return
    qemu = {"aarch64": "qemu-aarch64"}.get(arch, f"qemu-{arch}")
    handler = Path("/proc/sys/fs/binfmt_misc") / qemu
    if handler.exists():
        return
    if os.geteuid() != 0:
        raise ContainerError(f"{arch} needs qemu-user emulation (binfmt handler {qemu}) and this is not root")
    packages = [str(p) for p in _recipe()["emulation_packages"]]  # type: ignore[attr-defined]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    steps = [["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages]]
    if not Path("/proc/sys/fs/binfmt_misc/register").exists():
        steps.append(["mount", "-t", "binfmt_misc", "binfmt_misc", "/proc/sys/fs/binfmt_misc"])
    steps.append(["update-binfmts", "--enable", qemu])
    for cmd in steps:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0 and cmd[0] != "update-binfmts":
            raise ContainerError(f"`{' '.join(cmd)}` failed: {proc.stderr.strip()[-400:]}")
    if not handler.exists():
        raise ContainerError(f"no binfmt handler {handler} after installing {', '.join(packages)}")
    print(f"containers: {arch} binaries run under qemu-user emulation ({handler})", flush=True)


def host_pythons() -> list[HostPython]:
    """The matrix's CPythons this machine has (PATH or pyenv), with their installation roots."""
    found: list[HostPython] = []
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    for version in load_matrix().python:
        # pyenv's own builds first: its shims on PATH answer only for the global version.
        builds = sorted(pyenv_root.glob(f"versions/{version}.*/bin/python{version}"), reverse=True)
        try:
            exe = builds[0] if builds else find_python(version)
        except BuildEnvError:
            continue  # a Python this machine lacks is simply not offered
        proc = subprocess.run([str(exe), "-c", "import sys; print(sys.base_prefix); print(sys.version.split()[0])"],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            continue
        prefix, full = proc.stdout.split()
        if Path(prefix) in (Path("/usr"), Path("/usr/local")):
            continue  # a system Python cannot be copied on its own; the image has Debian's
        found.append(HostPython(version=version, prefix=Path(prefix), full_version=full))
    if not found:
        raise ContainerError("no CPython of data/matrix.json found on this machine (PATH or pyenv)")
    return found


def _host_ca_files() -> list[Path]:
    return sorted(p for p in HOST_CA_DIR.glob("**/*.crt") if p.is_file()) if HOST_CA_DIR.is_dir() else []


def _elf_packages(pythons: list[HostPython]) -> list[str]:
    """Debian packages that the host CPythons' ELF files load (ldd, then dpkg -S)."""
    libs: set[str] = set()
    for py in pythons:
        for path in py.prefix.rglob("*"):
            if not path.is_file() or "site-packages" in path.parts:
                continue
            if not (path.suffix == ".so" or ".so." in path.name or path.parent.name == "bin"):
                continue
            proc = subprocess.run(["ldd", str(path)], capture_output=True, text=True)
            for line in proc.stdout.splitlines():
                parts = line.split("=>")
                if len(parts) == 2 and parts[1].strip().startswith("/"):
                    lib = parts[1].split()[0]
                    if not lib.startswith(str(py.prefix)):
                        libs.add(lib)
    packages: set[str] = set()
    for lib in sorted(libs):
        real = os.path.realpath(lib)
        for candidate in {lib, real, real.replace("/usr/lib/", "/lib/", 1), real.replace("/lib/", "/usr/lib/", 1)}:
            proc = subprocess.run(["dpkg", "-S", candidate], capture_output=True, text=True)
            if proc.returncode == 0:
                packages.add(proc.stdout.split(":", 1)[0].strip())
                break
    return sorted(packages)


def inputs_digest(arch: str, pythons: list[HostPython], extra_packages: list[str]) -> str:
    digest = hashlib.sha256()
    record = {
        "recipe": _recipe(),
        "arch": arch,
        "pythons": [(p.version, p.full_version, str(p.prefix)) for p in pythons],
        "packages": extra_packages,
        "ca": [hashlib.sha256(p.read_bytes()).hexdigest() for p in _host_ca_files()],
        "provision": _provision_script(pythons),
        "env": _ENV,
        "recipe_version": RECIPE_VERSION,
    }
    digest.update(json.dumps(record, sort_keys=True).encode())
    return digest.hexdigest()[:16]


def image_names(arch: str, key: str) -> tuple[str, str]:
    recipe = _recipe()
    repo = f"kiln-standin-{recipe['suite']}-glibc{recipe['glibc']}"
    return f"{repo}:runtime-{arch}-{key}", f"{repo}:build-{arch}-{key}"


def _labels(kind: str, key: str) -> list[str]:
    recipe = _recipe()
    labels = {
        "org.opencontainers.image.title": f"kiln STAND-IN {kind} image (Debian {recipe['suite']}, "
                                          f"glibc {recipe['glibc']}), not manylinux_2_28",
        "kiln.standin": "true",
        "kiln.glibc": str(recipe["glibc"]),
        "kiln.manylinux_tag": str(recipe["manylinux_tag"]),
        "kiln.inputs": key,
    }
    return [f"LABEL {name}={json.dumps(value)}" for name, value in labels.items()]


_ENV = ["ENV LANG=C.UTF-8",
        "ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt",
        "ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
        "ENV REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt",
        "ENV PIP_DISABLE_PIP_VERSION_CHECK=1"]


def _copy_python(py: HostPython, root: Path) -> None:
    def ignore(folder: str, names: list[str]) -> set[str]:
        here = Path(folder)
        skip = {n for n in names if n == "__pycache__"}
        if here.name.startswith("python3") and here.parent.name == "lib":
            skip |= {n for n in names if n in ("site-packages", "test", "idlelib", "tkinter", "turtledemo")}
        return skip

    target = root / py.prefix.relative_to("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(py.prefix, target, symlinks=True, ignore=ignore)


def _provision_script(pythons: list[HostPython]) -> str:
    lines = ["set -euo pipefail", "update-ca-certificates >/dev/null"]
    for py in pythons:
        exe = shlex.quote(f"{py.prefix}/bin/python{py.version}")
        venv = f"/opt/python/{py.cp}-{py.cp}"
        if py.copied:  # Debian's own CPython has ensurepip through python3.X-venv
            lines.append(f"{exe} -m ensurepip --default-pip >/dev/null")
        lines += [f"{exe} -m venv {venv}",
                  f"{venv}/bin/python -c 'import ssl, sqlite3, ctypes, zlib, bz2, lzma'"]
    lines += [f"mkdir -p {UTILITY_PYTHON}/bin",
              f"ln -sf /usr/bin/python3 {UTILITY_PYTHON}/bin/python",
              f"ln -sf /usr/bin/python3 {UTILITY_PYTHON}/bin/python3",
              "getconf GNU_LIBC_VERSION"]
    return "\n".join(lines)


def docker_platform(arch: str) -> str:
    return {"x86_64": "linux/amd64", "aarch64": "linux/arm64"}[arch]


def set_image_architecture(engine: Engine, image: str, arch: str, log: Path) -> None:
    """Record `arch` in `image`'s config. `docker import --platform` is experimental in docker.io 20.10 (and
    ignored without it), so an imported arm64 root would be recorded as amd64, and `docker run --platform
    linux/arm64` would then try to pull it. The image is saved, its config rewritten, and loaded again."""
    want = docker_platform(arch).split("/")[1]
    have = docker(engine, "image", "inspect", "--format", "{{.Architecture}}", image, capture=True).strip()
    if have == want:
        return
    with tempfile.TemporaryDirectory(dir=STATE_DIR, prefix="standin-arch-") as tmp:
        saved, rewritten = Path(tmp) / "saved.tar", Path(tmp) / "rewritten.tar"
        docker(engine, "save", "-o", str(saved), image, log=log)
        with tarfile.open(saved) as src, tarfile.open(rewritten, "w") as dst:
            manifest = json.load(src.extractfile("manifest.json"))  # type: ignore[arg-type]
            (entry,) = manifest
            config = json.load(src.extractfile(entry["Config"]))  # type: ignore[arg-type]
            config["architecture"] = want
            if want == "arm64":
                config["variant"] = "v8"
            data = json.dumps(config, separators=(",", ":")).encode()
            name = f"{hashlib.sha256(data).hexdigest()}.json"
            old = entry["Config"]
            entry["Config"] = name
            for member in src.getmembers():
                if member.name in (old, "manifest.json"):
                    continue
                dst.addfile(member, src.extractfile(member) if member.isfile() else None)
            for arcname, blob in ((name, data), ("manifest.json", json.dumps(manifest).encode())):
                info = tarfile.TarInfo(arcname)
                info.size = len(blob)
                dst.addfile(info, io.BytesIO(blob))
        docker(engine, "load", "-i", str(rewritten), log=log)
    have = docker(engine, "image", "inspect", "--format", "{{.Architecture}}", image, capture=True).strip()
    if have != want:
        raise ContainerError(f"{image} is recorded as {have}, not {want}, after rewriting its config")


def _commit(engine: Engine, container: str, image: str, changes: list[str], log: Path) -> None:
    args = ["commit"]
    for change in changes:
        args += ["--change", change]
    docker(engine, *args, container, image, log=log)


def _run_and_commit(engine: Engine, base: str, image: str, script: str, network: str, changes: list[str],
                    log: Path, arch: str) -> str:
    name = f"kiln-standin-provision-{os.getpid()}"
    try:
        docker(engine, "run", "--name", name, f"--network={network}", f"--platform={docker_platform(arch)}", base,
               "/bin/bash", "-c", script, log=log)
        _commit(engine, name, image, changes, log)
        out = docker(engine, "logs", name, capture=True)
    finally:
        subprocess.run([engine.docker, "rm", "-f", name], capture_output=True)
    return out


def ensure_standin(engine: Engine, arch: str | None = None, log: Path | None = None) -> StandinImages:
    """The stand-in runtime and build images for `arch` (default: this machine's), built if missing."""
    arch = arch or platform.machine()
    recipe = _recipe()
    debian_arch = recipe["debian_arch"]
    assert isinstance(debian_arch, dict)
    if arch not in debian_arch:
        raise ContainerError(f"no stand-in recipe for {arch} (data/containers.json standin.debian_arch)")
    ensure_emulation(arch)
    pythons, extra, apt_packages = image_pythons(arch)
    key = inputs_digest(arch, pythons, [*extra, *apt_packages])
    runtime, build = image_names(arch, key)
    result = StandinImages(runtime=runtime, build=build, glibc=str(recipe["glibc"]),
                           manylinux_tag=str(recipe["manylinux_tag"]), suite=str(recipe["suite"]),
                           tool_python=f"/opt/python/{pythons[0].cp}-{pythons[0].cp}/bin/python")
    if image_exists(engine, runtime) and image_exists(engine, build):
        print(f"containers: {result.describe()}: {runtime} and {build} (cached)", flush=True)
        return result
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    log = log or STATE_DIR / f"standin-{key}.log"
    print(f"containers: building the {result.describe()} (log {log})", flush=True)
    if not image_exists(engine, runtime):
        _build_runtime(engine, arch, str(debian_arch[arch]), pythons, extra, apt_packages, key, runtime, log)
    glibc = docker(engine, "run", "--rm", "--network=none", f"--platform={docker_platform(arch)}", runtime,
                   "getconf", "GNU_LIBC_VERSION", capture=True).split()[-1]
    if glibc != result.glibc:
        raise ContainerError(f"the stand-in has glibc {glibc}, data/containers.json says {result.glibc}")
    packages = " ".join(shlex.quote(str(p)) for p in recipe["build_packages"])  # type: ignore[attr-defined]
    script = ("set -euo pipefail; export DEBIAN_FRONTEND=noninteractive; apt-get update -qq; "
              f"apt-get install -y -qq --no-install-recommends {packages} >/dev/null; "
              "rm -rf /var/lib/apt/lists/*; gcc --version | head -n 1")
    _run_and_commit(engine, runtime, build, script, "host",
                    [*_labels("build", key), 'CMD ["/bin/bash"]'], log, arch)
    print(f"containers: built {runtime} and {build}", flush=True)
    stale = [ref for kind in ("runtime", "build")
             for ref in prune_tags(engine, runtime.split(":")[0], {runtime, build}, tag_prefix=f"{kind}-{arch}-")]
    if stale:
        print(f"containers: removed stand-in images of earlier inputs: {', '.join(stale)}", flush=True)
    return result


def _build_runtime(engine: Engine, arch: str, debian_arch: str, pythons: list[HostPython], extra: list[str],
                   apt_packages: list[str], key: str, image: str, log: Path) -> None:
    recipe = _recipe()
    if shutil.which("debootstrap") is None:
        if os.geteuid() != 0:
            raise ContainerError("debootstrap is missing and this is not root: apt-get install debootstrap")
        for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "debootstrap"]):
            subprocess.run(cmd, check=True, capture_output=True,
                           env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    packages = sorted({*recipe["runtime_packages"], *extra})  # type: ignore[misc]
    with tempfile.TemporaryDirectory(dir=STATE_DIR, prefix="standin-root-") as tmp:
        root = Path(tmp) / "root"
        cmd = ["debootstrap", "--variant=minbase", f"--arch={debian_arch}", f"--include={','.join(packages)}",
               str(recipe["suite"]), str(root), str(recipe["mirror"])]
        with log.open("a") as fh:
            fh.write(f"$ {' '.join(cmd)}\n")
            fh.flush()
            proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT)
        if proc.returncode != 0:
            raise ContainerError(f"debootstrap failed (exit {proc.returncode}); see {log}")
        for py in pythons:
            if py.copied:
                _copy_python(py, root)
        for ca in _host_ca_files():
            dest = root / "usr/local/share/ca-certificates" / ca.relative_to(HOST_CA_DIR)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ca, dest)
        shutil.rmtree(root / "var/cache/apt/archives", ignore_errors=True)
        raw = f"{image}-rootfs"
        tar = subprocess.Popen(["tar", "-C", str(root), "--numeric-owner", "-cf", "-", "."], stdout=subprocess.PIPE)
        assert tar.stdout is not None
        try:
            docker(engine, "import", "-", raw, log=log, stdin=tar.stdout.fileno())
        finally:
            tar.stdout.close()
            tar.wait()
        if tar.returncode != 0:
            raise ContainerError(f"packing the stand-in root failed (tar exit {tar.returncode})")
        set_image_architecture(engine, raw, arch, log)
    try:
        script = _provision_script(pythons)
        if apt_packages:
            script = ("set -euo pipefail; export DEBIAN_FRONTEND=noninteractive; apt-get update -qq; "
                      f"apt-get install -y -qq --no-install-recommends {' '.join(map(shlex.quote, apt_packages))}"
                      " >/dev/null; rm -rf /var/lib/apt/lists/*\n" + script)
        _run_and_commit(engine, raw, image, script, "host" if apt_packages else "none",
                        [*_labels("runtime", key), *_ENV, 'CMD ["/bin/bash"]'], log, arch)
    finally:
        subprocess.run([engine.docker, "rmi", raw], capture_output=True)
