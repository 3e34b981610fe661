"""Human output of an audit: a table per artifact, failures first, each failure with its fix."""

from __future__ import annotations

import textwrap

from .report import CHECK_IDS, AuditReport

_WIDTH = 110


def _wrap(text: str, indent: str) -> list[str]:
    return textwrap.wrap(text, width=_WIDTH, initial_indent=indent, subsequent_indent=indent,
                         break_long_words=False, break_on_hyphens=False) or [indent]


def render_text(report: AuditReport) -> str:
    lines: list[str] = []
    for artifact in report.artifacts:
        rows = artifact.rows()
        bad = [(where, c) for where, c in rows if not c.ok]
        good = [(where, c) for where, c in rows if c.ok]
        status = "PASS" if artifact.ok else f"FAIL ({len(bad)} failed check{'s' if len(bad) != 1 else ''})"
        lines.append(f"== {artifact.path}: {status}")
        target = artifact.target
        if target:
            lines.append("   " + "; ".join(f"{k}: {v}" for k, v in target.items() if v not in (None, "", [])))
        order = {cid: n for n, cid in enumerate(CHECK_IDS)}
        if rows:
            lines.append(f"   {'RESULT':<5} {'CHECK':<18} WHERE / DETAIL")
        for where, check in sorted(bad, key=lambda r: (order[r[1].id], r[0])) + \
                sorted(good, key=lambda r: (order[r[1].id], r[0])):
            lines.append(f"   {'FAIL' if not check.ok else 'ok':<5} {check.id:<18} {where}")
            lines.extend(_wrap(check.detail, " " * 9))
            if not check.ok and check.fix:
                lines.extend(_wrap("fix: " + check.fix, " " * 9))
        for lib in artifact.libraries:
            if lib.cuda_manifest is not None:
                sass = ", ".join(lib.cuda_manifest["sass"]) or "none"
                ptx = ", ".join(lib.cuda_manifest["ptx"]) or "none"
                lines.append(f"   CUDA arch manifest of {lib.path}: SASS {sass}; PTX {ptx}")
        lines.append("")
    total_bad = len(report.failures())
    lines.append(f"{len(report.artifacts)} artifact(s) audited: "
                 + ("all checks passed" if report.ok else f"{total_bad} check(s) failed"))
    return "\n".join(lines) + "\n"
