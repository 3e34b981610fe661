"""tests/support/lanes.py: make test's two pytest processes share the suite, every test runs exactly once, files that
share an expensive session fixture stay in one process, after_suite tests wait for the rest, and
after_suite(paths) tests only for the tests under those paths."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support import lanes
from support.lanes import dependencies, plan

REPO = Path(__file__).resolve().parents[2]

CONFTEST = """
import os, time
from pathlib import Path
import pytest
import support.lanes as lanes
from support.lanes import pytest_addoption, pytest_runtestloop, pytest_terminal_summary  # noqa: F401

HERE = Path(__file__).parent
lanes.CONFIG = HERE / "lanes.toml"
lanes.DURATIONS = HERE / "durations.json"
LOG = HERE / "ran.log"

def record(what):
    with LOG.open("a") as out:
        out.write(f"{what} {os.getpid()}\\n")

@pytest.fixture(scope="session")
def shared_build():
    record("BUILD")
    return "built"

@pytest.fixture(autouse=True)
def _log(request):
    time.sleep(0.05)  # both processes get a share
    yield
    record(request.node.nodeid)
"""

AFTER = """
import pytest
from pathlib import Path
pytestmark = pytest.mark.after_suite

def test_everything_else_ran_first():
    ran = (Path(__file__).parent / "ran.log").read_text().split("\\n")
    nodeids = {{line.rsplit(" ", 1)[0] for line in ran if line}}
    others = [f"test_{{i}}.py::test_{{i}}_{{j}}" for i in range({files}) for j in range({tests})]
    assert set(others) <= nodeids, sorted(set(others) - nodeids)
"""


SCOPED = """
import pytest
from pathlib import Path
pytestmark = pytest.mark.after_suite("test_1.py")

def test_what_test_1_made_is_there():
    ran = (Path(__file__).parent / "ran.log").read_text().split("\\n")
    nodeids = {line.rsplit(" ", 1)[0] for line in ran if line}
    assert {"test_1.py::test_1_0", "test_1.py::test_1_1"} <= nodeids
"""

SLOW = """
import time
from pathlib import Path

def test_slow_0():
    # The other lane runs the scoped test while this file still runs: it waits on test_1.py, not on this.
    log = Path(__file__).parent / "ran.log"
    deadline = time.monotonic() + 120
    while "test_scoped.py::" not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline, "the scoped after_suite test waited for this file too"
        time.sleep(0.2)

def test_slow_1():
    pass
