"""Issue 43, class 4: the distributed check trusts no answer. Every answer is a versioned, schema-checked,
size-bounded record about the rank that sent it; a bad one becomes a row naming that rank, never a crash, a hang
or a false agreement. Answers are generated with hypothesis (from a valid one, fields replaced by anything); the
real cases run a hostile rank in a torchrun job on 127.0.0.1 (hostile_rank.py), and two copies of the check in
one job."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guard.ranks_support import REPO, TORCH213, Host, run_job, table
from kiln_tool.guard import ranks

HERE = Path(__file__).resolve().parent


def _valid(rank: int = 0, **fields: Any) -> dict[str, Any]:
    answer = {"protocol": ranks.PROTOCOL, "rank": rank, "host": "node-a", "package": "pkg", "python": "3.11.2",
              "torch": "2.13.0+cpu", "cuda": None, "present": True, "location": "/site/pkg", "project": "pkg",
              "version": "1.0+pt213cpu", "build": "a" * 64, "build_from": "RECORD", "built_torch": "2.13.0+cpu",
              "cuda_tag": "cpu", "index_url": "https://wheels.example", "import_error": None, "ops": 2,
              "ops_missing": [], "changed": [], "gpu": None, "gpu_ok": None, "gpu_problem": None, "error": None,
              "probe_s": 0.1}
    answer.update(fields)
    return answer


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                  max_size=3), max_leaves=8)


@st.composite
def hostile_payloads(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["field", "rank", "protocol", "json", "bytes", "control", "huge", "form"]))
    if kind == "bytes":
        return draw(st.binary(max_size=200))
    if kind == "json":
        return json.dumps(draw(JSON)).encode()
    answer = _valid(rank=1)
    if kind == "field":
        field = draw(st.sampled_from(sorted(ranks.ANSWER_FIELDS)))
        kind_, limit = ranks.ANSWER_FIELDS[field]
        answer[field] = draw(JSON.filter(lambda v: not ranks._field_ok(kind_, limit, v)))
    elif kind == "rank":
        answer["rank"] = draw(st.one_of(st.integers().filter(lambda r: r != 1), st.text(), st.none()))
    elif kind == "protocol":
        answer["protocol"] = draw(st.one_of(st.integers().filter(lambda p: p != ranks.PROTOCOL), st.text()))
    elif kind == "control":
        field = draw(st.sampled_from(["host", "version", "torch", "import_error", "error", "gpu"]))
        answer[field] = draw(st.text(max_size=10)) + draw(st.sampled_from(["\n", "\x1b[2J", "\r", "\u202e", "\x00"]))
    elif kind == "huge":
        answer["host"] = "h" * draw(st.integers(256, 200_000))
    else:
        field, bad = draw(st.sampled_from([("project", "pkg; rm -rf ~"), ("version", "1.0 && id"),
                                           ("index_url", "https://x/$(id) y"), ("torch", "2.13`id`"),
                                           ("build", "zz"), ("cuda_tag", "cu13;id")]))
        answer[field] = bad
    return json.dumps(answer).encode()


@settings(max_examples=300, deadline=None)
@given(hostile_payloads())
def test_a_hostile_answer_is_a_row_naming_its_rank(payload: bytes) -> None:
    read = ranks.read_answer(payload, 1)
    assert read.get("refused"), f"accepted: {payload[:200]!r}"
    good = ranks.read_answer(json.dumps(_valid(0)), 0)
    ok, report = ranks.verdict([good, read], "pkg")
    assert not ok
    rows = table("kiln ranks: rank 0 stops: " + report)
    assert 1 in rows and "its answer is refused" in rows[1].text and "fix: " in rows[1].text
    assert all(line.isprintable() and len(line) < 1200 for line in report.splitlines()), report
    for line in report.splitlines():
        if "fix: " in line:
            shlex.split(line.split("fix: ", 1)[1].split("; then ", 1)[-1])


def test_one_rank_answering_for_another_is_never_agreement() -> None:
    good = _valid(0)
    read = ranks.read_answer(json.dumps(good), 1)
    assert read["refused"] == "it answered as rank 0, under the key of rank 1"
    ok, report = ranks.verdict([ranks.read_answer(json.dumps(good), 0), read], "pkg")
    assert not ok and "1 of 2 ranks differ" in report


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=30), st.text(max_size=30))
def test_fixes_are_one_command_whatever_the_reference_holds(version: str, url: str) -> None:
    """A reference answer's values reach the fixes only through read_answer; what passes gives one command."""
    ref = ranks.read_answer(json.dumps(_valid(0, version=version or None, index_url=url or None)), 0)
    if ref.get("refused"):
        return
    other = _valid(1, build="b" * 64)
    ok, report = ranks.verdict([ref, ranks.read_answer(json.dumps(other), 1)], "pkg")
    assert not ok
    fix = next(line.split("fix: ", 1)[1] for line in report.splitlines() if "fix: " in line)
    args = shlex.split(fix)
    if not version:
        assert args == ["pip", "install", "pkg"]
        return
    assert args[:5] == ["pip", "install", "--force-reinstall", "--no-deps", f"pkg=={version}"]
    assert args[5:] in ([], ["-f", f"{url.rstrip('/')}/cpu/torch2.13/index.html"])


