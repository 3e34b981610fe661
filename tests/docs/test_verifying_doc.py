"""docs/verifying.md and the verify section of docs/reusable-workflow.md: every kiln command they show parses
with kiln's own parser (the doctor's with the guard's), and the key-mode walkthrough runs as written: its key
commands make the key and the allowed-signers file, an index signed with that key is served on 127.0.0.1, and
its `kiln verify` lines (the index URL and wheel name swapped for the served ones) pass."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from index.storage_servers import http_server
from index.synthetic_wheels import make_wheel
from kiln_tool.cli import build_parser
from kiln_tool.guard.__main__ import build_parser as guard_parser
from signing.signed_sites import release
from support.doc_commands import doc_commands
from trust.kiln_runs import kiln

REPO = Path(__file__).resolve().parents[2]
VERIFYING = REPO / "docs" / "verifying.md"
WORKFLOW_DOC = REPO / "docs" / "reusable-workflow.md"
DOC_URL = "https://wheels.example.org/opkiln/"


def _kiln_lines(doc: Path) -> list[str]:
    """Every line of a fenced block that runs kiln or the guard's doctor."""
    text = doc.read_text(encoding="utf-8")
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```", text, re.M | re.S)
    return [line.strip() for block in blocks for line in block.splitlines()
            if line.strip().startswith(("kiln ", "python -m "))]


@pytest.mark.parametrize("doc", [VERIFYING, WORKFLOW_DOC], ids=lambda p: p.name)
def test_every_command_shown_parses(doc: Path) -> None:
    lines = _kiln_lines(doc)
    assert any(" verify " in f" {line} " or "--verify" in line for line in lines), f"{doc.name} shows no verify"
    for line in lines:
        words = shlex.split(line)
        try:
            if words[0] == "kiln":
                build_parser(words[1]).parse_args(words[1:])
            else:
                assert words[:2] == ["python", "-m"] and words[2].endswith("._kiln"), line
                guard_parser().parse_args(words[3:])
        except SystemExit:
            pytest.fail(f"{doc.name}: {line!r} does not parse")


def test_the_workflow_doc_names_the_identity_the_workflow_signs_as() -> None:
    text = WORKFLOW_DOC.read_text(encoding="utf-8")
    assert "--repository OWNER/NAME --workflow .github/workflows/wheels.yml" in text
    assert "--sign-keyless" in (REPO / ".github" / "workflows" / "kiln.yml").read_text()


def test_the_key_mode_walkthrough_runs(tmp_path: Path) -> None:
    commands = [c.text for c in doc_commands(VERIFYING)]
    setup = [c for c in commands if c.startswith(("ssh-keygen", "echo"))]
    assert len(setup) == 2
    for command in setup:
        subprocess.run(["bash", "-euo", "pipefail", "-c", command], cwd=tmp_path, check=True, timeout=60)
    wheel = make_wheel(tmp_path / "dist")
    release(tmp_path / "www" / "opkiln", tmp_path / "dist", tmp_path / "release-key")
    verifies = [c for c in commands if c.startswith("kiln verify") and "--allowed-signers" in c
                and "--installed" not in c]
    assert len(verifies) == 2
    with http_server(tmp_path / "www") as http:
        for command in verifies:
            words = [w.replace(DOC_URL, f"{http.url}opkiln/") for w in shlex.split(command)]
            words = [str(wheel) if w.endswith(".whl") else w for w in words]
            words = [str(tmp_path / w) if w == "allowed_signers" else w for w in words]
            run = kiln(*words[1:], "--no-state")
            assert run.code == 0, f"{command}\n{run.stdout}{run.stderr}"
            assert "FAIL" not in run.stdout
