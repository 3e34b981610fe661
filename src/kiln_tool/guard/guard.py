"""The two lines a package's ``__init__.py`` needs: ``from ._kiln import guard`` and ``guard.load(__name__)``.

``load`` runs the preflight, loads the libraries the build info declares and proves every op of the manifest
is registered, or raises the package's ``<Package>EnvironmentError`` (an ImportError) with the exact fix.

Under ``python -m <package> doctor`` / ``python -m <package>._kiln doctor`` Python imports the package first,
so a failing load would stop the doctor before it starts. There ``load`` runs the doctor itself with the
failure in hand and exits with its status: the doctor works exactly when the import does not.
"""

from __future__ import annotations

import sys

from .buildinfo import PACKAGE, build_info
from .preflight import GuardError, error_class

import_error: BaseException | None = None
"""What ``load`` raised, kept for the doctor."""

__all__ = ["GuardError", "build_info", "doctor_requested", "error_class", "import_error", "load"]


def doctor_requested() -> list[str] | None:
    """The doctor's arguments when this process is ``python -m <package>[._kiln][.__main__] doctor ...`` (or the
    distributed check, ``-m <package>._kiln.ranks ...``) and Python is importing the package on the way to that
    module (``sys.argv[0]`` is then ``-m``)."""
    argv = getattr(sys, "orig_argv", [])
    if sys.argv[:1] != ["-m"] or "-m" not in argv:
        return None
    at = argv.index("-m") + 1
    target = argv[at] if at < len(argv) else ""
    if target == f"{PACKAGE}._kiln.ranks":
        return ["doctor", "--ranks", *sys.argv[1:]]
    wanted = {PACKAGE, f"{PACKAGE}.__main__", f"{PACKAGE}._kiln", f"{PACKAGE}._kiln.__main__"}
    return sys.argv[1:] if target in wanted and sys.argv[1:2] == ["doctor"] else None


def load(package: str) -> None:
    """Load ``package``'s libraries (its ``__name__``) or raise its EnvironmentError; see the module doc."""
    global import_error
    if package != PACKAGE:
        raise ImportError(f"{package}: its _kiln guard belongs to {PACKAGE!r} (copied from another package?)",
                          name=package)
    try:
        from .loader import load_libraries

        load_libraries()
    except Exception as exc:
        import_error = exc
        args = doctor_requested()
        if args is None:
            raise
        from .__main__ import main

        raise SystemExit(main(args, package_error=exc)) from None
