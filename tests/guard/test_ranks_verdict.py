"""The distributed check's parts that need no job: the verdict over generated answers (the same on every rank,
whatever order they came in; every rank that differs named with a fix), the GPU arch rule, the build
identity (RECORD and the files agree), one rank's answer for packages that are missing or fail to import,
the timeout of a lone rank 0 whose peer never comes, and `kiln guard ranks-script`."""

from __future__ import annotations

import base64
import hashlib
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guard.ranks_support import REPO
from kiln_tool.guard import ranks

HEX = "0123456789abcdef"
answer_st = st.fixed_dictionaries({
    "present": st.booleans(),
    "version": st.sampled_from(["1.0+pt213cpu", "1.0+cpu", "1.1+pt213cpu"]),
    "build": st.sampled_from(["a" * 64, "b" * 64, "c" * 64]),
    "torch": st.sampled_from(["2.13.0+cpu", "2.14.1+cu130", "2.13.0+cpu", None]),
    "cuda": st.sampled_from([None, "13.0"]),
    "import_error": st.sampled_from([None, None, "ImportError: libc10_cuda.so: cannot open shared object file"]),
    "ops": st.just(3),
    "ops_missing": st.sampled_from([[], [], ["pkg::b"]]),
    "gpu": st.sampled_from([None, "sm_90 NVIDIA H200"]),
    "gpu_ok": st.sampled_from([None, True, False]),
    "gpu_problem": st.just("no code for sm_90 in this build (it has 8.0)"),
    "error": st.sampled_from([None, None, None, "OSError: boom"]),
    "host": st.sampled_from(["node-a", "node-b"]),
    "project": st.just("pkg"), "index_url": st.just("https://wheels.example"), "cuda_tag": st.just("cpu"),
    "built_torch": st.just("2.13.0+cpu"),
})


def _ranked(answers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**a, "rank": i} for i, a in enumerate(answers)]


@settings(max_examples=300, deadline=None)
@given(st.lists(answer_st, min_size=1, max_size=9), st.randoms(use_true_random=False))
def test_verdict(answers: list[dict[str, Any]], rnd: Any) -> None:
    answers = _ranked(answers)
    ok, report = ranks.verdict(answers, "pkg")
    shuffled = list(answers)
    rnd.shuffle(shuffled)
    assert ranks.verdict(shuffled, "pkg") == (ok, report), "every rank reaches the same verdict"
    keys = {(a["version"], a["build"], a["torch"], a["cuda"]) for a in answers}
    assert ok == (all(ranks.healthy(a) for a in answers) and len(keys) == 1)
    if ok:
        assert "\n" not in report and f"all {len(answers)} rank" in report
        return
    ref = ranks.reference_rank(answers)

    def key(b: dict[str, Any]) -> tuple[Any, ...]:
        return b["version"], b["build"], b["torch"], b["cuda"]

    rows = {int(line.split()[0]): line for line in report.splitlines()[2:] if line[:1].isdigit()}
    for a in answers:
        differs = not ranks.healthy(a) or (ref is not None and key(a) != key(answers[ref]))
        if a["rank"] == ref:
            assert "ok (the reference)" in rows[ref]
        elif differs:
            assert a["rank"] in rows, f"rank {a['rank']} differs and is not named:\n{report}"
        else:
            assert a["rank"] not in rows, f"rank {a['rank']} agrees and is listed:\n{report}"
    if ref is not None:
        good = [key(b) for b in answers if ranks.healthy(b)]
        assert good.count(key(answers[ref])) == max(map(good.count, good)), "a most common healthy answer"
        assert all(key(answers[r]) != key(answers[ref]) or not ranks.healthy(answers[r]) for r in range(ref)), \
            "the lowest rank holding it"
    fixes = [line for line in report.splitlines() if "fix: " in line]
    assert len(fixes) >= len(rows) - (ref is not None)


@pytest.mark.parametrize(("arch", "cap", "runs"), [
    ("9.0", (9, 0), True), ("8.0", (8, 6), True), ("8.6", (8, 0), False), ("8.0", (9, 0), False),
    ("8.0+PTX", (9, 0), True), ("9.0+PTX", (8, 9), False), ("9.0a", (9, 0), True), ("9.0a", (10, 0), False),
    ("sm_90", (9, 0), True), ("12.0", (12, 0), True), ("10.0f", (10, 3), True), ("nonsense", (9, 0), False),
])
def test_gpu_arch_rule(arch: str, cap: tuple[int, int], runs: bool) -> None:
    assert ranks._arch_runs(arch, *cap) is runs


def _record_line(root: Path, rel: str) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256((root / rel).read_bytes()).digest()).rstrip(b"=").decode()
    return f"{rel},sha256={digest},{(root / rel).stat().st_size}\n"


def test_build_identity_from_record_and_from_files_agree(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (tmp_path / "pkg.libs").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "_C.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\x7fELF one")
    (pkg / "sub" / "libops.so").write_bytes(b"\x7fELF two")
    (tmp_path / "pkg.libs" / "libgomp-abc.so.1.0.0").write_bytes(b"\x7fELF three")
    libs = ["pkg/_C.cpython-311-x86_64-linux-gnu.so", "pkg/sub/libops.so", "pkg.libs/libgomp-abc.so.1.0.0"]
    from_files, how = ranks.build_identity("pkg", pkg, "pkg")
    assert how == "files" and from_files is not None
    dist = tmp_path / "pkg-1.0.dist-info"
    dist.mkdir()
    (dist / "RECORD").write_text("".join(_record_line(tmp_path, rel) for rel in ["pkg/__init__.py", *libs])
                                 + "pkg-1.0.dist-info/RECORD,,\n")
    assert ranks.build_identity("pkg", pkg, "pkg") == (from_files, "RECORD")
    # A library replaced after install is another build, whatever RECORD says (issue 43), and it is named.
    (pkg / "sub" / "libops.so").write_bytes(b"\x7fELF other")
    replaced, source, changed = ranks.library_state("pkg", pkg, "pkg")
    assert replaced not in (None, from_files) and source == "files" and changed == ["pkg/sub/libops.so"]
    (dist / "RECORD").unlink()
    assert ranks.library_state("pkg", pkg, "pkg") == (replaced, "files", []), "another library, another build"


