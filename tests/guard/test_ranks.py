"""The distributed check (kiln_tool/guard/ranks.py, issue 33 item 3) in real torchrun jobs: one torchrun per
"host", each host a Python with its own torch and its own site folder (what it has installed), on loopback and
across network namespaces joined by veth pairs as separate hosts.

Every rank answers, even one without the package; the ranks that differ (no package, another build, another
torch) are named on every rank with their fix, and every rank fails; a rank that never joins ends the check
with a timeout naming it, never a hang. For opkiln and for ringops, a kiln-built fixture project (the adopters'
shared build). The check's wall time is printed (`pytest -s`) and, for the namespace job, written to
tests/_artifacts/ranks/timings.json.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from adopters.adopting import Built
from guard.ranks_support import (
    REPO,
    TORCH213,
    TORCH214,
    Host,
    Outcome,
    namespaces,
    namespaces_unavailable,
    run_job,
    table,
    unpack,
)
from kiln_tool.commands.guard import ranks_script

pytestmark = pytest.mark.slow

ARTIFACTS = REPO / "tests" / "_artifacts"
TIMINGS = ARTIFACTS / "ranks" / "timings.json"
CHECK_TIMEOUT = "60"  # seconds: far above what any test job needs, so a pass is never a race


def _artifact(pattern: str) -> Path | None:
    found = sorted(ARTIFACTS.glob(pattern))
    return found[-1] if found else None


@pytest.fixture(scope="module")
def job_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The job's own files, which every host has: the check for opkiln and for ringops as standalone scripts
    (what `kiln guard ranks-script` writes), and a training script that calls check_ranks() first."""
    root = tmp_path_factory.mktemp("job")
    (root / "opkiln_ranks.py").write_text(ranks_script("opkiln"))
    (root / "ringops_ranks.py").write_text(ranks_script("ringops"))
    (root / "train.py").write_text(
        "import os, sys\nimport ringops_ranks\n"
        "try:\n    summary = ringops_ranks.check_ranks('ringops', timeout=float(sys.argv[1]))\n"
        "except ringops_ranks.RanksError as exc:\n"
        "    print(f\"kiln ranks: rank {os.environ['RANK']} stops: {exc}\", file=sys.stderr)\n    sys.exit(1)\n"
        "again = ringops_ranks.check_ranks('ringops', timeout=float(sys.argv[1]))\n"
        "import torch, torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "after = ringops_ranks.check_ranks('ringops', timeout=float(sys.argv[1]))\n"
        "x = torch.ones(1) * (dist.get_rank() + 1)\ndist.all_reduce(x)\n"
        "print(f'TRAINED rank={dist.get_rank()} sum={int(x.item())} {summary}')\n"
        "print(f'AGAIN {again}')\nprint(f'AFTER-INIT {after}')\ndist.destroy_process_group()\n")
    return root


