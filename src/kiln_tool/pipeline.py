"""Build -> repair -> audit -> dist/, for one combination at a time.

A wheel reaches dist/ only when it was built, repaired and passed the audit;
it is moved there atomically, so dist/ never holds a partial or failing wheel.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .build_env import REPO_ROOT, ensure_build_env
from .epoch import source_date_epoch
from .matrix_data import BuildSpec
from .repair import repair_wheel


class PipelineError(RuntimeError):
    def __init__(self, step: str, message: str) -> None:
        super().__init__(f"{step}: {message}")
        self.step = step


@dataclass
class BuildResult:
    spec: BuildSpec
    wheel: Path | None = None
    size: int = 0
    build_seconds: float = 0.0
    verdict: str = "not built"
    detail: str = ""
    log: Path | None = None
    steps: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.wheel is not None


def build_environment(spec: BuildSpec, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "KILN_VARIANT": spec.variant_env,
        "SOURCE_DATE_EPOCH": source_date_epoch(),
        "CMAKE_BUILD_PARALLEL_LEVEL": env.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2)),
        "PYTHONHASHSEED": "0",
    })
    ccache = shutil.which("ccache")
    if ccache and env.get("KILN_CCACHE", "1") != "0":
        for lang in ("C", "CXX", "CUDA"):
            env.setdefault(f"CMAKE_{lang}_COMPILER_LAUNCHER", ccache)
        # Builds of the same sources from different directories share cache hits.
        env.setdefault("CCACHE_BASEDIR", str(REPO_ROOT))
        env.setdefault("CCACHE_NOHASHDIR", "1")
    env.update(extra or {})
    return env


def build_wheel(python: Path, spec: BuildSpec, out_dir: Path, log: Path, build_dir: Path,
                env_extra: dict[str, str] | None = None, source: Path = REPO_ROOT) -> Path:
    cmd = [str(python), "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-cache-dir", "-v",
           "-w", str(out_dir), "-C", f"build-dir={build_dir}", str(source)]
    with log.open("a") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        fh.flush()
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=build_environment(spec, env_extra),
                              cwd=source)
    if proc.returncode != 0:
        raise PipelineError("build", f"pip wheel failed (exit {proc.returncode}); last lines of {log}:\n"
                            + tail(log))
    wheels = sorted(out_dir.glob("opkiln-*.whl"))
    if len(wheels) != 1:
        raise PipelineError("build", f"expected exactly one wheel, got {[w.name for w in wheels]}")
    return wheels[0]


def tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def audit(wheel: Path, torch_lib: Path | None) -> tuple[bool, str]:
    try:
        from .audit import AuditOptions, audit_paths
    except ImportError:
        return False, "kiln audit is not available in this checkout"
    report = audit_paths([wheel], AuditOptions(torch_lib=torch_lib, cuda_archs=None, policy="manylinux_2_28"))
    return bool(report.ok), report.render_text()


def venv_torch_version(venv: Path) -> str | None:
    """Public version of the torch installed in `venv` (read from disk, not imported)."""
    from .torch_probe import TorchNotFound, find_torch

    site = sorted((venv / "lib").glob("python3*/site-packages"))
    if not site:
        return None
    try:
        return find_torch([str(site[0])]).public_version
    except TorchNotFound:
        return None


def place(wheel: Path, dist: Path) -> Path:
    """Move into dist/ atomically (same filesystem rename)."""
    dist.mkdir(parents=True, exist_ok=True)
    staged = dist / f".{wheel.name}.partial"
    shutil.copyfile(wheel, staged)
    target = dist / wheel.name
    staged.replace(target)
    return target


def run_pipeline(spec: BuildSpec, dist: Path, logs: Path,
                 progress: Callable[[BuildSpec, str], None] | None = None,
                 install_into: Path | None = None) -> BuildResult:
    result = BuildResult(spec=spec, log=logs / f"{spec.name}.log")
    logs.mkdir(parents=True, exist_ok=True)
    assert result.log is not None
    result.log.write_text("")

    def step(name: str) -> None:
        result.steps.append(name)
        if progress is not None:
            progress(spec, name)

    started = time.perf_counter()
    try:
        step("venv")
        python = ensure_build_env(spec, result.log)
        with tempfile.TemporaryDirectory(prefix=f"kiln-{spec.name}-") as tmp:
            step("build")
            built = build_wheel(python, spec, Path(tmp) / "built", result.log, REPO_ROOT / "build" / spec.name)
            step("repair")
            repaired = repair_wheel(built, Path(tmp) / "repaired")
            step("audit")
            torch_lib = python.parent.parent / "lib" / f"python{spec.python}" / "site-packages" / "torch" / "lib"
            ok, report = audit(repaired, torch_lib if torch_lib.is_dir() else None)
            result.build_seconds = time.perf_counter() - started
            if not ok:
                result.verdict = "audit failed"
                result.detail = report
                return result
            step("place")
            result.wheel = place(repaired, dist)
            result.size = result.wheel.stat().st_size
            result.verdict = "passed"
            result.detail = report
        if install_into is not None and venv_torch_version(install_into) == spec.torch:
            step("install")
            pip = [str(install_into / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-deps",
                   "--force-reinstall", str(result.wheel)]
            proc = subprocess.run(pip, capture_output=True, text=True)
            if proc.returncode != 0:
                raise PipelineError("install", proc.stderr.strip())
    except Exception as exc:
        result.build_seconds = time.perf_counter() - started
        result.verdict = f"failed at {result.steps[-1] if result.steps else 'start'}"
        result.detail = str(exc)
    return result
