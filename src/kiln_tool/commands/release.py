"""kiln release DIST SITE --base-url URL (--published URL | --first-release) [--storage FILE --repository R --tag T]
             [--sign-key KEY | --sign-keyless] [--sdist PATH ...]

Records the torch ABIs the wheels need, audits them with the release rules, fetches the published
site's manifest into SITE (and any wheel it still keeps in the site folder, checked by sha256), uploads
the new wheels to the storage data/storage.json names (default: the assets of the release of --tag),
reads each back by the storage's digest, and only then lists them in SITE; with a signer, SITE then gets the
next signed release manifest, chained to the published one (docs/verifying.md). --sdist publishes the project's
sdist (`kiln sdist`) beside the wheels: stored, listed on source/index.html and signed like them.
release.yml runs exactly this; `kiln release-rehearsal` runs it here against a site served on 127.0.0.1.
exit codes: 0 released, 1 refused (audit, a published name with other bytes, a published file
that does not match its manifest), 2 unusable input.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

SIGNING_STANDIN_ENV = "KILN_SIGNING_STANDIN_KEY"
HELP = "the release path: record torch ABIs, audit (--release), fetch the published site, merge the wheels"


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dist", type=Path, metavar="DIST_DIR", help="the release's wheels")
    parser.add_argument("site", type=Path, metavar="SITE_DIR", help="empty or missing folder: the site to deploy")
    parser.add_argument("--base-url", required=True, metavar="URL", help="the URL the site is served at")
    parser.add_argument("--published", metavar="URL", default=None,
                        help="the published site to merge onto (default: --base-url)")
    parser.add_argument("--first-release", action="store_true",
                        help="nothing is published yet: a missing manifest (HTTP 404) starts an empty site")
    parser.add_argument("--storage", type=Path, default=None, metavar="FILE",
                        help="where wheels live (docs/storage.md; default: data/storage.json, the release assets)")
    parser.add_argument("--repository", default=None, metavar="OWNER/NAME",
                        help="github-release storage: the repository (default: $GITHUB_REPOSITORY)")
    parser.add_argument("--tag", default=None, help="github-release storage: the release's tag (default: $TAG)")
    parser.add_argument("--sdist", action="append", type=Path, default=[], metavar="PATH",
                        help="publish this sdist (kiln sdist's build/sdist/<name>-<version>.tar.gz: unlabelled, one "
                             "per version, this project's) beside the wheels; repeatable")
    sign = parser.add_mutually_exclusive_group()
    sign.add_argument("--sign-key", type=Path, default=None, metavar="KEY",
                      help="sign the release manifest with this OpenSSH private key (ssh-keygen -Y sign; users "
                      "verify with an allowed-signers file: docs/verifying.md)")
    sign.add_argument("--sign-keyless", action="store_true",
                      help="sign keyless with sigstore through the CI job's OIDC identity (needs torch-kiln[signing])")


def execute(args: argparse.Namespace) -> int:
    from kiln_tool.release import ReleaseError, run_release
    from kiln_tool.signing import Signer, SigstoreSigner, SshSigner

    signer: Signer | None = SshSigner(args.sign_key) if args.sign_key else \
        SigstoreSigner() if args.sign_keyless else None
    standin = os.environ.get(SIGNING_STANDIN_ENV, "")
    if args.sign_keyless and standin:
        # No OIDC identity and no sigstore service here (tests of the workflow's release step): a key stands in.
        print(f"kiln release: STAND-IN signing ({SIGNING_STANDIN_ENV}={standin}): --sign-keyless signs with that "
              "OpenSSH key, not keyless; never set it in a real release", file=sys.stderr)
        signer = SshSigner(Path(standin))
    if args.sign_key is not None and not args.sign_key.is_file():
        print(f"kiln release: --sign-key {args.sign_key}: no such file", file=sys.stderr)
        return 2
    try:
        result = run_release(args.dist, args.site, args.base_url, args.published or args.base_url,
                             first_release=args.first_release, storage_config=args.storage,
                             repository=args.repository, tag=args.tag, signer=signer, sdists=args.sdist)
    except ReleaseError as exc:
        print(f"kiln release: {exc}", file=sys.stderr)
        return exc.exit_code
    print(f"kiln release: {len(result.added)} wheel(s) added ({len(result.uploaded)} uploaded to storage), "
          f"{len(result.unchanged)} already published, {result.fetched} fetched ({result.downloaded_bytes} bytes "
          f"downloaded); {args.site} is ready to deploy")
    return 0
