"""``python -m <package>._kiln doctor [--json] [--ranks ...] [--verify ...]``: check this environment for the
package; exit 1 when a problem is found. ``--verify``: the installed files against the index's signed release."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .buildinfo import INDEX_URL_ENV, PACKAGE


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog or f"python -m {PACKAGE}._kiln",
                                     description=f"check this environment for {PACKAGE}; exit 1 on a problem")
    commands = parser.add_subparsers(dest="command", required=True)
    doctor = commands.add_parser("doctor", help=f"report Python, torch, CUDA, GPUs and {PACKAGE}'s build; give a "
                                                "verdict and the exact fix")
    doctor.add_argument("--json", action="store_true", help="machine-readable report (schema in the 'schema' field)")
    doctor.add_argument("--verify", action="store_true",
                        help=f"check the installed {PACKAGE} against its index's signed release (docs/verifying.md): "
                             "with --allowed-signers FILE --identity NAME (key mode) or --repository OWNER/NAME "
                             "[--workflow PATH] (keyless)")
    doctor.add_argument("--index", default=None, metavar="URL",
                        help=f"--verify: the index's base URL (default: ${INDEX_URL_ENV}, else the build info's "
                             "index_url)")
    doctor.add_argument("--allowed-signers", type=Path, default=None, metavar="FILE",
                        help="--verify, key mode: the OpenSSH allowed-signers file of the project's key")
    doctor.add_argument("--identity", default=None, metavar="NAME", help="--verify, key mode: the principal in it")
    doctor.add_argument("--repository", default=None, metavar="OWNER/NAME",
                        help="--verify, keyless: the GitHub repository whose workflow signs releases")
    doctor.add_argument("--workflow", default=None, metavar="PATH",
                        help="--verify, keyless: the workflow file that may sign")
    doctor.add_argument("--ranks", action="store_true",
                        help="the distributed check: every rank of a torchrun job compares its answer (see "
                             "docs/distributed-check.md); the arguments after --ranks are its own")
    return parser


def main(argv: list[str] | None = None, package_error: BaseException | None = None, prog: str | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--ranks" in argv:
        # Everything after --ranks belongs to the distributed check (imported only when asked for).
        at = argv.index("--ranks")
        build_parser(prog).parse_args(argv[:at + 1])
        from . import ranks

        return int(ranks.main(PACKAGE, argv[at + 1:]))
    args = build_parser(prog).parse_args(argv)
    if args.verify:
        return _verify(args)
    if package_error is None:
        from . import guard

        package_error = guard.import_error
    from . import doctor

    return doctor.main(json_output=args.json, package_error=package_error)


def _verify(args: argparse.Namespace) -> int:
    """doctor --verify: the installed distribution against the signed release of its index (guard/verify.py),
    one line per check; exit 1 on any failure. Needs nothing beyond the package (and ssh-keygen in key mode)."""
    import os

    from .buildinfo import BuildInfoMissing, build_info, distribution
    from .signed import GitHubIdentity, Identity, SshIdentity, state_file
    from .verify import FAIL, verify

    prog = f"python -m {PACKAGE}._kiln doctor --verify"
    identity: Identity
    if args.repository is not None and args.allowed_signers is None and args.identity is None:
        identity = GitHubIdentity(args.repository, args.workflow)
    elif args.allowed_signers is not None and args.identity is not None and args.repository is None:
        identity = SshIdentity(args.allowed_signers, args.identity)
    else:
        print(f"{prog}: name who may sign: --allowed-signers FILE --identity NAME (key mode) or --repository "
              "OWNER/NAME [--workflow PATH] (keyless)", file=sys.stderr)
        return 2
    try:
        info = build_info()
    except BuildInfoMissing as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1
    index = args.index or os.environ.get(INDEX_URL_ENV) or str(info.get("index_url") or "")
    if not index.startswith(("http://", "https://")):
        print(f"{prog}: no index URL: pass --index URL or set {INDEX_URL_ENV}", file=sys.stderr)
        return 2
    lines = verify(index, identity, installed=[distribution(info)], state=state_file())
    for line in lines:
        print(line.render())
    failed = [line for line in lines if line.status == FAIL]
    print(f"Verdict: {'FAIL' if failed else 'OK'}: {PACKAGE} " + ("does not verify against" if failed else
          "is what was signed in") + f" {index}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
