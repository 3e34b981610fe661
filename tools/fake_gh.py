#!/usr/bin/env python3
"""A stand-in for `gh` (NOT GitHub's CLI): release assets kept in a local folder, for tests and the rehearsal.

Put it on PATH as `gh` (tools/fake_gh.py install BIN_DIR writes BIN_DIR/gh). It answers exactly the
calls kiln and release.yml make, the way gh answers them, and refuses everything else (exit 9):

  gh release view TAG --repo R [--json assets]   assets: name, size, digest (sha256:...), state, url
  gh release create TAG --repo R [...]            a new, empty release
  gh release upload TAG FILE... --repo R          never over an existing name (gh without --clobber)
  gh release list ... --json tagName --jq ...      prints $FAKE_EARLIER_RELEASES (with --jq '.[].tagName':
                                                   that many other tags, one a line)
  gh release list --repo R --json tagName [...]   every release's tag (JSON), as gh prints it
  gh api repos/R/pages --jq .html_url              prints $FAKE_PAGES_URL

Assets live in $FAKE_GH_ROOT/R/releases/download/TAG/NAME: serve $FAKE_GH_ROOT over HTTP and set
$FAKE_GH_DOWNLOAD_URL to its URL, and each asset's url is what GitHub's browser_download_url would be
on that server. Faults, for tests: $FAKE_GH_LIE_DIGEST=NAME reports a wrong sha256 for NAME;
$FAKE_GH_FAIL_AFTER=N makes the N+1th upload of this process tree fail (an interrupted release;
the count lives in $FAKE_GH_ROOT/.uploads). $FAKE_GH_LOG=FILE appends "COMMAND SUBCOMMAND" of each call.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from urllib.parse import quote


def _die(message: str, code: int = 1) -> int:
    print(message, file=sys.stderr)
    return code


def _option(args: list[str], name: str) -> str | None:
    if name in args:
        i = args.index(name)
        value = args[i + 1]
        del args[i:i + 2]
        return value
    return None


def _release_dir(repo: str, tag: str) -> Path:
    return Path(os.environ["FAKE_GH_ROOT"]) / repo / "releases" / "download" / tag


def _assets(repo: str, tag: str) -> list[dict[str, object]]:
    base = os.environ.get("FAKE_GH_DOWNLOAD_URL", "http://127.0.0.1:9/").rstrip("/") + "/"
    lie = os.environ.get("FAKE_GH_LIE_DIGEST")
    assets = []
    for path in sorted(_release_dir(repo, tag).iterdir()):
        if path.name.startswith("."):
            continue
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if path.name == lie:
            digest = hashlib.sha256(b"not " + digest.encode()).hexdigest()
        assets.append({"name": path.name, "size": path.stat().st_size, "digest": f"sha256:{digest}",
                       "state": "uploaded", "url": f"{base}{repo}/releases/download/{tag}/{quote(path.name)}"})
    return assets


def _upload(repo: str, tag: str, files: list[str]) -> int:
    where = _release_dir(repo, tag)
    if not where.is_dir():
        return _die(f"release not found: {tag}")
    counter = Path(os.environ["FAKE_GH_ROOT"]) / ".uploads"
    done = int(counter.read_text()) if counter.exists() else 0
    fail_after = os.environ.get("FAKE_GH_FAIL_AFTER")
    for name in files:
        src = Path(name)
        target = where / src.name
        if target.exists():
            return _die(f"HTTP 422: Validation Failed: asset under the same name already exists: [{src.name}]")
        if fail_after is not None and done >= int(fail_after):
            return _die(f"Post \"https://uploads.github.com/...\": connection reset while uploading {src.name}")
        partial = where / f".{src.name}.partial"
        partial.write_bytes(src.read_bytes())
        partial.rename(target)
        done += 1
        counter.write_text(str(done))
    return 0


def main(argv: list[str]) -> int:
    args = list(argv)
    if os.environ.get("FAKE_GH_LOG"):  # every call, one a line, for tests that count them
        with Path(os.environ["FAKE_GH_LOG"]).open("a", encoding="utf-8") as log:
            log.write(" ".join(argv[:2]) + "\n")
    if args[:1] == ["api"]:
        if len(args) > 1 and args[1].startswith("repos/") and args[1].endswith("/pages"):
            print(os.environ["FAKE_PAGES_URL"])
            return 0
        return _die(f"fake gh: unexpected {' '.join(argv)}", 9)
    if args[:2] == ["release", "list"]:
        if "--jq" not in args:  # kiln: every release's tag, as gh prints --json tagName
            repo = _option(args, "--repo") or ""
            where = Path(os.environ["FAKE_GH_ROOT"]) / repo / "releases" / "download"
            tags = sorted(p.name for p in where.iterdir()) if where.is_dir() else []
            print(json.dumps([{"tagName": tag} for tag in tags]))
            return 0
        earlier = int(os.environ.get("FAKE_EARLIER_RELEASES", "0"))
        if _option(args, "--jq") == ".[].tagName":  # kiln.yml: the tags, one a line, counted by the caller
            print("".join(f"v0.0.{i}\n" for i in range(earlier)), end="")
            return 0
        print(earlier)
        return 0
    if args[:1] != ["release"] or len(args) < 3:
        return _die(f"fake gh: unexpected {' '.join(argv)}", 9)
    command, tag, rest = args[1], args[2], args[3:]
    repo = _option(rest, "--repo")
    if repo is None:
        return _die("fake gh: --repo is required here", 9)
    if command == "view":
        fields = _option(rest, "--json")
        if not _release_dir(repo, tag).is_dir():
            return _die("release not found")
        if fields is None:
            print(f"title:\t{tag}")
            return 0
        if fields != "assets" or rest:
            return _die(f"fake gh: unexpected {' '.join(argv)}", 9)
        print(json.dumps({"assets": _assets(repo, tag)}))
        return 0
    if command == "create":
        where = _release_dir(repo, tag)
        if where.exists():
            return _die(f"a release with the tag {tag} already exists")
        where.mkdir(parents=True)
        return 0
    if command == "upload":
        if "--clobber" in rest:
            return _die("fake gh: kiln never uploads with --clobber", 9)
        return _upload(repo, tag, rest)
    return _die(f"fake gh: unexpected {' '.join(argv)}", 9)


def install(bin_dir: Path) -> Path:
    """BIN_DIR/gh that runs this stand-in with the Python running now."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    gh = bin_dir / "gh"
    gh.write_text(f"#!/bin/sh\nexec {sys.executable} {Path(__file__).resolve()} \"$@\"\n")
    gh.chmod(0o755)
    return gh


if __name__ == "__main__":
    if sys.argv[1:2] == ["install"] and len(sys.argv) == 3:
        print(install(Path(sys.argv[2])))
        raise SystemExit(0)
    raise SystemExit(main(sys.argv[1:]))
