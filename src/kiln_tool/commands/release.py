"""kiln release DIST SITE --base-url URL (--published URL | --first-release): the release path of release.yml.

Records the torch ABIs the wheels need, audits them with the release rules, fetches the published
site into SITE (checked by sha256) and merges the wheels into it. release.yml runs exactly this;
`kiln release-rehearsal` runs it here against a site served on 127.0.0.1.
exit codes: 0 released, 1 refused (audit, a published name with other bytes, a published file
that does not match its manifest), 2 unusable input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "the release path: record torch ABIs, audit (--release), fetch the published site, merge the wheels"


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dist", type=Path, metavar="DIST_DIR", help="the release's wheels")
    parser.add_argument("site", type=Path, metavar="SITE_DIR", help="empty or missing folder: the site to deploy")
    parser.add_argument("--base-url", required=True, metavar="URL", help="the URL the site is served at")
    parser.add_argument("--published", metavar="URL", default=None,
                        help="the published site to merge onto (default: --base-url)")
    parser.add_argument("--first-release", action="store_true",
                        help="nothing is published yet: a missing manifest (HTTP 404) starts an empty site")


def execute(args: argparse.Namespace) -> int:
    from kiln_tool.release import ReleaseError, run_release

    try:
        result = run_release(args.dist, args.site, args.base_url, args.published or args.base_url,
                             first_release=args.first_release)
    except ReleaseError as exc:
        print(f"kiln release: {exc}", file=sys.stderr)
        return exc.exit_code
    print(f"kiln release: {len(result.added)} wheel(s) added, {len(result.unchanged)} already published, "
          f"{result.fetched} fetched; {args.site} is ready to deploy")
    return 0
