"""`kiln audit`: the post-build ELF audit that rejects broken artifacts.

The interface the wheel pipeline (`kiln wheels`) and `kiln index` call::

    from kiln_tool.audit import audit_paths, AuditOptions, AuditInputError

    report = audit_paths([Path("dist/opkiln-...whl")],
                         AuditOptions(torch_lib=None, cuda_archs=None, policy="manylinux_2_28"))
    report.ok              # True when every check of every artifact passed
    report.to_json()       # {"schema", "ok", "check_ids", "artifacts": [{"path", "kind", "ok", "target",
                           #   "checks": [...], "libraries": [{"path", "ok", "cuda_manifest",
                           #   "checks": [{"id", "ok", "detail", "fix"}]}]}]}
    report.render_text()   # a table per artifact, failures first, each with its fix

audit_paths raises AuditInputError (a ValueError) for input that cannot be audited at all: a
missing file, a directory, a symlink, a non-zip "wheel", a zip bomb, an oversized file, a
loose file that is not ELF. `kiln audit` exits 2 for those, 1 when a check fails, 0 otherwise.

AuditOptions:
    torch_lib   the target torch's lib directory. Default: the torch whose version the wheel's
                build info names, else one matching its torch requirement, found in the running
                interpreter or the repo's venvs (.venv, .venvs/*).
    cuda_archs  TORCH_CUDA_ARCH_LIST syntax ("8.0;9.0a;12.0+PTX"). Default: the build info's.
    policy      data/audit_policy/<policy>.json: symbol-version ceilings for artifacts whose tag
                claims no manylinux policy (a wheel tagged manylinux_X_Y is held to that policy),
                and the platform floor when the target torch's own is unknown.

Check ids are in CHECK_IDS; each module under checks/ holds the checks of one concern.
Everything is read statically with pyelftools; no audited library is ever loaded.
"""

from __future__ import annotations

from .engine import AuditOptions, audit_paths
from .errors import AuditInputError
from .report import CHECK_IDS, ArtifactReport, AuditReport, CheckResult, LibraryReport

__all__ = ["CHECK_IDS", "ArtifactReport", "AuditInputError", "AuditOptions", "AuditReport", "CheckResult",
           "LibraryReport", "audit_paths"]
