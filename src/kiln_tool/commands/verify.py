"""kiln verify --index URL (--allowed-signers FILE --identity NAME | --repository OWNER/NAME [--workflow PATH])
            [WHEEL ...] [--installed DIST ...] [--all]

Checks the latest signed release of the index at URL (its signature by the expected identity, and the
chain back to its first release), then each file given against it: downloaded wheels by sha256, installed
distributions by the digest of the files on disk, and with --all every file the index serves (pages,
kiln-index.json, wheels, METADATA) as served now. One line per file saying what holds or what does not.
Nothing unsigned passes: a missing signature is a failure. docs/verifying.md.
exit codes: 0 every line OK, 1 a line FAILed, 2 usage.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "verify wheels, installed packages or a whole index against its signed release manifest"


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--index", required=True, metavar="URL",
                        help="the index's base URL (where its kiln-release.json lies)")
    parser.add_argument("wheels", nargs="*", type=Path, metavar="WHEEL", help="downloaded wheel files to check")
    parser.add_argument("--installed", action="append", default=[], metavar="DIST",
                        help="an installed distribution (this Python's) to check; repeatable")
    parser.add_argument("--all", action="store_true", help="check every file the index serves, as served now")
    parser.add_argument("--allowed-signers", type=Path, default=None, metavar="FILE",
                        help="key mode: the OpenSSH allowed-signers file naming the project's key")
    parser.add_argument("--identity", default=None, metavar="NAME", help="key mode: the principal in that file")
    parser.add_argument("--repository", default=None, metavar="OWNER/NAME",
                        help="keyless: the GitHub repository whose workflow signs the releases")
    parser.add_argument("--workflow", default=None, metavar="PATH",
                        help="keyless: the workflow file that may sign (e.g. .github/workflows/release.yml)")
    parser.add_argument("--state", type=Path, default=None, metavar="FILE",
                        help="where the newest verified release per index is kept, to refuse a rolled-back index "
                        "(default: $XDG_STATE_HOME/kiln/verified.json)")
    parser.add_argument("--no-state", action="store_true", help="neither read nor record the newest verified release")


def execute(args: argparse.Namespace) -> int:
    from kiln_tool.guard.signed import GitHubIdentity, Identity, SshIdentity, state_file
    from kiln_tool.guard.verify import FAIL, verify

    identity: Identity
    if args.repository is not None and (args.allowed_signers is not None or args.identity is not None):
        print("kiln verify: give either --allowed-signers and --identity (key mode) or --repository (keyless)",
              file=sys.stderr)
        return 2
    if args.repository is not None:
        identity = GitHubIdentity(args.repository, args.workflow)
    elif args.allowed_signers is not None and args.identity is not None:
        if args.workflow is not None:
            print("kiln verify: --workflow belongs to keyless (--repository)", file=sys.stderr)
            return 2
        identity = SshIdentity(args.allowed_signers, args.identity)
    else:
        print("kiln verify: name who may sign: --allowed-signers FILE --identity NAME (key mode) or --repository "
              "OWNER/NAME [--workflow PATH] (keyless); nothing is verified without an expected identity",
              file=sys.stderr)
        return 2
    if not args.index.startswith(("http://", "https://")):
        print(f"kiln verify: {args.index[:200]!r}: the index is an http(s) URL", file=sys.stderr)
        return 2
    if not (args.wheels or args.installed or args.all):
        print("kiln verify: nothing to check: give WHEEL files, --installed DIST or --all", file=sys.stderr)
        return 2
    state = None if args.no_state else (args.state or state_file())
    lines = verify(args.index, identity, wheels=args.wheels, installed=args.installed, whole_index=args.all,
                   state=state)
    for line in lines:
        print(line.render())
    failed = sum(1 for line in lines if line.status == FAIL)
    print(f"kiln verify: {len(lines) - failed} of {len(lines)} check(s) hold" +
          (f"; {failed} FAILED: do not trust what failed" if failed else ""), file=sys.stderr if failed else sys.stdout)
    return 1 if failed else 0
