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


SEVERITIES = ("error", "warning")


@dataclass(frozen=True)
class CheckResult:
    """One check on one library (or on the whole wheel). `detail` says what and where; `fix` how to fix it.

    A failed result names its `finding` (a kind within the check, "" for the check's main one);
    its `severity` comes from the policy's "severity" table (data/audit_policy/common.json):
    errors fail the audit (exit 1), warnings are reported only.
    """

    id: str
    ok: bool
    detail: str
    fix: str = ""
    finding: str = ""
    severity: str = "error"

    def __post_init__(self) -> None:
        if self.id not in CHECK_IDS:
            raise ValueError(f"unknown check id {self.id!r}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"unknown severity {self.severity!r}")

    @property
    def is_error(self) -> bool:
        return not self.ok and self.severity == "error"

    @property
    def is_warning(self) -> bool:
        return not self.ok and self.severity == "warning"

    @property
    def key(self) -> str:
        """'check' or 'check:finding': what the policy's severity table is keyed by."""
        return f"{self.id}:{self.finding}" if self.finding else self.id

    def to_json(self) -> dict[str, Any]:
        detail = self.detail if self.ok or not self.fix else f"{self.detail} Fix: {self.fix}"
        return {"id": self.id, "ok": self.ok, "severity": None if self.ok else self.severity,
                "finding": None if self.ok else (self.finding or None), "detail": detail, "fix": self.fix or None}


def passed(check_id: str, detail: str) -> CheckResult:
    return CheckResult(check_id, True, detail)


def failed(check_id: str, detail: str, fix: str, finding: str = "") -> CheckResult:
    return CheckResult(check_id, False, detail, fix, finding)


@dataclass
class LibraryReport:
    path: str  # inside the wheel, or the file's path for a loose library
    checks: list[CheckResult] = field(default_factory=list)
    cuda_manifest: dict[str, list[str]] | None = None
    gpu: dict[str, Any] | None = None  # with --gpu: whether that GPU can run the device code, and why
    copies: list[str] = field(default_factory=list)  # byte-identical copies (x.so, x.so.0 of x.so.0.6.0)

    @property
    def label(self) -> str:
        return f"{self.path} (also as {', '.join(self.copies)}: identical bytes)" if self.copies else self.path

    @property
    def ok(self) -> bool:
        return not any(c.is_error for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "ok": self.ok, "warnings": sum(c.is_warning for c in self.checks),
                "cuda_manifest": self.cuda_manifest, "gpu": self.gpu, "copies": list(self.copies),
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
        return not any(c.is_error for _, c in self.rows())

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "ok": self.ok,
                "warnings": sum(c.is_warning for _, c in self.rows()), "target": self.target,
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
        """No error (warnings do not fail an audit)."""
        return all(a.ok for a in self.artifacts)

    def failures(self) -> list[tuple[str, str, CheckResult]]:
        """Failed checks of every severity (errors and warnings)."""
        return [(a.path, where, c) for a in self.artifacts for where, c in a.rows() if not c.ok]

    def errors(self) -> list[tuple[str, str, CheckResult]]:
        return [f for f in self.failures() if f[2].is_error]

    def to_json(self) -> dict[str, Any]:
        return {"schema": REPORT_SCHEMA, "ok": self.ok, "errors": len(self.errors()),
                "warnings": len(self.failures()) - len(self.errors()), "check_ids": list(CHECK_IDS),
                "artifacts": [a.to_json() for a in self.artifacts]}

    def render_text(self, verbose: bool = False) -> str:
        from .render import render_text

        return render_text(self, verbose=verbose)
