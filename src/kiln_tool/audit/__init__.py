"""`kiln audit`: the post-build ELF audit that rejects broken artifacts.

The interface the wheel pipeline (`kiln wheels`) and `kiln index` call::

    from kiln_tool.audit import audit_paths, AuditOptions, AuditInputError

    report = audit_paths([Path("dist/opkiln-...whl")],
                         AuditOptions(torch_lib=None, cuda_archs=None, policy="manylinux_2_28"))
    report.ok              # True when no check failed with severity "error" (warnings do not fail)
    report.to_json()       # {"schema", "ok", "errors", "warnings", "check_ids", "artifacts": [{"path",
                           #   "kind", "ok", "warnings", "target", "checks": [...], "libraries": [{"path",
                           #   "ok", "warnings", "cuda_manifest", "gpu", "copies", "checks": [{"id", "ok", "severity",
                           #   "finding", "detail", "fix"}]}]}]}
    report.render_text()   # per artifact: errors, then warnings, each with its fix; passes folded into
                           # one line per library (render_text(verbose=True) lists each)

audit_paths raises AuditInputError (a ValueError) for input that cannot be audited at all: a
missing file, a directory, a symlink, a non-zip "wheel", a zip bomb, an oversized file, a
loose file that is not ELF. `kiln audit` exits 2 for those, 1 when a check fails with severity
"error", 0 otherwise. Severity is data: data/audit_policy/common.json "severity", keyed by check id
or "check:finding" (e.g. undefined-symbols:preload is a warning).

AuditOptions:
    torch_lib   the target torch's lib directory. Default: the torch whose version the wheel's
                build info names, else one matching its torch requirement, found in the running
                interpreter or the repo's venvs (.venv, .venvs/*); where none is installed, that
                torch's recorded ABI (data/torch_abi, written by `kiln torch-abi` from the torch
                wheel). With neither, the torch-dependent findings say exactly that.
    torch_version  audit against this torch (installed or recorded), e.g. "2.14.1+cu130".
    gpu         "sm_90": say per library whether that GPU can run its device code.
    cuda_archs  TORCH_CUDA_ARCH_LIST syntax ("8.0;9.0a;12.0+PTX"). Default: the build info's.
    policy      data/audit_policy/<policy>.json: symbol-version ceilings for artifacts whose tag
                claims no manylinux policy (a wheel tagged manylinux_X_Y is held to that policy),
                and the platform floor when the target torch's own is unknown.

Check ids are in CHECK_IDS; each module under checks/ holds the checks of one concern.
Everything is read statically with pyelftools; no audited library is ever loaded. Libraries are
unpacked into a private temporary folder and memory-mapped, read section by section (memory stays
bounded whatever a wheel's size); elf.py reads .dynsym and .symtab straight from the mapping.
"""

from __future__ import annotations

from .engine import AuditOptions, audit_paths
from .errors import AuditInputError
from .report import CHECK_IDS, ArtifactReport, AuditReport, CheckResult, LibraryReport

__all__ = ["CHECK_IDS", "ArtifactReport", "AuditInputError", "AuditOptions", "AuditReport", "CheckResult",
           "LibraryReport", "audit_paths"]
