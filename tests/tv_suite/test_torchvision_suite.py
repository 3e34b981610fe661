"""tests/tv_suite/torchvision_suite.py's own logic: how test records become per-class counts and an exit
status, the known-difference patterns against torchvision's real test ids, bad arguments. The suite
itself (torchvision's test_ops.py, which needs torchvision) runs with `make torchvision-suite`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from support.scripts import load_script

try:
    from hypothesis import given
    from hypothesis import strategies as st
except ImportError:  # the stable-ABI venvs run tests/ops with torch and pytest alone
    given = None

SCRIPT = Path(__file__).resolve().parent / "torchvision_suite.py"


suite = load_script(SCRIPT, "torchvision_suite_under_test")

PS_ALIGN = "test_ops.py::TestPSRoIAlign::"


def _record(outcome: str, opkiln: dict[str, int] | None = None, torchvision: dict[str, int] | None = None,
            blocked: list[str] | None = None, message: str = "") -> dict[str, Any]:
    return {"outcome": outcome, "opkiln_calls": opkiln or {}, "torchvision_calls": torchvision or {},
            "blocked": blocked or [], "message": message}


def test_each_kind_of_record_lands_in_its_column() -> None:
    records = {
        PS_ALIGN + "test_forward[torch.float32-True-cpu]": _record("passed", {"ps_roi_align": 1}),
        PS_ALIGN + "test_boxes_shape": _record("passed"),
        PS_ALIGN + "test_forward[torch.float32-True-cuda]": _record("skipped", message="CUDA device not available"),
        PS_ALIGN + "test_backward[True-cpu-0]": _record("failed", {"ps_roi_align": 3},
                                                        message="x.py:1: in f\nE   AssertionError: grads differ"),
        # passed, but torchvision's kernel ran (seen by the profiler) or was reached (blocked, error caught)
        PS_ALIGN + "test_torch_fx_trace[cpu]": _record("passed", {"ps_roi_align": 1}, {"ps_roi_align": 1}),
        PS_ALIGN + "test_is_leaf_node[cpu]": _record("passed", blocked=["torchvision::ps_roi_align"]),
        "test_ops.py::TestNMS::test_qnms[0.2-1-0]": _record("failed", message="E   NotImplementedError: quantized"),
        "test_ops.py::TestNMS::test_nms_ref[0-0.2]": _record("passed", {"nms": 1}),
        "test_ops.py::TestRoiPool::test_forward[x]": _record("passed", {"roi_pool": 1}),  # class not chosen
    }
    counts = suite.classify(records, ["TestPSRoIAlign", "TestNMS"])
    ps = counts["TestPSRoIAlign"]
    assert (ps.passed, ps.passed_no_kernel, ps.failed, ps.skipped, ps.known_difference) == (2, 1, 3, 1, 0)
    assert any("AssertionError: grads differ" in p for p in ps.problems)
    assert sum("reached torchvision's kernel" in p for p in ps.problems) == 2
    nms = counts["TestNMS"]
    assert (nms.passed, nms.failed, nms.known_difference, nms.problems) == (1, 0, 1, [])
    assert suite.exit_status(counts) == 1
    assert suite.exit_status({"TestNMS": nms}) == 0
    table = suite.render(counts, "header")
    assert table.splitlines()[0] == "header" and "TestPSRoIAlign" in table and "problems:" in table


def test_a_known_difference_that_passes_is_a_stale_entry() -> None:
    records = {"test_ops.py::TestNMS::test_qnms[0.2-1-0]": _record("passed", {"nms": 2})}
    counts = suite.classify(records, ["TestNMS"])
    assert counts["TestNMS"].failed == 1 and "KNOWN_DIFFERENCES" in counts["TestNMS"].problems[0]


def test_a_chosen_class_with_no_test_run_fails() -> None:
    records = {PS_ALIGN + "test_forward[torch.float32-True-cuda]": _record("skipped")}
    counts = suite.classify(records, ["TestPSRoIAlign", "TestPSRoIPool"])
    assert suite.exit_status(counts) == 1
    assert [p for c in counts.values() for p in c.problems] == ["TestPSRoIAlign: no test of this class ran",
                                                                "TestPSRoIPool: no test of this class ran"]


@pytest.mark.parametrize("nodeid, expected", [
    ("test_ops.py::TestNMS::test_qnms[0.2-1-0]", True),
    ("test_ops.py::TestNMS::test_faketensor__test_qnms[0.2-1-0]", True),
    ("test_ops.py::TestRoIAlign::test_qroialign[qdtype0-1-0-True]", True),
    ("test_ops.py::TestRoIAlign::test_qroi_align_multiple_images", True),
    ("test_ops.py::TestRoIAlign::test_aot_dispatch_dynamic__test_qroialign[qdtype0-1-0-True]", True),
    ("test_ops.py::TestNMS::test_nms_ref[0-0.2]", False),
    ("test_ops.py::TestNMS::test_schema__test_nms_ref[0-0.2]", False),
    ("test_ops.py::TestPSRoIAlign::test_forward[torch.float16-True-cpu]", False),
    ("test_ops.py::TestRoIAlign::test_forward[False-True-dtype0-cpu-True]", False),
])
def test_known_differences_match_only_the_quantized_tests(nodeid: str, expected: bool) -> None:
    assert (suite.known_difference(nodeid) is not None) is expected


def test_class_names_and_the_command() -> None:
    assert suite.parse_classes("PSRoIPool, PSRoIAlign,PSRoIPool") == ["TestPSRoIPool", "TestPSRoIAlign"]
    for bad in ("", "RoiAlign", "NMS,nope"):
        with pytest.raises(suite.UsageError):
            suite.parse_classes(bad)
    command = suite.build_command("py", Path("/tv/test"), ["TestNMS"], ["-x"])
    assert command[:3] == ["py", "-m", "pytest"] and "/tv/test/test_ops.py::TestNMS" in command
    assert command[command.index("-p") + 1] == suite.PLUGIN and command[-1] == "-x"


def test_bad_arguments_are_one_line_and_status_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert suite.main(["--tests", str(tmp_path)]) == 2
    assert suite.main(["--tests", str(tmp_path), "--classes", "Nope"]) == 2
    (tmp_path / "test_ops.py").write_text("")
    assert suite.main(["--tests", str(tmp_path), "--python", str(tmp_path / "no-python")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith("torchvision_suite: ") for line in lines)


def test_a_blocked_torchvision_kernel_raises_and_is_recorded() -> None:
    before = len(suite._state["blocked"])
    with pytest.raises(RuntimeError, match="torchvision::ps_roi_pool"):
        suite._block("ps_roi_pool", "CPU")(object())
    assert suite._state["blocked"][before:] == ["torchvision::ps_roi_pool"]


if given is not None:
    OUTCOMES = st.sampled_from(["passed", "failed", "skipped"])
    CALLS = st.dictionaries(st.sampled_from(["ps_roi_align", "nms"]), st.integers(1, 5), max_size=2)
    RECORD = st.builds(_record, OUTCOMES, CALLS, CALLS)
    TESTS = st.tuples(st.sampled_from(list(suite.CLASSES.values())),
                      st.sampled_from(["test_forward[a]", "test_qnms[b]", "test_backward[c]", "test_x"]))

    @given(st.dictionaries(TESTS, RECORD, max_size=12))
    def test_every_record_of_a_chosen_class_is_counted_once(drawn: dict[tuple[str, str], dict[str, Any]]) -> None:
        records = {f"test_ops.py::{cls}::{name}": record for (cls, name), record in drawn.items()}
        counts = suite.classify(records, list(suite.CLASSES.values()))
        total = sum(c.passed + c.failed + c.skipped + c.known_difference for c in counts.values())
        assert total == len(records)
        # a pass that saw a torchvision kernel never counts as a pass
        clean_passes = sum(1 for r in records.values() if r["outcome"] == "passed" and not r["torchvision_calls"])
        assert sum(c.passed + c.known_difference for c in counts.values()) <= len(records)
        assert sum(c.passed for c in counts.values()) <= clean_passes
        assert all(c.passed_no_kernel <= c.passed for c in counts.values())


def test_a_relative_python_is_made_absolute_but_keeps_its_venv_link(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # pytest runs in torchvision's test folder, so `--python .venvs/x/bin/python` must not be looked up there.
    venv_bin = tmp_path / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "python").symlink_to(sys.executable)
    monkeypatch.chdir(tmp_path)
    assert suite.interpreter("venv/bin/python") == str(venv_bin / "python")
    assert suite.interpreter("python3") == "python3"
