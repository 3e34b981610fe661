"""Lanes: several pytest processes sharing one suite, each taking the next group of test files as it frees up.

`make test` runs the suite in two pytest processes beside the container pipeline (two cores, three lanes). A
fixed split leaves one core idle for the last minutes, whichever way the files are divided, and the division
drifts with every test added. Here every lane collects the whole suite with the same arguments and plans it the
same way; then each claims groups from a shared folder (`--lane-claims DIR`) until none is left:

- A group is a test file, joined with every other file that shares a session fixture named in
  tests/lanes.toml (`keep_together`) or lies under one of its folders: an expensive fixture (a fixture
  project's build) is then made by one lane only.
- Groups go longest first (tests/lane_durations.json: seconds per file from an earlier run's junit XML,
  `make lane-durations`), so the last group a lane takes is short. Groups of after_suite tests go last, and
  wait until every other group is done: they check what the rest of the run made. `after_suite("tests/x", ...)`
  narrows that to what the tests under those paths made: the group keeps its place by length and a lane takes
  it once every group holding such a file is done (meanwhile it takes the next groups), so no core idles at the
  end waiting for the whole run.
- A claim is a file created with O_EXCL in DIR/claimed/; the first lane writes DIR/plan.json and every other
  lane must have planned the same groups, or it stops with a usage error. DIR/done/ marks finished groups.
  A lane that dies leaves its claimed group unfinished (its exit status fails the run); the other lanes
  take every group still unclaimed.

Without --lane-claims nothing changes: one process runs everything in its own order.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the dev venv is 3.11
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "tests" / "lanes.toml"
DURATIONS = REPO / "tests" / "lane_durations.json"
SECONDS_PER_UNKNOWN_TEST = 0.5
WAIT_POLL_S = 1.0


@dataclass(frozen=True)
class Group:
    key: str  # its first file, relative to the repository
    files: tuple[str, ...]
    items: tuple[pytest.Item, ...]
    seconds: float
    after_suite: bool  # runs after every other group (a bare after_suite marker)
    waits_on: tuple[str, ...] = ()  # after_suite("tests/x", ...): runs after the groups holding files under these

    @property
    def waits(self) -> bool:
        return self.after_suite or bool(self.waits_on)

    def describe(self) -> dict[str, object]:
        return {"key": self.key, "files": list(self.files), "tests": [item.nodeid for item in self.items],
                "after_suite": self.after_suite, "waits_on": list(self.waits_on)}


def load_config(path: Path | None = None) -> tuple[frozenset[str], tuple[str, ...]]:
    """keep_together's fixture names and folders (relative, with a trailing /), checked."""
    path = path or CONFIG
    data = tomllib.loads(path.read_text())
    section = data.get("keep_together", {})
    unknown = set(data) - {"keep_together"} | set(section) - {"fixtures", "folders"}
    if unknown:
        raise pytest.UsageError(f"{path}: unknown keys {sorted(unknown)}")
    fixtures, folders = section.get("fixtures", []), section.get("folders", [])
    for name, value in (("fixtures", fixtures), ("folders", folders)):
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise pytest.UsageError(f"{path}: keep_together.{name} must be a list of non-empty strings")
    return frozenset(fixtures), tuple(folder.rstrip("/") + "/" for folder in folders)


def load_durations(path: Path | None = None) -> dict[str, float]:
    """Seconds per test file; {} when the file is missing (every group then counts its tests)."""
    path = path or DURATIONS
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, int | float) and v >= 0
                                             for k, v in data.items()):
        raise pytest.UsageError(f"{path}: must map test files to seconds")
    return {k: float(v) for k, v in data.items()}


def _relative(path: Path) -> str:
    path = path.resolve()
    try:
        return path.relative_to(REPO).as_posix()
    except ValueError:
        return path.as_posix()


def _file_of(item: pytest.Item) -> str:
    return _relative(Path(item.path))


