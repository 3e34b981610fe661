"""Helpers for the import-preflight and doctor scenarios: real venvs, wheels and expected messages.

Each scenario venv is tiny: created without pip, it sees a real torch through a
``.pth`` file that points at a shared torch install's site-packages (a fresh
environment with the real torch, without reinstalling GBs of CUDA wheels), and
gets one opkiln wheel installed with ``pip install --no-deps`` (the metadata pin
would otherwise refuse the mismatched ones, which is exactly the user mistake
under test). The wheel supplies the compiled ``_C`` and its build info; the
package's ``__init__``/``__main__`` and kiln's import guard (src/kiln_tool/guard,
as ``opkiln/_kiln/``) are then copied from this checkout, so a cached wheel in
dist/ or tests/_artifacts/ never tests stale Python code.

Venvs are created once per session under tests/_artifacts/preflight/.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "tests" / "_artifacts"
WORK = ARTIFACTS / "preflight"
CU130_VENV = REPO / ".venvs" / "torch2.14-cu130-py3.11"
TORCH_213 = "2.13.0"
# The package's own files that use the guard, and the guard; everything else (ops.py, _C, build info) comes from
# the wheel. The guard files of wheels built before it moved (opkiln/_preflight.py, ...) are removed.
CHECKOUT_FILES = ("__init__.py", "__main__.py")
GUARD = REPO / "src" / "kiln_tool" / "guard"
OLD_GUARD_FILES = ("_loader.py", "_preflight.py", "_doctor.py", "_build_info.py")
DEFAULT_INDEX = "https://opkiln.github.io/wheels"


def site_packages(venv: Path) -> Path:
    return venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


@dataclass(frozen=True)
class Venv:
    root: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def site(self) -> Path:
        return site_packages(self.root)

    @property
    def package(self) -> Path:
        return self.site / "opkiln"

    def build_info(self) -> dict:
        return json.loads((self.package / "_build_info.json").read_text())

    def run(self, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
            timeout: float = 180) -> subprocess.CompletedProcess[str]:
        full_env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("OPKILN_", "PYTHON")) and k not in ("LD_PRELOAD", "LD_LIBRARY_PATH")}
        full_env.update(env or {})
        return subprocess.run([str(self.python), *args], capture_output=True, text=True, env=full_env,
                              cwd=str(cwd or WORK), timeout=timeout)


def shared_torch213_site() -> Path:
    """site-packages of a venv holding only the real torch 2.13.0 CPU (installed once, then reused)."""
    base = WORK / "base-torch2.13"
    marker = base / ".ready"
    WORK.mkdir(parents=True, exist_ok=True)
    # make test runs tests/preflight and tests/guard in two pytest processes at once: one makes it, the other waits.
    with (WORK / ".base-torch2.13.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not marker.exists():
            if base.exists():
                shutil.rmtree(base)
            subprocess.run([sys.executable, "-m", "venv", str(base)], check=True)
            subprocess.run([str(base / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                            f"torch=={TORCH_213}"], check=True, timeout=900)
            marker.write_text(TORCH_213)
    return site_packages(base)


def fresh_venv(root: Path, torch_site: Path) -> Venv:
    if root.exists():
        shutil.rmtree(root)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    venv = Venv(root)
    (venv.site / "_opkiln_test_torch.pth").write_text(f"{torch_site}\n")
    return venv


def install_wheel(venv: Venv, wheel: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv.python), "install", "--no-deps",
                    "--no-compile", "--disable-pip-version-check", "-q", str(wheel)], check=True)
    copy_checkout_guard(venv.package, REPO / "python" / "opkiln")


def copy_checkout_guard(package: Path, sources: Path | None = None) -> None:
    """This checkout's import guard into an installed ``package`` (as ``_kiln/``), and the package's own
    ``CHECKOUT_FILES`` from ``sources`` when given."""
    for name in CHECKOUT_FILES if sources else ():
        shutil.copy2(sources / name, package / name)
    for name in OLD_GUARD_FILES:
        (package / name).unlink(missing_ok=True)
    guard = package / "_kiln"
    if guard.exists():
        shutil.rmtree(guard)
    guard.mkdir()
    for source in sorted(GUARD.glob("*.py")):
        shutil.copy2(source, guard / source.name)


def extract_member(wheel: Path, suffix: str, dest: Path) -> Path:
    """Unpack the one wheel member whose name ends with ``suffix`` (e.g. the _C library) into ``dest``."""
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.startswith("opkiln/_C.") and n.endswith(suffix)]
        dest.mkdir(parents=True, exist_ok=True)
        target = dest / Path(name).name
        target.write_bytes(zf.read(name))
    return target


def index_page(cuda_tag: str, torch_mm: str, base: str = DEFAULT_INDEX) -> str:
    return f"{base}/{cuda_tag}/torch{torch_mm}/index.html"


def install_command(cuda_tag: str, torch_mm: str, base: str = DEFAULT_INDEX) -> str:
    return f"pip install --force-reinstall --no-deps opkiln -f {index_page(cuda_tag, torch_mm, base)}"


def assert_clean_failure(proc: subprocess.CompletedProcess[str]) -> str:
    """A failed import that exits normally with our error, never a crash or a raw loader message.

    Returns the output with whitespace collapsed.
    """
    out = proc.stdout + proc.stderr
    assert proc.returncode >= 0, f"crashed with signal {-proc.returncode}:\n{out}"
    assert proc.returncode != 0, out
    for raw in ("undefined symbol", "cannot open shared object file", "does not exist", "_ZN3c10",
                "no kernel image is available"):
        assert raw not in out, f"raw loader error leaked ({raw!r}):\n{out}"
    assert "OpkilnEnvironmentError" in out, out
    return " ".join(out.split())  # the message wraps long lines for the terminal