@pytest.fixture(scope="module")
def opkiln_sites(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> dict[str, Path]:
    """What each opkiln host has installed: the torch 2.13 CPU wheel, the stable-ABI CPU wheel (another build
    that imports on torch 2.13), the CPU wheel built against torch 2.14 (for the host with another torch),
    and nothing."""
    if not TORCH213.exists():
        pytest.skip(f"no torch 2.13 build venv at {TORCH213.parents[1]} (make setup)")
    root = tmp_path_factory.mktemp("opkiln-sites")
    good = request.getfixturevalue("cpu_wheel")
    stable = _artifact("wheels-stable-cpu/opkiln-*+cpu-cp310-abi3-*.whl") or request.getfixturevalue(
        "stable_cpu_wheel")
    sites = {"good": unpack(good, root / "good"), "stable": unpack(stable, root / "stable"),
             "none": root / "none"}
    sites["none"].mkdir()
    if TORCH214.exists():
        cpu214 = _artifact("wheels-cpu214/opkiln-*+pt214cpu-*.whl") or request.getfixturevalue("cpu214_wheel")
        sites["torch214"] = unpack(cpu214, root / "torch214")
    return sites


def _worker(job_dir: Path, package: str, timeout: str = CHECK_TIMEOUT) -> list[str]:
    return [str(job_dir / f"{package}_ranks.py"), "--timeout", timeout, "--json", str(job_dir / f"{package}.json")]


def _show(outcomes: list[Outcome]) -> str:
    return "\n".join(f"--- {o.host.name} exit {o.returncode} after {o.seconds:.1f} s\n{o.output[-3000:]}"
                     for o in outcomes)


def _check_table(outcomes: list[Outcome], expected: dict[str, list[str]], reference: str) -> dict[str, int]:
    """Every host failed (exit 1) and printed the same table; its rows are the reference (ok) and exactly the
    hosts of `expected`, each naming every expected phrase and a fix. Returns host name -> rank."""
    shown = _show(outcomes)
    assert [o.returncode for o in outcomes] == [1] * len(outcomes), shown
    tables = [table(o.output) for o in outcomes]
    assert all(t == tables[0] for t in tables), "every rank prints the same table\n" + shown
    rows = tables[0]
    by_host = {row.host: row for row in rows.values()}
    assert set(by_host) == {reference, *expected}, shown
    assert by_host[reference].notes == ["ok (the reference)"], shown
    for host, phrases in expected.items():
        text = by_host[host].text
        for phrase in phrases:
            assert phrase in text, f"{host}: {phrase!r} not in\n{text}\n{shown}"
        assert "fix: " in text, text
    return {row.host: rank for rank, row in rows.items()}


def test_loopback_names_missing_package_other_build_and_other_torch(job_dir: Path,
                                                                   opkiln_sites: dict[str, Path]) -> None:
    """Four hosts on 127.0.0.1 (static rendezvous: host i is rank i)."""
    hosts = [Host("good", TORCH213, opkiln_sites["good"]), Host("none", TORCH213, opkiln_sites["none"]),
             Host("stable", TORCH213, opkiln_sites["stable"])]
    if "torch214" in opkiln_sites:
        hosts.append(Host("torch214", TORCH214, opkiln_sites["torch214"]))
    started = time.monotonic()
    outcomes = run_job(hosts, _worker(job_dir, "opkiln"))
    wall = time.monotonic() - started
    page = "-f https://opkiln.github.io/wheels/cpu/torch2.13/index.html"
    reinstall = "pip install --force-reinstall --no-deps"
    expected = {"none": ["opkiln is not installed", f"{reinstall} opkiln==0.1.0+pt213cpu {page}"],
                "stable": ["another build: 0.1.0+cpu", "not 0.1.0+pt213cpu"]}
    if "torch214" in opkiln_sites:
        expected["torch214"] = ["torch 2.14.1+cu130, not 2.13.0+cpu",
                                "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu",
                                "another build: 0.1.0+pt214cpu"]
    # Static rendezvous: the rows' ranks are the hosts' order; the host column is this machine's name.
    rows = table(outcomes[0].output)
    names = {rank: hosts[rank].name for rank in rows}
    outcomes_named = [Outcome(o.host, o.returncode, _rename(o.output, names), o.seconds) for o in outcomes]
    ranks = _check_table(outcomes_named, expected, "good")
    assert ranks == {h.name: i for i, h in enumerate(hosts)}
    doc = json.loads((job_dir / "opkiln.json").read_text())
    print(f"\nloopback, {len(hosts)} hosts: the check took {doc['seconds']:.2f} s on rank 0 "
          f"(its own probe {doc['answers'][0]['probe_s']:.2f} s); the job {wall:.1f} s")


def _rename(output: str, names: dict[int, str]) -> str:
    """The table with each row's host cell replaced by the test's name for that rank (loopback hosts share a
    machine name)."""
    lines = []
    for line in output.splitlines():
        match = re.match(r"^(\d+)(\s{2,})(\S+)(\s{2,})", line)
        if match and int(match[1]) in names:
            name = names[int(match[1])]
            line = f"{match[1]}{match[2]}{name}{' ' * max(len(match[3]) + len(match[4]) - len(name), 2)}" \
                + line[match.end():]
        lines.append(line)
    return "\n".join(lines)


def test_across_network_namespaces(job_dir: Path, opkiln_sites: dict[str, Path]) -> None:
    """Three hosts, each in a network namespace of its own (own address, own host name), joined by veth pairs
    to a bridge; c10d rendezvous on host 0's address, so ranks come in join order."""
    reason = namespaces_unavailable()
    if reason:
        pytest.skip(reason)
    hosts = [Host("node-good", TORCH213, opkiln_sites["good"]), Host("node-none", TORCH213, opkiln_sites["none"]),
             Host("node-other", TORCH213, opkiln_sites["stable"])]
    with namespaces(hosts) as network:
        started = time.monotonic()
        outcomes = run_job(hosts, _worker(job_dir, "opkiln"), network=network)
        wall = time.monotonic() - started
    _check_table(outcomes, {"node-none": ["opkiln is not installed"],
                            "node-other": ["another build: 0.1.0+cpu"]}, "node-good")
    doc = json.loads((job_dir / "opkiln.json").read_text())
    rank0 = doc["answers"][0]
    figures = {"hosts": len(hosts), "check_s_rank0": doc["seconds"], "probe_s_rank0": rank0["probe_s"],
               "exchange_s_rank0": round(doc["seconds"] - rank0["probe_s"], 3), "job_wall_s": round(wall, 1),
               "probe_s": {a["host"]: a["probe_s"] for a in doc["answers"]}}
    TIMINGS.parent.mkdir(parents=True, exist_ok=True)
    TIMINGS.write_text(json.dumps(figures, indent=1) + "\n")
    print(f"\nnetwork namespaces, {len(hosts)} hosts: the check took {doc['seconds']:.2f} s on rank 0 "
          f"(its own probe {rank0['probe_s']:.2f} s, waiting for and reading the others "
          f"{figures['exchange_s_rank0']:.2f} s); the whole job {wall:.1f} s")


def test_a_rank_that_never_joins_ends_the_check_with_a_timeout(job_dir: Path,
                                                              opkiln_sites: dict[str, Path]) -> None:
    """Host 2's worker never starts the check (it sleeps): hosts 0 and 1 stop within the deadline, on every
    rank, naming rank 2; nothing hangs."""
    deadline = 3.0
    hosts = [Host("good", TORCH213, opkiln_sites["good"]), Host("also-good", TORCH213, opkiln_sites["good"]),
             Host("hung", TORCH213, None, argv=("sleep", "60"))]
    outcomes = run_job(hosts, _worker(job_dir, "opkiln", str(deadline)), timeout=45)
    shown = _show(outcomes)
    for outcome in outcomes[:2]:
        assert outcome.returncode == 1, shown
        assert re.search(r"rank [01]: opkiln: rank 2 of 3 never answered within 3 s \(answered: 0-1\)",
                         outcome.output), shown
    assert outcomes[2].returncode == -9, "the hung host runs on until the test ends it\n" + shown
    print(f"\nthe timeout: hosts 0 and 1 stopped after {outcomes[0].seconds:.1f} s and {outcomes[1].seconds:.1f} s "
          f"(torchrun start, import torch, the {deadline:g} s deadline)")


# --- ringops: a kiln-built fixture project --------------------------------------------------------------------

@pytest.fixture(scope="module")
def ringops_sites(tmp_path_factory: pytest.TempPathFactory, ringops_cpu: Built) -> dict[str, Path]:
    if not TORCH213.exists():
        pytest.skip(f"no torch 2.13 build venv at {TORCH213.parents[1]} (make setup)")
    root = tmp_path_factory.mktemp("ringops-sites")
    (root / "none").mkdir()
    return {"good": unpack(ringops_cpu.wheel("pt213cpu"), root / "good"), "none": root / "none"}


def test_ringops_training_script_stops_on_every_rank(job_dir: Path, ringops_sites: dict[str, Path]) -> None:
    """The API: train.py calls check_ranks() before its first step; a host without ringops and a host whose
    torch is not the one ringops was built for (its import fails) are named, and no rank trains."""
    if not TORCH214.exists():
        pytest.skip(f"no torch 2.14.1 venv at {TORCH214.parents[1]}")
    hosts = [Host("good", TORCH213, ringops_sites["good"]), Host("none", TORCH213, ringops_sites["none"]),
             Host("torch214", TORCH214, ringops_sites["good"])]
    outcomes = run_job(hosts, [str(job_dir / "train.py"), CHECK_TIMEOUT])
    rows = table(outcomes[0].output)
    named = [Outcome(o.host, o.returncode, _rename(o.output, {r: hosts[r].name for r in rows}), o.seconds)
             for o in outcomes]
    reinstall = "pip install --force-reinstall --no-deps"
    _check_table(named, {"none": ["ringops is not installed", f"{reinstall} ringops==0.3.0+pt213cpu"],
                         "torch214": ["torch 2.14.1+cu130, not 2.13.0+cpu", "import ringops fails"]}, "good")
    assert not any("TRAINED" in o.output for o in outcomes), _show(outcomes)


def test_ringops_ranks_that_agree_train(job_dir: Path, ringops_sites: dict[str, Path]) -> None:
    """Three hosts agree (across network namespaces where they can be made, else on loopback): check_ranks()
    returns its summary and training goes on. train.py checks three times: first (importing torch and ringops),
    again (the exchange alone), and after init_process_group (through the process group's store); then a gloo
    all_reduce on the port the check's own store used before."""
    hosts = [Host(f"good-{i}", TORCH213, ringops_sites["good"]) for i in range(3)]
    where = "network namespaces" if namespaces_unavailable() is None else "loopback"
    with contextlib.ExitStack() as stack:
        network = stack.enter_context(namespaces(hosts)) if where == "network namespaces" else None
        outcomes = run_job(hosts, [str(job_dir / "train.py"), CHECK_TIMEOUT], network=network)
    shown = _show(outcomes)
    assert [o.returncode for o in outcomes] == [0, 0, 0], shown
    summary = (r"ringops: all 3 ranks agree: ringops 0\.3\.0\+pt213cpu \(build [0-9a-f]{12}\), torch 2\.13\.0\+cpu, "
               r"CUDA -, 1 ops registered, GPU none \(([0-9.]+) s\)")
    out = "\n".join(o.output for o in outcomes)
    trained = re.findall(r"TRAINED rank=(\d) sum=6 " + summary, out)
    assert sorted(rank for rank, _ in trained) == ["0", "1", "2"], shown
    again = [float(t) for t in re.findall(r"AGAIN " + summary, out)]
    after = [float(t) for t in re.findall(r"AFTER-INIT " + summary, out)]
    assert len(again) == len(after) == 3, shown
    first = [float(t) for _, t in trained]
    print(f"\n{where}, 3 hosts that agree: the first check took {max(first):.2f} s on the slowest rank (its "
          f"imports included), a second {max(again):.3f} s, one through the process group's store {max(after):.3f} s")


def test_ringops_module_form(ringops_sites: dict[str, Path]) -> None:
    """`torchrun ... -m ringops._kiln.ranks`: the check as every kiln-built package ships it. On the host with
    torch 2.14 ringops' import fails on the way to the module; its guard hands over to the check, which
    answers with the guard's error, so that rank is named, not timed out."""
    if not (ringops_sites["good"] / "ringops" / "_kiln" / "ranks.py").is_file():
        pytest.skip("this ringops wheel ships no ringops/_kiln/ranks.py (built before the guard shipped it)")
    if not TORCH214.exists():
        pytest.skip(f"no torch 2.14.1 venv at {TORCH214.parents[1]}")
    hosts = [Host("good", TORCH213, ringops_sites["good"]), Host("good-too", TORCH213, ringops_sites["good"]),
             Host("torch214", TORCH214, ringops_sites["good"])]
    outcomes = run_job(hosts, ["-m", "ringops._kiln.ranks", "--timeout", CHECK_TIMEOUT])
    rows = table(outcomes[0].output)
    named = [Outcome(o.host, o.returncode, _rename(o.output, {r: hosts[r].name for r in rows}), o.seconds)
             for o in outcomes]
    guard_error = "import ringops fails: RingopsEnvironmentError: ringops cannot be imported"
    ranks = _check_table(named, {"torch214": ["torch 2.14.1+cu130, not 2.13.0+cpu", guard_error]}, "good")
    assert ranks == {"good": 0, "torch214": 2}
    assert "agree with rank 0: ranks 0-1" in outcomes[0].output, _show(outcomes)


def test_nothing_left_behind() -> None:
    """No namespace of this session survives it (the namespace test removes what it made)."""
    if shutil.which("ip") is None:
        pytest.skip("`ip` is not installed: no namespace was made")
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    assert f"kr{os.getpid() % 100000}-" not in listed
    assert not list(Path("/etc/netns").glob(f"kr{os.getpid() % 100000}-*")), "their hosts files are removed too"