def waits_on(item: pytest.Item) -> tuple[str, ...] | None:
    """What an item's after_suite marker waits for: None (no marker), () (every other test), or the paths
    (test files or folders, relative to the rootdir; kept as the plan names files) whose tests go first."""
    marker = item.get_closest_marker("after_suite")
    if marker is None:
        return None
    root = Path(getattr(getattr(item, "config", None), "rootpath", REPO))
    paths = []
    for path in getattr(marker, "args", ()):
        if not isinstance(path, str) or not path or path.startswith("/") or ".." in path.split("/"):
            raise pytest.UsageError(f"{getattr(item, 'nodeid', item)}: after_suite takes paths (test files or "
                                    f"folders) relative to the rootdir, not {path!r}")
        paths.append(_relative(root / path))
    return tuple(paths)


def _under(file: str, paths: tuple[str, ...]) -> bool:
    return any(file == path or file.startswith(path + "/") for path in paths)


def plan(items: list[pytest.Item], durations: dict[str, float], fixtures: frozenset[str],
         folders: tuple[str, ...]) -> list[Group]:
    """The groups, in the order lanes claim them: longest first (groups that wait on named paths among them),
    groups of a bare after_suite marker last (in session order)."""
    by_file: dict[str, list[pytest.Item]] = {}
    for item in items:
        by_file.setdefault(_file_of(item), []).append(item)
    parent: dict[str, str] = {}

    def find(node: str) -> str:
        parent.setdefault(node, node)
        while parent[node] != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    for file, file_items in by_file.items():
        find(file)
        links = {f"folder:{folder}" for folder in folders if file.startswith(folder)}
        for item in file_items:
            links |= {f"fixture:{name}" for name in fixtures & set(getattr(item, "fixturenames", ()))}
        for link in links:
            parent[find(link)] = find(file)
    members: dict[str, list[str]] = {}
    for file in by_file:  # session order
        members.setdefault(find(file), []).append(file)
    position = {id(item): index for index, item in enumerate(items)}
    groups = []
    for files in members.values():
        group_items = sorted((item for file in files for item in by_file[file]), key=lambda i: position[id(i)])
        seconds = sum(durations.get(file, SECONDS_PER_UNKNOWN_TEST * len(by_file[file])) for file in files)
        marks = [mark for mark in map(waits_on, group_items) if mark is not None]
        after = any(mark == () for mark in marks)
        paths = () if after else tuple(sorted({path for mark in marks for path in mark}))
        groups.append(Group(files[0], tuple(files), tuple(group_items), seconds, after, paths))
    first = {group.key: position[id(group.items[0])] for group in groups}
    return sorted(groups, key=lambda g: (g.after_suite, first[g.key] if g.after_suite else -g.seconds, g.key))


