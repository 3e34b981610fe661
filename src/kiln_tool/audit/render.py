"""Human output of an audit: per artifact, errors then warnings, each with its fix; passes folded into
one line per library unless verbose; long lines wrapped."""

from __future__ import annotations

import textwrap

from .report import CHECK_IDS, ArtifactReport, AuditReport, CheckResult

_WIDTH = 110
_ORDER = {cid: n for n, cid in enumerate(CHECK_IDS)}


def _wrap(text: str, indent: str, first: str | None = None) -> list[str]:
    return textwrap.wrap(text, width=_WIDTH, initial_indent=first if first is not None else indent,
                         subsequent_indent=indent, break_long_words=False, break_on_hyphens=False) or [indent]


def _status(artifact: ArtifactReport) -> str:
    rows = artifact.rows()
    errors = sum(c.is_error for _, c in rows)
    warnings = sum(c.is_warning for _, c in rows)
    head = "PASS" if errors == 0 else f"FAIL ({errors} error{'s' if errors != 1 else ''})"
    return head + (f", {warnings} warning{'s' if warnings != 1 else ''}" if warnings else "")


def _finding(where: str, check: CheckResult, fixes_shown: set[str]) -> list[str]:
    label = "ERROR" if check.is_error else "warn"
    lines = [f"   {label:<5} {check.id:<18} {where}"]
    lines.extend(_wrap(check.detail, " " * 9))
    if check.fix and check.fix in fixes_shown:
        lines.append(" " * 9 + "fix: as above")
    elif check.fix:
        fixes_shown.add(check.fix)
        lines.extend(_wrap("fix: " + check.fix, " " * 9))
    return lines


def render_text(report: AuditReport, verbose: bool = False) -> str:
    lines: list[str] = []
    for artifact in report.artifacts:
        rows = artifact.rows()
        labels = {lib.path: lib.label for lib in artifact.libraries}
        rows = [(labels.get(where, where), check) for where, check in rows]
        lines.append(f"== {artifact.path}: {_status(artifact)}")
        for key, value in artifact.target.items():
            if value not in (None, "", []):
                lines.extend(_wrap(f"{key}: {value}", " " * 5, "   "))
        bad = sorted((r for r in rows if not r[1].ok),
                     key=lambda r: (not r[1].is_error, _ORDER[r[1].id], r[0]))
        fixes_shown: set[str] = set()  # one fix text, printed once per artifact
        for where, check in bad:
            lines.extend(_finding(where, check, fixes_shown))
        good = [(where, c) for where, c in rows if c.ok]
        if verbose:
            for where, check in sorted(good, key=lambda r: (_ORDER[r[1].id], r[0])):
                lines.append(f"   {'ok':<5} {check.id:<18} {where}")
                lines.extend(_wrap(check.detail, " " * 9))
        else:
            by_place: dict[str, list[str]] = {}
            for where, check in good:
                by_place.setdefault(where, []).append(check.id)
            for where, ids in by_place.items():
                lines.extend(_wrap(f"ok: {', '.join(sorted(set(ids), key=_ORDER.__getitem__))}", " " * 9,
                                   f"   {'ok':<5} {where}  "))
        for lib in artifact.libraries:
            if lib.cuda_manifest is not None:
                sass = ", ".join(lib.cuda_manifest["sass"]) or "none"
                ptx = ", ".join(lib.cuda_manifest["ptx"]) or "none"
                lines.extend(_wrap(f"CUDA arch manifest of {lib.path}: SASS {sass}; PTX {ptx}", " " * 5, "   "))
            if lib.gpu is not None:
                verdict = "runs" if lib.gpu["runs"] else "CANNOT run"
                lines.extend(_wrap(f"{lib.gpu['gpu']}: {lib.path} {verdict}: {lib.gpu['how']}", " " * 5, "   "))
        lines.append("")
    errors, failures = len(report.errors()), len(report.failures())
    lines.append(f"{len(report.artifacts)} artifact(s) audited: "
                 + ("no errors" if report.ok else f"{errors} error(s)")
                 + (f", {failures - errors} warning(s)" if failures > errors else "")
                 + ("" if verbose else " (passed checks folded; --verbose lists each)"))
    return "\n".join(lines) + "\n"
