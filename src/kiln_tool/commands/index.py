"""kiln index DIST_DIR OUT_DIR [--base-url URL]: publish audited wheels as a static pip-installable site."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "write (or merge into) a static wheel index: find-links pages, flat pages, a simple index, a landing page"

EPILOG = """\
layout of OUT_DIR:
  index.html                     landing page: chooser and coverage table
  <cuda>/torch<X.Y>/index.html   pip install <project> -f <url of this page>   (e.g. cu130/torch2.14/)
  torch-<X.Y>.0+<cuda>.html      the same, flat (pip install <project> -f <url>)
  simple/<project>/index.html    PEP 503 simple index (pip install --index-url <url>/simple <project>)
  wheels/<wheel>[.metadata]      the wheels and their METADATA (PEP 658), unless --storage puts
                                 them elsewhere (docs/storage.md: release assets, an S3 bucket);
                                 pages then link each by its absolute URL with #sha256
  sdist/<name>-<version>.tar.gz  the sources (--sdist), unless --storage puts them beside the wheels
  source/index.html              the sdists alone: pip install <project> --no-binary <project>
                                 --no-build-isolation -f <url of this page> (a torch no page has)
  kiln-index.json                what is published, with sha256 (and each stored file's URL)

OUT_DIR is merged, never rewritten: published wheels stay; a wheel that is the same
distribution as a published one (normalized name, version and tags) with other bytes is
refused, and every published file is verified by sha256 first. Every new wheel is audited.
exit codes: 0 ok, 1 refused (audit failed, a published distribution with other bytes, a
published file altered), 2 unusable input (bad wheel, bad kiln-index.json, bad folders).
Runs on one OUT wait for each other (a lock in $KILN_LOCK_DIR, default
$TMPDIR/kiln-locks-<uid>). See docs/security.md for what the index guarantees and trusts.
"""


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    parser.add_argument("dist", metavar="DIST_DIR", type=Path, help="directory of wheels to publish (e.g. dist)")
    parser.add_argument("out", metavar="OUT_DIR", type=Path, help="the site to create or merge into (e.g. site)")
    parser.add_argument("--base-url", metavar="URL", default=None,
                        help="public URL OUT_DIR is served at, for the commands on the landing page "
                             "(kept for later runs; links between pages are relative either way)")
    parser.add_argument("--storage", type=Path, default=None, metavar="FILE",
                        help="where new wheels go (docs/storage.md: site, github-release, s3); default: the site "
                             "folder (wheels/ in OUT_DIR)")
    parser.add_argument("--repository", default=None, metavar="OWNER/NAME",
                        help="github-release storage: the repository (default: $GITHUB_REPOSITORY)")
    parser.add_argument("--tag", default=None, help="github-release storage: the release's tag (default: $TAG)")
    parser.add_argument("--sdist", action="append", type=Path, default=[], metavar="PATH",
                        help="publish this sdist of the project beside the wheels (kiln sdist makes it in "
                             "build/sdist/: unlabelled, one per version; repeatable)")
    parser.add_argument("--trust-published-sizes", action="store_true",
                        help="check published wheels by size only instead of sha256 (faster on huge sites; "
                             "a same-size alteration then goes unnoticed: see docs/security.md)")


def execute(args: argparse.Namespace) -> int:
    from kiln_tool.index import KilnIndexError, build_index
    from kiln_tool.index.publish import MergeCutShortError
    from kiln_tool.index.storage import load_config, open_storage

    try:
        storage = None
        if args.storage is not None:
            storage = open_storage(load_config(args.storage), repository=args.repository, tag=args.tag)
        result = build_index(args.dist, args.out, args.base_url, log=print,
                             verify_published=not args.trust_published_sizes, storage=storage, sdists=args.sdist)
    except MergeCutShortError as exc:  # the site changed: the message says exactly how far
        print(f"kiln index: {exc}", file=sys.stderr)
        return exc.exit_code
    except KilnIndexError as exc:
        print(f"kiln index: {exc}", file=sys.stderr)
        print("kiln index: nothing written", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:  # before the site changed (a full disk, a folder not ours to write): OUT as it was
        print(f"kiln index: cannot write the site: {exc}", file=sys.stderr)
        print("kiln index: nothing written (the site is as it was)", file=sys.stderr)
        return 2
    for wheel in result.added:
        combos = ", ".join(c.page.removesuffix("index.html") for c in wheel.combos)
        print(f"added {wheel.filename} -> {combos}")
    for sdist in result.added_sdists:
        print(f"added {sdist.filename} -> source/")
    for name in result.unchanged:
        print(f"already published, same bytes: {name}")
    print(f"{result.out}: {result.total} wheel(s) in {len(result.combos)} combination(s), "
          f"{len(result.added)} new")
    return 0
