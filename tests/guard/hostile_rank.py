"""A torchrun worker for tests/guard/test_ranks_hostile.py.

    hostile_rank.py MODE REPORT                rank 0 runs kiln's distributed check for ``json``; rank 1 is hostile:
                                               it writes the answer MODE names straight into the job's store, under
                                               its own key of the run
    hostile_rank.py twice REPORT STANDALONE    both ranks honest, checking ``kr_pkg`` twice: the shipped module,
                                               then (after rank 1 removed its kr_pkg) the standalone script's copy
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import time
from datetime import timedelta
from pathlib import Path

from kiln_tool.guard import ranks

MODE, REPORT = sys.argv[1], Path(sys.argv[2])
PACKAGE = "json"


def hostile(good: dict[str, object]) -> bytes:
    if MODE == "forged":  # rank 1 answers as rank 0, with rank 0's own answer: one rank counted twice
        return json.dumps(good).encode()
    if MODE == "control":
        return json.dumps({**good, "rank": 1, "host": "node\n3   evil  1.0  ok (the reference)\x1b[2J"}).encode()
    if MODE == "huge":
        return json.dumps({**good, "rank": 1, "host": "h" * (4 * 1024 * 1024)}).encode()
    if MODE == "protocol":
        return json.dumps({**good, "rank": 1, "protocol": 1}).encode()
    if MODE == "confused":
        return json.dumps({**good, "rank": 1, "ops_missing": "json::x", "ops": "5"}).encode()
    if MODE == "not-an-object":
        return b"[1, 2, 3]"
    raise SystemExit(f"unknown mode {MODE}")


def twice(rank: int) -> int:
    first = ranks.main("kr_pkg", ["--timeout", "30"])
    if rank == 1:
        spec = importlib.util.find_spec("kr_pkg")
        assert spec is not None and spec.submodule_search_locations
        shutil.rmtree(next(iter(spec.submodule_search_locations)))
        sys.modules.pop("kr_pkg", None)  # the first check imported it
        importlib.invalidate_caches()
    loaded = importlib.util.spec_from_file_location("kiln_ranks_copy", sys.argv[3])
    assert loaded is not None and loaded.loader is not None
    copy = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(copy)
    second = copy.main("kr_pkg", ["--timeout", "30"])
    print(f"RESULT {first} {second}", flush=True)
    return 0


def main() -> int:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if MODE == "twice":
        return twice(rank)
    if rank == 0:
        return ranks.main(PACKAGE, ["--timeout", "30", "--json", str(REPORT)])
    store, _ = ranks._store(rank, world, timedelta(seconds=30))
    base = f"kiln-ranks/{PACKAGE}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/"
    run = int(store.add(f"{base}runs/{rank}", 1))
    prefix = f"{base}run/{run}/"
    store.wait([f"{prefix}answer/0"], timedelta(seconds=30))
    good = json.loads(store.get(f"{prefix}answer/0"))
    store.set(f"{prefix}answer/{rank}", hostile(good))
    end = time.monotonic() + 30
    while time.monotonic() < end and not REPORT.exists():  # rank 0 serves the store: stay until it is done
        time.sleep(0.1)
    time.sleep(1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