def test_answer_of_a_missing_and_a_broken_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = tmp_path / "kr_broken_pkg"
    broken.mkdir()
    (broken / "__init__.py").write_text("raise ImportError('libc10_cuda.so: cannot open shared object file\\nmore')")
    (broken / "_build_info.json").write_text('{"version": "2.0+cu130", "ops": ["kr_broken_pkg::f"], '
                                             '"torch_version": "2.14.1", "cuda_tag": "cu130"}')
    exiting = tmp_path / "kr_exiting_pkg"
    exiting.mkdir()
    (exiting / "__init__.py").write_text("import sys; sys.exit(3)")
    monkeypatch.syspath_prepend(str(tmp_path))
    missing = ranks.local_answer("kr_no_such_pkg", rank=3)
    assert (missing["present"], missing["rank"], missing["error"]) == (False, 3, None)
    answer = ranks.local_answer("kr_broken_pkg")
    assert answer["present"] and answer["version"] == "2.0+cu130" and answer["ops"] == 1
    assert answer["import_error"] == "ImportError: libc10_cuda.so: cannot open shared object file"
    assert ranks.local_answer("kr_exiting_pkg")["import_error"] == "SystemExit: 3"
    ok, report = ranks.verdict([{**answer, "rank": 0}, {**missing, "rank": 1}], "kr_broken_pkg")
    assert not ok and report.startswith("kr_broken_pkg: no rank of 2 has a working kr_broken_pkg")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_rank0_whose_peer_never_comes_times_out(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    for name, value in {"RANK": "0", "WORLD_SIZE": "3", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": str(_free_port())}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)
    started = time.monotonic()
    with pytest.raises(ranks.RanksTimeout) as info:
        ranks.check_ranks("json", timeout=0.5)
    assert time.monotonic() - started < 30
    assert info.value.missing == [1, 2]
    assert "json: ranks 1-2 of 3 never answered within 0.5 s (answered: 0)" in str(info.value)
    monkeypatch.setenv("MASTER_PORT", str(_free_port()))
    assert ranks.main("json", ["--timeout", "0.3"]) == 1
    assert "rank 0: json: ranks 1-2 of 3 never answered within 0.3 s" in capsys.readouterr().err


@pytest.mark.parametrize(("env", "message"), [
    ({"WORLD_SIZE": "2", "RANK": "1"}, "MASTER_ADDR/MASTER_PORT are not set: run it under torchrun"),
    ({"WORLD_SIZE": "two"}, "is not a number"),
    ({"WORLD_SIZE": "2", "RANK": "2"}, "RANK 2 is not a rank of a job of WORLD_SIZE 2"),
])
def test_not_a_rank_is_bad_usage(env: dict[str, str], message: str, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert ranks.main("json", []) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_ranks_script_command(tmp_path: Path) -> None:
    kiln = [sys.executable, str(REPO / "scripts" / "kiln")]
    out = tmp_path / "kiln_ranks.py"
    proc = subprocess.run([*kiln, "guard", "ranks-script", "my_ops", "-o", str(out)], capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == str(out), proc.stderr
    text = out.read_text()
    assert "\nPACKAGE: str | None = 'my_ops'\n" in text
    assert "kiln_tool" not in text.replace("kiln_tool/guard/ranks.py", ""), "the copy needs nothing of kiln"
    lone = subprocess.run([sys.executable, str(out), "--timeout", "5"], capture_output=True, text=True,
                          check=False, env={"PATH": "/usr/bin:/bin"}, cwd=tmp_path)
    assert lone.returncode == 1, lone.stdout + lone.stderr
    assert "my_ops: no rank of 1 has a working my_ops" in lone.stderr and "my_ops is not installed" in lone.stderr
    for bad, why in (("my-ops", "is not a package's import name"), ("1x", "is not a package's import name")):
        proc = subprocess.run([*kiln, "guard", "ranks-script", bad, "-o", str(tmp_path / "x.py")],
                              capture_output=True, text=True, check=False)
        assert proc.returncode == 2 and why in proc.stderr and proc.stderr.count("\n") == 1
    proc = subprocess.run([*kiln, "guard", "ranks-script", "my_ops", "-o", str(tmp_path)], capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 2 and "is a folder" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kiln_ranks.py"], "nothing half-written"


def test_a_rank_whose_store_never_comes_up_stops(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Rank 1 of a job whose rank 0 (serving the store outside torchrun) never started: exit 1, naming the store
    and rank 0, within the deadline."""
    port = _free_port()
    for name, value in {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": str(port)}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)
    started = time.monotonic()
    assert ranks.main("json", ["--timeout", "1"]) == 1
    assert time.monotonic() - started < 30
    err = capsys.readouterr().err
    assert f"rank 1: cannot reach the job's store at 127.0.0.1:{port} (rank 0 serves it: has rank 0 started the " \
           "check?) within 1 s" in err, err
