"""Issue 46's attacks on a signed index served on 127.0.0.1: each is refused by `kiln verify`, naming the file and
the reason; nothing unsigned or unverifiable passes."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from index.storage_servers import Http, http_server
from index.synthetic_wheels import tamper
from kiln_tool.guard.signed import canonical, release_name
from signing.signed_sites import PRINCIPAL, History, Keys, make_keys
from trust.kiln_runs import Run, kiln

LATEST = "kiln-release.json"


@pytest.fixture
def served(history: History, tmp_path: Path) -> Iterator[tuple[Path, Http]]:
    """A copy of the two-release index (the site the attacker controls), served under /idx/."""
    site = tmp_path / "www" / "idx"
    shutil.copytree(history.second, site)
    with http_server(tmp_path / "www") as http:
        yield site, http


def verify(http: Http, keys: Keys, *args: str | Path, identity: str = PRINCIPAL) -> Run:
    return kiln("verify", "--index", f"{http.url}idx/", "--allowed-signers", keys.allowed_signers,
                "--identity", identity, "--no-state", *args)


def lines(run: Run) -> dict[str, str]:
    """subject -> 'STATUS: text' of each line kiln verify printed."""
    found = {}
    for line in run.stdout.splitlines():
        if not line.startswith(("OK  ", "FAIL  ")):
            continue
        status, _, rest = line.partition("  ")
        subject, _, text = rest.partition(": ")
        found[subject.strip()] = f"{status.strip()}: {text}"
    return found


def test_the_untouched_index_verifies_file_by_file(served: tuple[Path, Http], keys: Keys, history: History) -> None:
    site, http = served
    run = verify(http, keys, "--all", history.wheel_a, history.wheel_b)
    assert run.code == 0, run.stdout + run.stderr
    said = lines(run)
    assert said[LATEST].startswith(f"OK: release 2 of opkiln, signed by {PRINCIPAL}")
    assert "chain of 2 release(s) is intact" in said[LATEST]
    served_files = {p.relative_to(site).as_posix() for p in site.rglob("*") if p.is_file()}
    signed = {s for s in said if s != LATEST and (s.startswith("wheels/") or not s.endswith(".whl"))}
    assert signed == served_files - {LATEST} - {p for p in served_files if p.startswith("releases/")}
    assert all(text.startswith("OK: ") for text in said.values())


def test_a_wheel_swapped_with_its_page_hashes_is_refused(served: tuple[Path, Http], keys: Keys, history: History,
                                                         tmp_path: Path) -> None:
    site, http = served
    name = history.wheel_b.name
    swapped = tamper(history.wheel_b, tmp_path / "evil")
    old, new = (hashlib.sha256(p.read_bytes()).hexdigest() for p in (history.wheel_b, swapped))
    shutil.copyfile(swapped, site / "wheels" / name)
    rewritten = []
    for page in site.rglob("*"):
        if page.is_file() and not page.name.endswith(".whl") and old.encode() in page.read_bytes() \
                and not page.relative_to(site).as_posix().startswith("releases/") and page.name != LATEST:
            page.write_bytes(page.read_bytes().replace(old.encode(), new.encode()))
            rewritten.append(page.relative_to(site).as_posix())
    assert "kiln-index.json" in rewritten and len(rewritten) >= 3  # the pages pip trusts now agree with the wheel
    run = verify(http, keys, "--all", swapped)
    assert run.code == 1, run.stdout + run.stderr
    said = lines(run)
    assert said[f"wheels/{name}"].startswith("FAIL: ") and "altered on the host" in said[f"wheels/{name}"]
    for page in rewritten:
        assert said[page].startswith("FAIL: ") and "not the" in said[page], (page, said[page])
    assert said[name].startswith("FAIL: sha256 ") and "another file under its name" in said[name]
    assert said[f"wheels/{history.wheel_a.name}"].startswith("OK: ")  # the rest still holds, line by line


def test_a_page_rolled_back_to_the_older_release_is_refused(served: tuple[Path, Http], keys: Keys,
                                                            history: History) -> None:
    site, http = served
    rolled = []
    for page in history.first.rglob("*.html"):
        rel = page.relative_to(history.first)
        if page.read_bytes() != (site / rel).read_bytes():
            shutil.copyfile(page, site / rel)
            rolled.append(rel.as_posix())
    assert rolled, "the two releases' pages do not differ"
    run = verify(http, keys, "--all")
    assert run.code == 1
    said = lines(run)
    for rel in rolled:
        assert said[rel] == "FAIL: rolled back: these are the bytes of release 1, not of the latest signed release 2"


def test_a_whole_index_rolled_back_is_refused_once_a_newer_release_was_seen(history: History, keys: Keys,
                                                                            tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    www = tmp_path / "www"
    shutil.copytree(history.second, www / "idx")
    with http_server(www) as http:
        args = ["verify", "--index", f"{http.url}idx/", "--allowed-signers", keys.allowed_signers, "--identity",
                PRINCIPAL, "--state", state, history.wheel_a]
        assert kiln(*args).code == 0
        shutil.rmtree(www / "idx")
        shutil.copytree(history.first, www / "idx")  # every file of release 1, signatures included: all genuine
        run = kiln(*args)
    assert run.code == 1
    assert lines(run)[LATEST].startswith("FAIL: release 1 is older than release 2, verified here before")
    assert lines(run)[history.wheel_a.name] == "FAIL: not checked: no verified release"


def test_a_signature_of_another_key_or_principal_is_refused(served: tuple[Path, Http], keys: Keys,
                                                            tmp_path: Path) -> None:
    site, http = served
    run = verify(http, keys, "--all", identity="someone-else@opkiln.example")
    assert run.code == 1 and lines(run)[LATEST].startswith(f"FAIL: {release_name(2)}.sig: not a good signature by "
                                                           "someone-else@opkiln.example")
    import subprocess

    head = site / release_name(2)
    (site / f"{release_name(2)}.sig").unlink()
    subprocess.run(["ssh-keygen", "-Y", "sign", "-q", "-f", str(keys.other), "-n", "kiln-release", str(head)],
                   check=True, timeout=60)  # a real signature, by a key the allowed signers do not name
    run = verify(http, keys, "--all")
    assert run.code == 1
    assert lines(run)[LATEST].startswith(f"FAIL: {release_name(2)}.sig: not a good signature by {PRINCIPAL}")
    # Another repository's allowed signers naming the same principal with their key: still refused.
    theirs = make_keys(tmp_path / "theirs")
    run = kiln("verify", "--index", f"{http.url}idx/", "--allowed-signers", theirs.allowed_signers, "--identity",
               PRINCIPAL, "--no-state", "--all")
    assert run.code == 1 and "not a good signature" in lines(run)[LATEST]


def test_no_signature_is_a_failure_never_unverified(served: tuple[Path, Http], keys: Keys) -> None:
    site, http = served
    (site / f"{release_name(2)}.sig").unlink()
    run = verify(http, keys, "--all")
    assert run.code == 1
    assert lines(run)[LATEST] == f"FAIL: {release_name(2)}.sig: missing: an unsigned release is never accepted"
    assert "OK" not in run.stdout


@pytest.mark.parametrize("damage", ["truncated", "reordered", "resorted keys"])
def test_a_truncated_or_reordered_manifest_is_refused(served: tuple[Path, Http], keys: Keys, damage: str) -> None:
    site, http = served
    raw = (site / LATEST).read_bytes()
    doc = json.loads(raw)
    if damage == "truncated":
        changed = raw[: len(raw) // 2]
    elif damage == "reordered":
        doc["files"].reverse()
        changed = canonical(doc)
    else:
        changed = json.dumps(doc, indent=1).encode()
    for target in (site / LATEST, site / release_name(2)):
        target.write_bytes(changed)
    run = verify(http, keys, "--all")
    assert run.code == 1
    reason = {"truncated": "not a JSON document (truncated or altered)",
              "reordered": "files out of order", "resorted keys": "not in canonical form"}[damage]
    assert lines(run)[LATEST].startswith(f"FAIL: {reason}"), lines(run)[LATEST]


def test_a_truncated_manifest_under_its_own_signature_check_is_refused(served: tuple[Path, Http], keys: Keys) -> None:
    """The signature alone refuses any change: an entry dropped from the list, canonical form kept."""
    site, http = served
    doc = json.loads((site / LATEST).read_bytes())
    doc["files"] = doc["files"][:-1]
    for target in (site / LATEST, site / release_name(2)):
        target.write_bytes(canonical(doc))
    run = verify(http, keys, "--all")
    assert run.code == 1
    assert lines(run)[LATEST].startswith(f"FAIL: {release_name(2)}.sig: not a good signature by {PRINCIPAL}")


def test_a_release_whose_chain_skips_one_is_refused(history: History, keys: Keys, tmp_path: Path) -> None:
    """Release 3, validly signed, names release 1 as the one before it: release 2 would silently drop out."""
    import subprocess

    site = tmp_path / "www" / "idx"
    shutil.copytree(history.second, site)
    head = json.loads((site / LATEST).read_bytes())
    head["sequence"] = 3
    head["previous"] = hashlib.sha256((site / release_name(1)).read_bytes()).hexdigest()
    raw = canonical(head)
    (site / release_name(3)).write_bytes(raw)
    (site / LATEST).write_bytes(raw)
    subprocess.run(["ssh-keygen", "-Y", "sign", "-q", "-f", str(keys.release), "-n", "kiln-release",
                    str(site / release_name(3))], check=True, timeout=60)
    with http_server(tmp_path / "www") as http:
        run = verify(http, keys, "--all")
    assert run.code == 1
    assert lines(run)[LATEST].startswith(f"FAIL: {release_name(3)}: its chain skips or replaces release 2")


def test_a_missing_release_in_the_chain_is_refused(served: tuple[Path, Http], keys: Keys) -> None:
    site, http = served
    (site / release_name(1)).unlink()
    run = verify(http, keys, "--all")
    assert run.code == 1
    assert lines(run)[LATEST] == f"FAIL: {release_name(1)}: missing (HTTP 404): the chain from release 2 is broken"


def test_an_index_without_signed_releases_fails(keys: Keys, tmp_path: Path, history: History) -> None:
    site = tmp_path / "www" / "idx"
    shutil.copytree(history.second, site)
    for path in [site / LATEST, *sorted((site / "releases").iterdir())]:
        path.unlink()
    with http_server(tmp_path / "www") as http:
        run = verify(http, keys, history.wheel_a)
    assert run.code == 1
    assert lines(run)[LATEST].startswith("FAIL: missing (HTTP 404)")
    assert lines(run)[history.wheel_a.name] == "FAIL: not checked: no verified release"


def test_verify_wants_an_identity_and_something_to_check(keys: Keys) -> None:
    run = kiln("verify", "--index", "http://127.0.0.1:9/idx/", "--all")
    assert run.code == 2 and "nothing is verified without an expected identity" in run.stderr
    run = kiln("verify", "--index", "http://127.0.0.1:9/idx/", "--allowed-signers", keys.allowed_signers,
               "--identity", "x")
    assert run.code == 2 and "nothing to check" in run.stderr
    run = kiln("verify", "--index", "http://127.0.0.1:9/idx/", "--repository", "not a repo", "--all", "--no-state")
    assert run.code == 1 and "not OWNER/NAME" in run.stdout
