"""torch-kiln's own release (issue 42, item 9): release-kiln.yml on a kiln-v<version> tag builds the tool twice
and compares the bytes, checks the wheel against this checkout and runs it from a fresh venv
(tools/kiln_release_check.py, run here as the workflow runs it), attests it and publishes it by PyPI trusted
publishing. About 25 s (one venv with the tool installed)."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kiln_tool
from workflows.workflow_files import REPO, workflow

CHECK = REPO / "tools" / "kiln_release_check.py"
TAG = f"kiln-v{kiln_tool.__version__}"


def _check(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(CHECK), *map(str, args)], capture_output=True, text=True, timeout=300)


def test_the_workflow_runs_on_its_own_tag_and_publishes_by_trusted_publishing_after_the_checks() -> None:
    flow = workflow("release-kiln.yml")
    assert flow["on"] == {"push": {"tags": ["kiln-v[0-9]+.[0-9]+.[0-9]+*"]}}
    assert flow["permissions"] == {}
    jobs = flow["jobs"]
    build = "\n".join(step.get("run", "") for step in jobs["build"]["steps"])
    assert 'tools/kiln_release_check.py tag "$TAG"' in build and "tools/kiln_release_check.py wheel" in build
    assert build.count("make kiln-wheel") == 2 and "umask 077" in build and "cmp dist/kiln/" in build
    assert jobs["attest"]["needs"] == "build"
    assert any(s.get("uses", "").startswith("actions/attest-build-provenance@") for s in jobs["attest"]["steps"])
    publish = jobs["publish"]
    assert set(publish["needs"]) == {"build", "attest"}
    assert publish["permissions"] == {"id-token": "write"} and publish["environment"]["name"] == "pypi"
    (pypi,) = [s for s in publish["steps"] if s.get("uses", "").startswith("pypa/gh-action-pypi-publish@")]
    assert set(pypi["with"]) == {"packages-dir"}, "no password or token: trusted publishing only"
    assert "secrets." not in (REPO / ".github" / "workflows" / "release-kiln.yml").read_text()
    # An op release never publishes the tool: release.yml's tags are v*, not kiln-v*.
    assert workflow("release.yml")["on"]["push"]["tags"] == ["v[0-9]+.[0-9]+.[0-9]+*"]


def test_the_tag_must_name_the_tools_version() -> None:
    ok = _check("tag", TAG)
    assert ok.returncode == 0 and ok.stdout.strip().endswith(f"torch-kiln {kiln_tool.__version__}"), ok.stderr


@settings(max_examples=25, deadline=None)
@given(st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=30).filter(lambda t: t != TAG)
       | st.sampled_from([f"v{kiln_tool.__version__}", TAG + ".1", "kiln-v0.0.0", TAG.upper()]).filter(
           lambda t: t != TAG))
def test_any_other_tag_is_refused_in_one_line(tag: str) -> None:
    refused = _check("tag", tag)
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr
    assert f"its tag is {TAG}" in refused.stderr


def _rewritten(wheel: Path, out: Path, add: dict[str, bytes], record_lies: bool = False) -> Path:
    """`wheel` with `add` members added (listed in RECORD with their hashes, or a wrong hash if record_lies)."""
    target = out / wheel.name
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as dst:
        record_name = next(n for n in src.namelist() if n.endswith(".dist-info/RECORD"))
        record = src.read(record_name).decode()
        for name in src.namelist():
            if name != record_name:
                dst.writestr(name, src.read(name))
        for name, data in add.items():
            dst.writestr(name, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(b"other" if record_lies else data).digest())
            record += f"{name},sha256={digest.rstrip(b'=').decode()},{len(data)}\n"
        dst.writestr(record_name, record)
    return target


def test_the_wheel_check_passes_the_tools_wheel_and_refuses_any_other(tmp_path: Path) -> None:
    from support.kiln_dist import kiln_wheel

    wheel = kiln_wheel()
    stray = _check("wheel", _rewritten(wheel, _folder(tmp_path, "stray"), {"kiln_tool/stray.py": b"x = 1\n"}))
    assert stray.returncode == 1 and "extra ['kiln_tool/stray.py']" in stray.stderr, stray.stderr
    lying = _check("wheel", _rewritten(wheel, _folder(tmp_path, "lying"), {"kiln_tool/x.py": b""}, record_lies=True))
    assert lying.returncode == 1 and "kiln_tool/x.py does not match its RECORD hash" in lying.stderr, lying.stderr
    renamed = _folder(tmp_path, "renamed") / wheel.name.replace("py3-none-any", "cp311-cp311-linux_x86_64")
    renamed.write_bytes(wheel.read_bytes())
    assert _check("wheel", renamed).returncode == 1
    passed = _check("wheel", wheel)
    for _ in range(2):  # a checkout being edited meanwhile is not a failure of the check: take its wheel again
        if "is not this checkout's tool" not in passed.stderr:
            break
        passed = _check("wheel", kiln_wheel.__wrapped__())  # not the cached one: the tree as it is now
    assert passed.returncode == 0, passed.stdout + passed.stderr


def _folder(root: Path, name: str) -> Path:
    (root / name).mkdir()
    return root / name


@pytest.mark.parametrize("args", [[], ["tag"], ["publish", "x"], ["tag", "a", "b"]])
def test_a_wrong_call_exits_2(args: list[str]) -> None:
    assert _check(*args).returncode == 2
