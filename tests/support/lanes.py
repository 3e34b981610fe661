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
  wait until every other group is done: they check what the rest of the run made.
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
    after_suite: bool

    def describe(self) -> dict[str, object]:
        return {"key": self.key, "files": list(self.files), "tests": [item.nodeid for item in self.items]}


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


def _file_of(item: pytest.Item) -> str:
    path = Path(item.path).resolve()
    try:
        return path.relative_to(REPO).as_posix()
    except ValueError:
        return path.as_posix()


def plan(items: list[pytest.Item], durations: dict[str, float], fixtures: frozenset[str],
         folders: tuple[str, ...]) -> list[Group]:
    """The groups, in the order lanes claim them: longest first, after_suite groups last (in session order)."""
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
        after = any(item.get_closest_marker("after_suite") is not None for item in group_items)
        groups.append(Group(files[0], tuple(files), tuple(group_items), seconds, after))
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

    def finish(self, index: int) -> None:
        self._mark("done", index)

    def pending(self, indexes: range) -> list[int]:
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
    first_after = next((i for i, g in enumerate(groups) if g.after_suite), len(groups))
    ran: list[Group] = []
    session.config.stash[_RAN] = ran

    def next_claim(start: int) -> int | None:
        for index in range(start, len(groups)):
            if claims.claim(index):
                return index
        return None

    current = next_claim(0)
    while current is not None:
        group = groups[current]
        if group.after_suite:
            _wait_for(claims, range(first_after), session, lane)
        following: int | None = None
        for position, item in enumerate(group.items):
            last = position == len(group.items) - 1
            if last:
                following = next_claim(current + 1)
            nextitem = group.items[position + 1] if not last else (
                groups[following].items[0] if following is not None else None)
            item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
            if session.shouldfail:
                raise session.Failed(session.shouldfail)
            if session.shouldstop:
                raise session.Interrupted(session.shouldstop)
        claims.finish(current)
        ran.append(group)
        current = following
    return True


def _wait_for(claims: Claims, indexes: range, session: pytest.Session, lane: str) -> None:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    said = False
    while waiting := claims.pending(indexes):
        if not said and reporter is not None:
            reporter.write_line(f"lanes: {lane} waits for {len(waiting)} group(s) of another lane before the "
                                "after_suite tests")
            said = True
        time.sleep(WAIT_POLL_S)


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
