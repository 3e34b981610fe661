"""Publishing over time: OUT is merged, never rewritten; a published name keeps its bytes forever;
every new wheel passes the real `kiln audit` first; two runs at once both land."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

from index.helpers import KILN, Server, kiln_index, leftovers, tree
from index.synthetic_wheels import make_wheel, reversion, rezip, tamper


def _dist(root: Path, *wheels: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for wheel in wheels:
        shutil.copy2(wheel, root / wheel.name)
    return root


def _listed(out: Path) -> list[str]:
    return sorted(w["filename"] for w in json.loads((out / "kiln-index.json").read_text())["wheels"])


def test_a_second_release_is_merged_and_the_first_kept(published_wheel: Path, tmp_path: Path) -> None:
    out = tmp_path / "site"
    first = _dist(tmp_path / "dist1", published_wheel)
    result = kiln_index(first, out, "--base-url", "https://example.org/opkiln")
    assert result.returncode == 0, result.stderr
    assert f"audited {published_wheel.name}: ok" in result.stdout
    (out / "CNAME").write_text("wheels.example.org\n")  # a maintainer's own file
    published = (out / "wheels" / published_wheel.name).read_bytes()

    second_wheel = reversion(published_wheel, tmp_path / "build2", "0.1.1+pt213cpu")
    second = _dist(tmp_path / "dist2", second_wheel)
    result = kiln_index(second, out)
    assert result.returncode == 0, result.stderr
    assert f"added {second_wheel.name} -> cpu/torch2.13/" in result.stdout

    assert _listed(out) == sorted([published_wheel.name, second_wheel.name])
    assert (out / "wheels" / published_wheel.name).read_bytes() == published
    assert (out / "wheels" / second_wheel.name).read_bytes() == second_wheel.read_bytes()
    assert (out / "CNAME").read_text() == "wheels.example.org\n"
    manifest = json.loads((out / "kiln-index.json").read_text())
    assert manifest["base_url"] == "https://example.org/opkiln/"  # kept from the first run
    for page in ("cpu/torch2.13/index.html", "torch-2.13.0+cpu.html", "simple/opkiln/index.html"):
        html = (out / page).read_text()
        assert published_wheel.name in html and second_wheel.name in html, page
    assert "https://example.org/opkiln/cpu/torch2.13/index.html" in (out / "index.html").read_text()
    assert leftovers(tmp_path) == []

    # The same wheels again: nothing to add, and the site is byte for byte what it was.
    before = tree(out)
    both = _dist(tmp_path / "dist3", published_wheel, second_wheel)
    result = kiln_index(both, out)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("already published, same bytes") == 2
    assert tree(out) == before


def test_a_published_name_with_other_bytes_is_refused(published_wheel: Path, tmp_path: Path) -> None:
    out = tmp_path / "site"
    assert kiln_index(_dist(tmp_path / "dist1", published_wheel), out).returncode == 0
    before = tree(out)

    rebuilt = rezip(published_wheel, tmp_path / "rebuilt")
    newcomer = make_wheel(tmp_path / "new", version="0.5.0+pt213cpu")
    result = kiln_index(_dist(tmp_path / "dist2", rebuilt, newcomer), out)

    assert result.returncode == 1, result.stdout + result.stderr
    assert f"{published_wheel.name}: published with sha256" in result.stderr
    assert "nothing written" in result.stderr
    assert tree(out) == before  # the newcomer was not added either
    assert leftovers(tmp_path) == []


def test_a_stray_file_under_a_new_name_is_not_overwritten(tmp_path: Path) -> None:
    out = tmp_path / "site"
    assert kiln_index(make_wheel(tmp_path / "dist1").parent, out).returncode == 0
    newcomer = make_wheel(tmp_path / "dist2", version="0.2.0+pt213cpu")
    (out / "wheels" / newcomer.name).write_bytes(b"someone put other bytes here")
    before = tree(out)
    result = kiln_index(tmp_path / "dist2", out)
    assert result.returncode == 1
    assert "already holds other bytes" in result.stderr
    assert tree(out) == before


def test_a_wheel_whose_record_lies_is_refused_before_the_audit(tmp_path: Path) -> None:
    good = make_wheel(tmp_path / "build")
    bad = tamper(make_wheel(tmp_path / "build2", version="0.2.0+pt213cpu"), tmp_path / "dist")
    shutil.copy2(good, tmp_path / "dist" / good.name)
    out = tmp_path / "site"

    result = kiln_index(tmp_path / "dist", out)

    assert result.returncode == 2, result.stdout + result.stderr
    assert f"{bad.name}: not a kiln wheel: RECORD" in result.stderr  # the rule it breaks, by name
    assert not out.exists()
    assert leftovers(tmp_path) == []


def test_two_runs_at_once_both_land(tmp_path: Path) -> None:
    out = tmp_path / "site"
    assert kiln_index(make_wheel(tmp_path / "dist0", version="0.0.1+pt213cpu").parent, out).returncode == 0
    versions = ("0.1.0", "0.2.0", "0.3.0")
    dists = [make_wheel(tmp_path / f"dist-{v}", version=f"{v}+pt213cpu").parent for v in versions]
    runs = [subprocess.Popen([sys.executable, str(KILN), "index", str(d), str(out)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for d in dists]
    for run in runs:
        _stdout, stderr = run.communicate(timeout=300)
        assert run.returncode == 0, stderr
    assert _listed(out) == [f"opkiln-{v}+pt213cpu-cp311-cp311-linux_x86_64.whl" for v in ("0.0.1", *versions)]
    assert leftovers(tmp_path) == []


def test_a_folder_kiln_did_not_create_is_kept_whatever_its_name(tmp_path: Path) -> None:
    stale = tmp_path / ".site.tmp-killed"  # looks like kiln's staging; a maintainer made it
    (stale / "wheels").mkdir(parents=True)
    (stale / "wheels" / "half.whl").write_bytes(b"half")
    result = kiln_index(make_wheel(tmp_path / "dist").parent, tmp_path / "site")
    assert result.returncode == 0, result.stderr
    assert "removed" not in result.stdout
    assert (stale / "wheels" / "half.whl").read_bytes() == b"half"
    assert leftovers(tmp_path) == [stale.name]


def test_readers_never_see_a_missing_or_partial_site(server: Server, tmp_path: Path) -> None:
    """While releases merge, a client fetching pages over HTTP always gets complete, consistent ones."""
    out = server.root / "busy"
    assert kiln_index(make_wheel(tmp_path / "dist0", version="0.0.1+pt213cpu").parent, out).returncode == 0
    stop = threading.Event()
    seen: list[str] = []
    failures: list[str] = []

    def read() -> None:
        pages = ("index.html", "cpu/torch2.13/index.html", "simple/opkiln/", "kiln-index.json")
        while not stop.is_set() and len(seen) < 5000:
            for page in pages:
                try:
                    with urllib.request.urlopen(f"{server.url}busy/{page}", timeout=10) as response:
                        body = response.read().decode()
                except OSError as exc:
                    failures.append(f"{page}: {exc}")
                    continue
                complete = json.loads(body) if page.endswith(".json") else body.endswith("</html>\n")
                if not complete:
                    failures.append(f"{page}: truncated")
                seen.append(page)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for version in ("0.1.0", "0.2.0", "0.3.0"):
            result = kiln_index(make_wheel(tmp_path / f"dist-{version}", version=f"{version}+pt213cpu").parent, out)
            assert result.returncode == 0, result.stderr
    finally:
        stop.set()
        reader.join(timeout=60)
    assert seen
    assert failures == []
    assert len(_listed(out)) == 4