"""


def _tree(tmp_path: Path, files: int = 8, tests: int = 4, shared: tuple[int, ...] = (1, 5)) -> Path:
    root = tmp_path / "suite"
    root.mkdir()
    (root / "conftest.py").write_text(CONFTEST)
    (root / "pytest.ini").write_text("[pytest]\nmarkers =\n  after_suite: last\n")
    (root / "lanes.toml").write_text('[keep_together]\nfixtures = ["shared_build"]\nfolders = []\n')
    (root / "durations.json").write_text(json.dumps({}))
    for i in range(files):
        arg = "shared_build" if i in shared else ""
        body = "".join(f"def test_{i}_{j}({arg}):\n    pass\n\n" for j in range(tests))
        (root / f"test_{i}.py").write_text(body)
    (root / "test_zz_after.py").write_text(textwrap.dedent(AFTER).format(files=files, tests=tests))
    return root


def _lane(root: Path, claims: Path, name: str, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "tests") + os.pathsep + str(REPO / "src")}
    return subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(root),
                             "--lane-claims", str(claims), "--lane-name", name, *extra, str(root)],
                            cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _run_lanes(root: Path, claims: Path, count: int = 2) -> list[str]:
    procs = [_lane(root, claims, f"lane{n}") for n in range(count)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    for proc, out in zip(procs, outs, strict=True):
        assert proc.returncode == 0, out
    return outs


def test_two_lanes_run_every_test_once_and_keep_a_shared_fixture_in_one(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    outs = _run_lanes(root, tmp_path / "claims")
    lines = [line.rsplit(" ", 1) for line in (root / "ran.log").read_text().splitlines()]
    ran = [nodeid for nodeid, _ in lines if nodeid != "BUILD"]
    expected = {f"test_{i}.py::test_{i}_{j}" for i in range(8) for j in range(4)}
    expected.add("test_zz_after.py::test_everything_else_ran_first")
    assert sorted(ran) == sorted(expected)  # each exactly once
    builds = [pid for nodeid, pid in lines if nodeid == "BUILD"]
    assert len(builds) == 1  # test_1 and test_5 share it: one group, one lane
    users = {pid for nodeid, pid in lines if nodeid.startswith(("test_1.py", "test_5.py"))}
    assert users == set(builds)
    pids = {pid for _, pid in lines}
    assert len(pids) == 2, "both lanes took groups"
    assert sum("lanes: lane" in out for out in outs) == 2
    done = sorted(os.listdir(tmp_path / "claims" / "done"))
    assert done == sorted(os.listdir(tmp_path / "claims" / "claimed")) and len(done) == 8  # 1+5 are one group


def test_a_lane_whose_collection_differs_stops_with_a_usage_error(tmp_path: Path) -> None:
    root = _tree(tmp_path, files=3, tests=1, shared=())
    _run_lanes(root, tmp_path / "claims", count=1)
    other = _lane(root, tmp_path / "claims", "late", "-k", "not test_2")
    out = other.communicate(timeout=300)[0]
    assert other.returncode == pytest.ExitCode.USAGE_ERROR, out
    assert "planned from another collection" in out


def test_a_scoped_after_suite_test_waits_only_for_the_paths_it_names(tmp_path: Path) -> None:
    root = _tree(tmp_path, files=4, tests=2, shared=(1, 3))
    (root / "test_scoped.py").write_text(SCOPED)
    (root / "test_slow.py").write_text(SLOW)
    (root / "durations.json").write_text(json.dumps({"test_slow.py": 100.0}))  # claimed first
    outs = _run_lanes(root, tmp_path / "claims")
    ran = [line.rsplit(" ", 1)[0] for line in (root / "ran.log").read_text().splitlines()
           if not line.startswith("BUILD ")]
    assert ran.index("test_scoped.py::test_what_test_1_made_is_there") < ran.index("test_slow.py::test_slow_0")
    assert ran[-1] == "test_zz_after.py::test_everything_else_ran_first"  # the bare marker still goes last
    assert sorted(ran) == sorted({*ran}) and len(ran) == 4 * 2 + 1 + 2 + 1, ran  # each exactly once
    assert sum("lanes: lane" in out for out in outs) == 2


def test_an_after_suite_path_outside_the_rootdir_is_a_usage_error(tmp_path: Path) -> None:
    root = _tree(tmp_path, files=2, tests=1, shared=())
    (root / "test_scoped.py").write_text(SCOPED.replace('"test_1.py"', '"../elsewhere"'))
    (out,) = [p.communicate(timeout=300)[0] for p in [_lane(root, tmp_path / "claims", "only")]]
    assert "after_suite takes paths" in out and "'../elsewhere'" in out, out


def test_one_lane_alone_runs_everything(tmp_path: Path) -> None:
    root = _tree(tmp_path, files=3, tests=2, shared=(0, 2))
    (out,) = _run_lanes(root, tmp_path / "claims", count=1)
    assert "7 passed" in out


@dataclass
class FakeItem:
    path: Path
    nodeid: str
    fixturenames: list[str] = field(default_factory=list)
    waits: tuple[str, ...] | None = None  # after_suite's paths: () for the bare marker, None for no marker

    def get_closest_marker(self, name: str) -> object | None:
        return SimpleNamespace(args=self.waits) if name == "after_suite" and self.waits is not None else None


MARKS = st.one_of(st.none(), st.just(()), st.lists(st.integers(0, 9).map(lambda f: f"tests/test_f{f}.py"),
                                                   min_size=1, max_size=3).map(tuple))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 9), st.sets(st.sampled_from(["a", "b", "c", "d"]), max_size=2), MARKS),
                min_size=1, max_size=40),
       st.dictionaries(st.integers(0, 9), st.floats(0, 500, allow_nan=False), max_size=10))
def test_the_plan_partitions_the_items_keeps_sharers_together_and_goes_longest_first(
        spec: list[tuple[int, set[str], tuple[str, ...] | None]], seconds: dict[int, float]) -> None:
    items = []
    for n, (file, fixtures, waits) in enumerate(spec):
        items.append(FakeItem(REPO / "tests" / f"test_f{file}.py", f"tests/test_f{file}.py::t{n}",
                              sorted(fixtures), waits if file % 3 == 0 else None))
    durations = {f"tests/test_f{file}.py": value for file, value in seconds.items()}
    groups = plan(items, durations, frozenset({"a", "b"}), ())  # type: ignore[arg-type]
    planned = [item for group in groups for item in group.items]
    assert sorted(map(id, planned)) == sorted(map(id, items))
    for fixture in ("a", "b"):
        holders = {g.key for g in groups for i in g.items if fixture in i.fixturenames}
        assert len(holders) <= 1
    files = [file for group in groups for file in group.files]
    assert len(files) == len(set(files))  # a file is in one group
    regular = [g.seconds for g in groups if not g.after_suite]  # scoped ones keep their place by length
    assert regular == sorted(regular, reverse=True)
    flags = [g.after_suite for g in groups]
    assert flags == sorted(flags)  # bare after_suite groups last
    for group in groups:  # a group keeps the session's order
        order = [items.index(i) for i in group.items]  # type: ignore[arg-type]
        assert order == sorted(order)
        marks = [i.waits for i in group.items if i.waits is not None]  # type: ignore[attr-defined]
        assert group.after_suite == (() in marks)
        assert set(group.waits_on) == (set() if group.after_suite else {p for m in marks for p in m})

    needs = dependencies(groups)
    for index, group in enumerate(groups):
        if group.after_suite:  # after every group but the other bare ones
            assert needs[index] == [i for i, g in enumerate(groups) if not g.after_suite]
        elif group.waits_on:  # after exactly the groups that hold a named file and wait on nothing
            assert set(needs[index]) == {i for i, g in enumerate(groups) if i != index and not g.waits
                                         and set(g.files) & set(group.waits_on)}
        else:
            assert needs[index] == []
    # No cycle: a lane can always take some group until all are done.
    done: set[int] = set()
    while len(done) < len(groups):
        ready = [i for i in range(len(groups)) if i not in done and set(needs[i]) <= done]
        assert ready, "a cycle of waits"
        done |= set(ready)


def test_the_config_is_checked(tmp_path: Path) -> None:
    bad = tmp_path / "lanes.toml"
    bad.write_text('[keep_together]\nfixtures = "ringops_cpu"\n')
    with pytest.raises(pytest.UsageError, match="must be a list"):
        lanes.load_config(bad)
    bad.write_text('[keep_togethr]\nfixtures = []\n')
    with pytest.raises(pytest.UsageError, match="unknown keys"):
        lanes.load_config(bad)
    fixtures, _folders = lanes.load_config()
    assert "ringops_cpu" in fixtures  # the real file parses
    durations = tmp_path / "d.json"
    durations.write_text('{"tests/x.py": -1}')
    with pytest.raises(pytest.UsageError, match="seconds"):
        lanes.load_durations(durations)
    assert all(v >= 0 for v in lanes.load_durations().values())
