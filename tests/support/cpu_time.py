"""CPU seconds per test: what a test costs a 2-core CI machine that is busy the whole run (wall time there is mostly
waiting for the other lanes). For each test, the CPU time of the pytest process and of the children it waited for
(builds, pip, python subprocesses; not servers or containers, which no one waits for) over setup, call and teardown
(a session fixture's build is counted where it is made). It goes into the JUnit report as the property cpu_s, and
the terminal summary lists the costliest tests."""

from __future__ import annotations

import resource

import pytest

_START = pytest.StashKey[float]()
_TOP = pytest.StashKey[list[tuple[float, str]]]()
SHOWN = 25


def _cpu_now() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_START] = _cpu_now()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    if call.when == "teardown" and _START in item.stash:
        seconds = _cpu_now() - item.stash[_START]
        item.user_properties.append(("cpu_s", f"{seconds:.2f}"))
        item.config.stash.setdefault(_TOP, []).append((seconds, item.nodeid))
    yield


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    top = sorted(terminalreporter.config.stash.get(_TOP, []), reverse=True)
    if not top:
        return
    total = sum(seconds for seconds, _ in top)
    terminalreporter.write_sep("-", f"cpu: {total:.0f} s of CPU in {len(top)} test(s) (this process and the "
                                    f"children it waited for); the {min(SHOWN, len(top))} costliest")
    for seconds, nodeid in top[:SHOWN]:
        terminalreporter.write_line(f"{seconds:8.1f}s  {nodeid}")