@pytest.mark.parametrize("value", ["inf", "nan", "-1", "0", "1e308", "-inf"])
def test_an_unusable_timeout_is_bad_usage(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert ranks.main("json", [f"--timeout={value}"]) == 2
    err = capsys.readouterr().err
    assert "--timeout: the timeout must be a number of seconds" in err and err.count("\n") == 1
    with pytest.raises(ranks.RanksUsage):
        ranks.check_ranks("json", timeout=float(value))


def test_an_unsafe_index_override_is_refused_where_it_enters(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PKG_INDEX_URL", "https://x.example/$(id)\nrm -rf ~")
    with pytest.raises(ranks.RanksUsage, match="PKG_INDEX_URL is not one http"):
        ranks.check_ranks("pkg", timeout=5)


# -- real torchrun jobs ----------------------------------------------------------------------------------------------

def _hosts(sites: list[Path | None]) -> list[Host]:
    src = REPO / "src"
    return [Host(f"h{i}", TORCH213, site if site is not None else src) for i, site in enumerate(sites)]


@pytest.mark.slow  # one torchrun job of 2 ranks per mode: about 8 s each
@pytest.mark.parametrize(("mode", "why"), [
    ("forged", "it answered as rank 0, under the key of rank 1"),
    ("control", "malformed fields: host"),
    ("huge", "more than 65536"),
    ("protocol", "speaks protocol 1, this check speaks 2"),
    ("confused", "malformed fields: ops, ops_missing"),
    ("not-an-object", "a JSON list, not an object"),
])
def test_a_hostile_rank_in_a_real_job(tmp_path: Path, mode: str, why: str) -> None:
    if not TORCH213.exists():
        pytest.skip(f"{TORCH213} is missing")
    report = tmp_path / "report.json"
    worker = [str(HERE / "hostile_rank.py"), mode, str(report)]
    outcomes = run_job(_hosts([None, None]), worker, timeout=90)
    rank0 = outcomes[0]
    assert rank0.returncode == 1, rank0.output
    assert 'guard/ranks.py", line' not in rank0.output, "the check never crashes (torchrun's own report of a " \
        "worker's exit 1 is not the check's)"
    rows = table(rank0.output)
    assert set(rows) == {0, 1} and "its answer is refused: " in rows[1].text and why in rows[1].text, rank0.output
    doc = json.loads(report.read_text())
    assert doc["ok"] is False and doc["answers"][1]["refused"]
    assert "\x1b" not in rank0.output and "evil" not in rank0.output


@pytest.mark.slow  # one torchrun job of 2 ranks, two checks each: about 10 s
def test_two_copies_of_the_check_in_one_job_keep_their_answers_apart(tmp_path: Path) -> None:
    """The shipped check, then the standalone script's copy: rank 1 removed its package in between, so the second
    check must fail on rank 1's new answer, not agree on the first check's."""
    script = tmp_path / "kiln_ranks.py"
    subprocess.run([sys.executable, str(REPO / "scripts" / "kiln"), "guard", "ranks-script", "kr_pkg", "-o",
                    str(script)], check=True, capture_output=True)
    sites = []
    for i in range(2):
        site = tmp_path / f"site{i}"
        (site / "kr_pkg").mkdir(parents=True)
        (site / "kr_pkg" / "__init__.py").write_text("")
        (site / "kiln_tool").symlink_to(REPO / "src" / "kiln_tool")
        sites.append(site)
    outcomes = run_job(_hosts(sites), [str(HERE / "hostile_rank.py"), "twice", str(tmp_path / "r.json"),
                                       str(script)], timeout=90)
    for outcome in outcomes:
        assert "RESULT 0 1" in outcome.output, outcome.output
    assert "kr_pkg is not installed" in outcomes[0].output
