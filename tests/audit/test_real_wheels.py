"""Real operator wheels from the registry, audited against recorded torch ABIs: every finding is in
tests/audit/corpus/expected.json (each verified once by hand, with the command that showed it),
and every expected finding is found. Wheels are cached outside the repo
($KILN_AUDIT_CORPUS, default ~/.cache/opkiln/audit-corpus); without the registry the test skips."""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kiln_tool.audit import AuditOptions, audit_paths
from kiln_tool.audit import target as target_module

EXPECTED = Path(__file__).resolve().parent / "corpus" / "expected.json"
CACHE = Path(os.environ.get("KILN_AUDIT_CORPUS", Path.home() / ".cache" / "opkiln" / "audit-corpus"))
WHEELS: list[dict[str, Any]] = json.loads(EXPECTED.read_text())["wheels"]


def fetch(entry: dict[str, Any]) -> Path:
    path = CACHE / entry["file"]
    if not path.is_file():
        CACHE.mkdir(parents=True, exist_ok=True)
        platforms = [arg for p in entry["platforms"] for arg in ("--platform", p)]
        fetched = subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
             entry["python"], *platforms, entry["requirement"], "-d", str(CACHE)],
            capture_output=True, text=True, timeout=900)
        if fetched.returncode != 0 or not path.is_file():
            pytest.skip(f"cannot download {entry['requirement']} ({entry['file']}): "
                        f"{(fetched.stderr or fetched.stdout).strip()[-300:]}")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert digest == entry["sha256"], f"{path}: sha256 {digest}, pinned {entry['sha256']}"
    return path


def _matches(expected: dict[str, Any], where: str, check_id: str, severity: str, finding: str, detail: str) -> bool:
    return (expected["check"] == check_id and expected["severity"] == severity
            and expected.get("finding", "") == finding and fnmatch.fnmatchcase(where, expected["library"])
            and all(part in " ".join(detail.split()) for part in expected["detail"]))


@pytest.mark.parametrize("entry", WHEELS, ids=[w["requirement"] for w in WHEELS])
def test_findings_are_exactly_the_verified_ones(entry: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    wheel = fetch(entry)
    # Only recorded torch ABIs: the result must not depend on which torch this machine has installed.
    monkeypatch.setattr(target_module, "candidate_lib_dirs", lambda: [])
    report = audit_paths([wheel], AuditOptions(torch_version=entry.get("torch")))
    (artifact,) = report.artifacts
    assert entry["target"] in str(artifact.target["torch"])
    actual = [(where, c.id, c.severity, c.finding, c.detail) for where, c in artifact.rows() if not c.ok]
    expected = entry["findings"]
    unexpected = [a for a in actual if not any(_matches(e, *a) for e in expected)]
    assert not unexpected, "findings not in expected.json (false positives, or new): " + json.dumps(
        [{"library": w, "check": i, "severity": s, "finding": f, "detail": d[:300]} for w, i, s, f, d in unexpected],
        indent=1)
    for e in expected:
        hits = {a[0] for a in actual if _matches(e, *a)}
        assert len(hits) == e.get("libraries", 1), (
            f"expected {e.get('libraries', 1)} librar(ies) matching {e['library']} with {e['check']} "
            f"{e.get('finding', '')} ({e['severity']}) {e['detail']}; found {sorted(hits)}")
    assert report.ok == (not any(e["severity"] == "error" for e in expected))
    # Kernel images exactly as cuobjdump lists them, per library with device code.
    manifests = {lib.path: lib.cuda_manifest for lib in artifact.libraries if lib.cuda_manifest is not None}
    assert manifests == entry["cuda_manifests"]


def test_kiln_index_refuses_real_third_party_wheels(tmp_path: Path) -> None:
    """The index publishes only wheels kiln built: real operator wheels from PyPI are refused by their project, with
    exit 2 and one line each, and no site is created (not a traceback, not a half-made site)."""
    from trust.kiln_runs import kiln

    dist = tmp_path / "dist"
    dist.mkdir()
    for entry in WHEELS:
        wheel = fetch(entry)
        try:  # the index refuses symlinks (a link may point outside DIST): a hard link, else a copy
            os.link(wheel, dist / wheel.name)
        except OSError:
            shutil.copy2(wheel, dist / wheel.name)
    run = kiln("index", dist, tmp_path / "site")
    assert run.code == 2, run.stdout + run.stderr
    for entry in WHEELS:
        assert f"{fetch(entry).name}: not a kiln wheel: project: " in run.stderr
    assert "Traceback" not in run.stderr
    assert not (tmp_path / "site").exists()
