"""The audit's result: per artifact, per shared library, a list of checks with a stable id."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

REPORT_SCHEMA = 1

# Every check id, in the order they are reported.
CHECK_IDS: tuple[str, ...] = (
    "elf-valid", "textrel", "exec-stack", "exports", "rpath", "build-paths", "undefined-symbols",
    "symbol-versions", "cxx11-abi", "cuda-sass", "cuda-ptx", "registration", "wheel-tag", "record",
)


@dataclass(frozen=True)
class CheckResult:
    """One check on one library (or on the whole wheel). `detail` says what and where; `fix` how to fix it."""

    id: str
    ok: bool
    detail: str
    fix: str = ""

    def __post_init__(self) -> None:
        if self.id not in CHECK_IDS:
            raise ValueError(f"unknown check id {self.id!r}")

    def to_json(self) -> dict[str, Any]:
        detail = self.detail if self.ok or not self.fix else f"{self.detail} Fix: {self.fix}"
        return {"id": self.id, "ok": self.ok, "detail": detail, "fix": self.fix or None}


def passed(check_id: str, detail: str) -> CheckResult:
    return CheckResult(check_id, True, detail)


def failed(check_id: str, detail: str, fix: str) -> CheckResult:
    return CheckResult(check_id, False, detail, fix)


@dataclass
class LibraryReport:
    path: str  # inside the wheel, or the file's path for a loose library
    checks: list[CheckResult] = field(default_factory=list)
    cuda_manifest: dict[str, list[str]] | None = None

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "ok": self.ok, "cuda_manifest": self.cuda_manifest,
                "checks": [c.to_json() for c in self.checks]}


@dataclass
class ArtifactReport:
    path: str
    kind: str  # "wheel" or "library"
    checks: list[CheckResult] = field(default_factory=list)  # checks of the artifact as a whole
    libraries: list[LibraryReport] = field(default_factory=list)
    target: dict[str, Any] = field(default_factory=dict)  # torch, policy, archs the audit used

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks) and all(lib.ok for lib in self.libraries)

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "ok": self.ok, "target": self.target,
                "checks": [c.to_json() for c in self.checks], "libraries": [lib.to_json() for lib in self.libraries]}

    def rows(self) -> list[tuple[str, CheckResult]]:
        rows = [("(wheel)" if self.kind == "wheel" else "(file)", c) for c in self.checks]
        rows += [(lib.path, c) for lib in self.libraries for c in lib.checks]
        return rows


@dataclass
class AuditReport:
    artifacts: list[ArtifactReport] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(a.ok for a in self.artifacts)

    def failures(self) -> list[tuple[str, str, CheckResult]]:
        return [(a.path, where, c) for a in self.artifacts for where, c in a.rows() if not c.ok]

    def to_json(self) -> dict[str, Any]:
        return {"schema": REPORT_SCHEMA, "ok": self.ok, "check_ids": list(CHECK_IDS),
                "artifacts": [a.to_json() for a in self.artifacts]}

    def render_text(self) -> str:
        from .render import render_text

        return render_text(self)