class Claims:
    """The shared folder: plan.json, claimed/NNNN and done/NNNN (JSON: lane and pid)."""

    def __init__(self, root: Path, lane: str) -> None:
        self.root, self.lane = root, lane
        for sub in ("claimed", "done"):
            (root / sub).mkdir(parents=True, exist_ok=True)

    def agree(self, groups: list[Group]) -> None:
        """Write the plan if this lane is first; else check that this lane planned the same groups."""
        mine = json.dumps([g.describe() for g in groups], indent=1)
        path = self.root / "plan.json"
        if not path.exists():
            tmp = self.root / f".plan.{os.getpid()}.tmp"
            tmp.write_text(mine)
            try:
                os.link(tmp, path)  # atomic: exactly one lane's plan lands
            except FileExistsError:
                pass
            finally:
                tmp.unlink()
        theirs = path.read_text()
        if theirs != mine:
            raise pytest.UsageError(
                f"lanes: {path} was planned from another collection than this lane's ({self.lane}): every lane must "
                "run the same tests with the same arguments, and the folder must be fresh for each run")

    def _mark(self, sub: str, index: int) -> bool:
        try:
            fd = os.open(self.root / sub / f"{index:04d}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as out:
            out.write(json.dumps({"lane": self.lane, "pid": os.getpid()}))
        return True

    def claim(self, index: int) -> bool:
        return self._mark("claimed", index)

    def claimed(self, index: int) -> bool:
        return (self.root / "claimed" / f"{index:04d}").exists()

    def finish(self, index: int) -> None:
        self._mark("done", index)

    def pending(self, indexes: Iterable[int]) -> list[int]:
        """Of `indexes`, those not done whose owner may still finish them (claimed by a live process, or not
        claimed yet)."""
        waiting = []
        for index in indexes:
            if (self.root / "done" / f"{index:04d}").exists():
                continue
            claimed = self.root / "claimed" / f"{index:04d}"
            if claimed.exists():
                try:
                    pid = int(json.loads(claimed.read_text() or "{}").get("pid", 0))
                except (ValueError, json.JSONDecodeError):
                    pid = 0  # being written: its owner is alive
                if pid and not _alive(pid):
                    continue
            waiting.append(index)
        return waiting


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("lanes", "several pytest processes sharing one suite (tests/support/lanes.py)")
    group.addoption("--lane-claims", metavar="DIR", default=None,
                    help="share the suite with other pytest processes given the same fresh DIR")
    group.addoption("--lane-name", metavar="NAME", default=None, help="this lane's name in DIR and in its summary")


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    root = session.config.getoption("lane_claims")
    if not root:
        return None
    if session.testsfailed and not session.config.option.continue_on_collection_errors:
        raise session.Interrupted(f"{session.testsfailed} error(s) during collection")
    if session.config.option.collectonly:
        return True
    lane = session.config.getoption("lane_name") or f"pid{os.getpid()}"
    fixtures, folders = load_config()
    groups = plan(list(session.items), load_durations(), fixtures, folders)
    claims = Claims(Path(root), lane)
    claims.agree(groups)
    needs = dependencies(groups)
    ran: list[Group] = []
    session.config.stash[_RAN] = ran
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")

    def next_claim(block: bool) -> tuple[int | None, int | None]:
        """(the group this lane claimed, or None; the first group that waits on others still running, or
        None). With block, wait for those others rather than return without a claim while one is left."""
        said = False
        while True:
            deferred: int | None = None
            for index in range(len(groups)):
                if claims.claimed(index):
                    continue
                if claims.pending(needs[index]):
                    deferred = index if deferred is None else deferred
                    continue
                if claims.claim(index):
                    return index, None
            if deferred is None or not block:
                return None, deferred
            if not said and reporter is not None:
                waiting = claims.pending(needs[deferred])
                reporter.write_line(f"lanes: {lane} waits for {len(waiting)} group(s) of another lane before "
                                    f"{groups[deferred].key}")
                said = True
            time.sleep(WAIT_POLL_S)

    current, _ = next_claim(block=True)
    while current is not None:
        group = groups[current]
        following: int | None = None
        for position, item in enumerate(group.items):
            last = position == len(group.items) - 1
            hint: int | None = None
            if last:
                following, hint = next_claim(block=False)
            upcoming = following if following is not None else hint
            nextitem = group.items[position + 1] if not last else (
                groups[upcoming].items[0] if upcoming is not None else None)
            item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
            if session.shouldfail:
                raise session.Failed(session.shouldfail)
            if session.shouldstop:
                raise session.Interrupted(session.shouldstop)
        claims.finish(current)
        ran.append(group)
        current = following if following is not None else next_claim(block=True)[0]
    return True


def dependencies(groups: list[Group]) -> list[list[int]]:
    """For each group, the groups that must be done before a lane takes it: for a bare after_suite group every
    group that is not one; for after_suite(paths) those holding a file under the paths that wait on nothing."""
    needs: list[list[int]] = []
    for group in groups:
        if group.after_suite:
            needs.append([i for i, other in enumerate(groups) if not other.after_suite])
        elif group.waits_on:
            needs.append([i for i, other in enumerate(groups) if other is not group and not other.waits
                          and any(_under(file, group.waits_on) for file in other.files)])
        else:
            needs.append([])
    return needs


_RAN = pytest.StashKey[list[Group]]()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    ran = terminalreporter.config.stash.get(_RAN, None)
    if ran is None:
        return
    lane = terminalreporter.config.getoption("lane_name") or f"pid{os.getpid()}"
    files = sum(len(g.files) for g in ran)
    tests = sum(len(g.items) for g in ran)
    planned = sum(g.seconds for g in ran)
    terminalreporter.write_sep("-", f"lanes: {lane} ran {len(ran)} group(s), {files} file(s), {tests} test(s) "
                                    f"(planned {planned:.0f} s)")
