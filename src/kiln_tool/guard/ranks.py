"""Every rank of a distributed job agrees on the op package before training (kiln's distributed check).

Each rank answers what it has: the package present, importable (else the import error's first line), its
build (version and a sha256 of its compiled libraries), torch and CUDA, the GPU's arch against the wheel's
SASS/PTX, and whether every op the build declares is registered. The answers meet in the job's TCPStore
(the one torchrun's agent or ``init_process_group`` holds, else one on MASTER_ADDR:MASTER_PORT), with a
deadline: a rank that never answers ends the check on every other rank with a timeout naming it. Every rank
then reads every answer and reaches the same verdict: all agree, or every rank fails with one table naming
each rank that differs and its fix.

Three ways to run it (docs/distributed-check.md):

    torchrun ... -m <package>._kiln.ranks [--timeout S]      shipped in every kiln-built package
    check_ranks("<package>", timeout=S)                       from a training script, before its first step
    torchrun ... kiln_ranks.py [--timeout S]                  a copy beside the job's script, for ranks that
                                                             may lack the package (kiln guard ranks-script)

Self-contained: the standard library and torch only (torch imported when the check runs), so the same file
works inside a package, as a standalone script, and in kiln's source tree.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import csv
import hashlib
import importlib
import importlib.util
import json
import math
import os
import re
import shlex
import socket
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

PACKAGE: str | None = None
"""The package this copy checks when run as a script (``kiln guard ranks-script`` sets it); inside a package
(``<package>._kiln.ranks``) the package is the one it lies in."""

DEFAULT_TIMEOUT_S = 120.0
MAX_TIMEOUT_S = 7 * 24 * 3600.0
PROTOCOL = 2
"""The answer's version: ranks running kilns of two protocols name each other instead of misreading."""
MAX_ANSWER_BYTES = 64 * 1024
MAX_BUILD_INFO_BYTES = 1024 * 1024
_DIST_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
_VERSION_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.!+_-]*[A-Za-z0-9])?")
_TORCH_RE = re.compile(r"[0-9]+(?:\.[0-9]+)*(?:[a-z]+[0-9]*)*(?:\+[a-z0-9.]+)?")
_URL_RE = re.compile(r"(?:https?://[^\s/]+|file://)[^\s]*")
_HEX64_RE = re.compile(r"[0-9a-f]{64}")
_TEXT, _OPT_TEXT = "text", "text|null"
ANSWER_FIELDS: dict[str, tuple[str, int]] = {
    "protocol": ("int", 0), "rank": ("int", 0), "host": (_TEXT, 255), "package": (_TEXT, 200),
    "python": (_TEXT, 40), "torch": (_OPT_TEXT, 100), "cuda": (_OPT_TEXT, 20), "present": ("bool", 0),
    "location": (_OPT_TEXT, 4096), "project": (_OPT_TEXT, 200), "version": (_OPT_TEXT, 200),
    "build": (_OPT_TEXT, 64), "build_from": (_OPT_TEXT, 20), "built_torch": (_OPT_TEXT, 100),
    "cuda_tag": (_OPT_TEXT, 20), "index_url": (_OPT_TEXT, 2048), "import_error": (_OPT_TEXT, 400),
    "ops": ("int", 0), "ops_missing": ("[text]", 200), "changed": ("[text]", 4096), "gpu": (_OPT_TEXT, 200),
    "gpu_ok": ("bool|null", 0), "gpu_problem": (_OPT_TEXT, 400), "error": (_OPT_TEXT, 400),
    "probe_s": ("number|null", 0),
}
"""Every field of an answer (protocol 2), its JSON type and the longest text it may hold: an answer of any
other shape, with a control character, or longer than MAX_ANSWER_BYTES is refused and named as its rank's
problem."""
_LIBRARY_RE = re.compile(r"\.(so(\.[0-9]+)*|pyd|dylib)$")
_ARCH_RE = re.compile(r"^(?:sm_|compute_)?(\d+)\.?(\d)([af]?)(\+PTX)?$", re.IGNORECASE)


class RanksError(RuntimeError):
    """The ranks of the job do not agree, or not all of them answered: raised on every rank."""

    def __init__(self, message: str, answers: Sequence[Mapping[str, Any] | None] = ()) -> None:
        super().__init__(message)
        self.answers = list(answers)


class RanksUsage(RanksError):
    """The process is not set up as a rank of a job (torchrun's variables missing or malformed)."""


class RanksTimeout(RanksError):
    """Some ranks never answered before the deadline (``missing`` names them)."""

    def __init__(self, message: str, missing: Sequence[int], answers: Sequence[Mapping[str, Any] | None] = ()):
        super().__init__(message, answers)
        self.missing = list(missing)


# --- what one rank has -----------------------------------------------------------------------------------------

def _printable(text: str) -> str:
    """``text`` with every character a terminal would not show as itself escaped (``\\x1b``, ``\\u202e``)."""
    return text if text.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    line = _printable(f"{type(exc).__name__}: {text[0].strip()}" if text else type(exc).__name__)
    return line if len(line) <= 300 else line[:297] + "..."


def _package_dir(package: str) -> Path | None:
    """The folder of ``package`` on this rank's path, found without importing it (a dotted package imports
    its parents only); None when it is not installed."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return Path(spec.origin).parent if spec.origin else None


def _hex_of_record_hash(value: str) -> str | None:
    algo, _, digest = value.partition("=")
    if algo != "sha256" or not digest:
        return None
    try:
        return base64.urlsafe_b64decode(digest + "=" * (-len(digest) % 4)).hex()
    except ValueError:
        return None


def _identity(entries: Mapping[str, str]) -> str | None:
    """sha256 over the sorted ``path sha256`` lines of the compiled libraries: the same whether the hashes came
    from RECORD or from the files."""
    if not entries:
        return None
    text = "".join(f"{path} {digest}\n" for path, digest in sorted(entries.items()))
    return hashlib.sha256(text.encode()).hexdigest()


def _record_entries(package: str, root: Path, project: str | None, libs_dirs: set[str]) -> dict[str, str] | None:
    """The compiled libraries the RECORD of the distribution owning ``package`` lists (path -> sha256 hex), or
    None when no installed distribution owns it."""
    owned = (f"{package.replace('.', '/')}/",)
    records = sorted(root.glob("*.dist-info/RECORD"))
    if project:
        wanted = re.sub(r"[-_.]+", "_", project).lower()
        records.sort(key=lambda r: r.parent.name.split("-")[0].lower() != wanted)
    for record in records:
        try:
            if record.stat().st_size > 16 * 1024 * 1024:
                continue
            rows = list(csv.reader(record.read_text(encoding="utf-8").splitlines()))
        except (OSError, UnicodeDecodeError, csv.Error):
            continue
        if not any(row and row[0].startswith(owned) for row in rows):
            continue
        entries: dict[str, str] = {}
        for row in rows:
            if len(row) >= 2 and row[0].startswith((*owned, *libs_dirs)) and _LIBRARY_RE.search(row[0]):
                digest = _hex_of_record_hash(row[1])
                if digest is not None:
                    entries[row[0]] = digest
        return entries
    return None


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def library_state(package: str, package_dir: Path, project: str | None = None
                  ) -> tuple[str | None, str, list[str]]:
    """(sha256 over the package's compiled libraries as they are on disk, "RECORD" when the installed
    distribution's RECORD lists exactly those bytes else "files", the libraries that differ from RECORD).

    The identity always comes from the bytes (a library replaced after install is another build); RECORD only
    tells whether the bytes are still the ones pip installed."""
    root = package_dir.parents[package.count(".")]
    top = package.split(".")[0]
    libs_dirs = {f"{top}.libs/"} | ({f"{project.replace('-', '_')}.libs/"} if project else set())
    entries: dict[str, str] = {}
    for folder in (package_dir, *(root / d.rstrip("/") for d in libs_dirs)):
        if not folder.is_dir():
            continue
        for path in folder.rglob("*"):
            if path.is_file() and _LIBRARY_RE.search(path.name):
                entries[path.relative_to(root).as_posix()] = _sha256_file(path)
    recorded = _record_entries(package, root, project, libs_dirs)
    if recorded is None:
        return _identity(entries), "files", []
    changed = sorted(p for p in set(recorded) | set(entries) if recorded.get(p) != entries.get(p))
    return _identity(entries), ("files" if changed else "RECORD"), changed


def build_identity(package: str, package_dir: Path, project: str | None = None) -> tuple[str | None, str]:
    """(sha256 of the package's compiled libraries as they are on disk, "RECORD" when they are the bytes the
    installed RECORD lists, else "files"); see ``library_state``."""
    identity, source, _changed = library_state(package, package_dir, project)
    return identity, source


def _arch_runs(arch: str, major: int, minor: int) -> bool:
    """Whether code built for ``arch`` (a kiln cuda_archs entry: "9.0", "8.6+PTX", "9.0a", "sm_90") runs on a
    GPU of compute capability major.minor: SASS on the same major at an equal or lower minor ("a" builds: that
    exact arch only), or PTX of an equal or lower arch."""
    match = _ARCH_RE.match(arch.strip())
    if match is None:
        return False
    a_major, a_minor, suffix, ptx = int(match[1]), int(match[2]), match[3].lower(), bool(match[4])
    if suffix == "a":
        return (a_major, a_minor) == (major, minor)
    if a_major == major and a_minor <= minor:
        return True
    return ptx and (a_major, a_minor) <= (major, minor)


def _gpu(info: Mapping[str, Any], local_rank: int) -> tuple[str | None, bool | None, str | None]:
    """(this rank's GPU as "sm_90 NVIDIA H200", whether the wheel has code it runs, the problem) — Nones
    where there is no GPU or the build has no CUDA kernels."""
    import torch

    try:
        if not torch.cuda.is_available():
            return None, None, None
        device = local_rank % max(torch.cuda.device_count(), 1)
        major, minor = torch.cuda.get_device_capability(device)
        name = f"sm_{major}{minor} {torch.cuda.get_device_name(device)}"
    except Exception as exc:  # a broken driver is an answer too
        return None, False, f"the GPU cannot be queried: {_first_line(exc)}"
    archs = [str(a) for a in info.get("cuda_archs") or []]
    if not info.get("cuda") or not archs:
        return name, None, None
    if any(_arch_runs(a, major, minor) for a in archs):
        return name, True, None
    return name, False, f"no code for sm_{major}{minor} in this build (it has {', '.join(archs)})"


def _registered(op: str) -> bool:
    import torch

    namespace, _, name = op.partition("::")
    name = name.split(".")[0]
    try:
        getattr(getattr(torch.ops, namespace), name)
    except (AttributeError, RuntimeError):
        return False
    return True


def _import_error(package: str) -> str | None:
    """The first line of what importing ``package`` raises, or None when it imports.

    Run as ``-m <package>._kiln.ranks``, Python imports the package first; when that import fails, kiln's guard
    hands over to this check from inside it (the package then stays half-imported in sys.modules): the error
    is then the one the guard kept."""
    module = sys.modules.get(package)
    if module is not None and getattr(getattr(module, "__spec__", None), "_initializing", False):
        kept = getattr(sys.modules.get(f"{package}._kiln.guard"), "import_error", None)
        if isinstance(kept, BaseException):
            return _first_line(kept)
        return f"ImportError: the import of {package} did not complete"
    try:
        importlib.import_module(package)
    except BaseException as exc:  # SystemExit or worse from a package's import is an answer, not an end
        if isinstance(exc, KeyboardInterrupt):
            raise
        return _first_line(exc)
    return None


def local_answer(package: str, rank: int = 0, local_rank: int = 0) -> dict[str, Any]:
    """What this rank has. Never raises: whatever fails becomes part of the answer."""
    started = time.monotonic()
    answer: dict[str, Any] = {
        "protocol": PROTOCOL, "rank": rank, "host": socket.gethostname(), "package": package,
        "python": ".".join(map(str, sys.version_info[:3])), "torch": None, "cuda": None, "present": False,
        "location": None, "project": None, "version": None, "build": None, "build_from": None,
        "built_torch": None, "cuda_tag": None, "index_url": None, "import_error": None, "ops": 0,
        "ops_missing": [], "changed": [], "gpu": None, "gpu_ok": None, "gpu_problem": None, "error": None,
        "probe_s": None,
    }
    try:
        import torch

        answer["torch"] = str(torch.__version__)
        answer["cuda"] = torch.version.cuda
        package_dir = _package_dir(package)
        if package_dir is None:
            answer["probe_s"] = round(time.monotonic() - started, 3)
            return answer
        answer["present"] = True
        answer["location"] = str(package_dir)
        info = _read_build_info(package_dir / "_build_info.json")
        answer.update(project=_text_or_none(info.get("project")) or package,
                      built_torch=_text_or_none(info.get("torch_version")),
                      cuda_tag=_text_or_none(info.get("cuda_tag")), index_url=_text_or_none(info.get("index_url")))
        answer["version"] = _text_or_none(info.get("version"))
        if answer["version"] is None:
            from importlib.metadata import PackageNotFoundError, version

            with contextlib.suppress(PackageNotFoundError, ValueError):
                answer["version"] = version(str(answer["project"]))
        answer["build"], answer["build_from"], answer["changed"] = library_state(package, package_dir,
                                                                                 answer["project"])
        answer["import_error"] = _import_error(package)
        raw_ops = info.get("ops")
        ops = [op for op in raw_ops if isinstance(op, str)] if isinstance(raw_ops, list) else []
        answer["ops"] = len(ops)
        if answer["import_error"] is None:
            answer["ops_missing"] = [op for op in ops if not _registered(op)]
        answer["gpu"], answer["gpu_ok"], answer["gpu_problem"] = _gpu(info, local_rank)
    except Exception as exc:
        answer["error"] = _first_line(exc)
    answer["probe_s"] = round(time.monotonic() - started, 3)
    return answer


def _text_or_none(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _read_build_info(path: Path) -> dict[str, Any]:
    """The installed build info, read bounded (a regular file of at most MAX_BUILD_INFO_BYTES); {} otherwise.
    Its values are checked again as parts of the answer (``read_answer``)."""
    try:
        if not path.is_file():
            return {}
        with path.open("rb") as stream:
            raw = stream.read(MAX_BUILD_INFO_BYTES + 1)
        loaded = json.loads(raw) if len(raw) <= MAX_BUILD_INFO_BYTES else None
    except (OSError, ValueError, RecursionError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


# --- an answer as another rank sent it: untrusted ---------------------------------------------------------------

def _field_ok(kind: str, limit: int, value: object) -> bool:
    def text(v: object) -> bool:
        return isinstance(v, str) and len(v) <= limit and v.isprintable()

    if kind == "int":
        return type(value) is int and 0 <= value < 2**31
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "bool|null":
        return value is None or isinstance(value, bool)
    if kind == "number|null":
        return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)
                                 and math.isfinite(value))
    if kind == _TEXT:
        return text(value)
    if kind == _OPT_TEXT:
        return value is None or text(value)
    if kind == "[text]":
        return isinstance(value, list) and len(value) <= 10_000 and all(text(v) for v in value)
    raise AssertionError(kind)


def answer_problem(answer: object, rank: int) -> str | None:
    """Why ``answer`` (parsed JSON from the store under ``rank``'s key) is not a protocol-2 answer about
    ``rank``; None when it is."""
    if not isinstance(answer, dict):
        return f"its answer is a JSON {type(answer).__name__}, not an object"
    if answer.get("protocol") != PROTOCOL:
        theirs = answer.get("protocol")
        shown = theirs if type(theirs) is int else "none"
        return (f"its answer speaks protocol {shown}, this check speaks {PROTOCOL}: "
                "the ranks run different kiln versions")
    if answer.get("rank") != rank:
        return f"it answered as rank {_printable(repr(answer.get('rank'))[:20])}, under the key of rank {rank}"
    wrong = [key for key, (kind, limit) in ANSWER_FIELDS.items()
             if key not in answer or not _field_ok(kind, limit, answer[key])]
    if wrong:
        return f"its answer has malformed fields: {', '.join(wrong[:6])}{' ...' if len(wrong) > 6 else ''}"
    forms = [("project", _DIST_RE), ("version", _VERSION_RE), ("torch", _TORCH_RE), ("built_torch", _TORCH_RE),
             ("index_url", _URL_RE), ("build", _HEX64_RE)]
    bad = [key for key, form in forms if answer[key] is not None and not form.fullmatch(answer[key])]
    if answer["cuda_tag"] is not None and not re.fullmatch(r"cpu|cu[0-9]{2,4}", answer["cuda_tag"]):
        bad.append("cuda_tag")
    if bad:
        return f"its answer has fields that are not of their form: {', '.join(bad)}"
    return None


def refused(rank: int, why: str) -> dict[str, Any]:
    """The row of a rank whose answer was refused: it names the rank and why, and never agrees with anything."""
    return {"protocol": PROTOCOL, "rank": rank, "host": None, "package": None, "present": False, "torch": None,
            "cuda": None, "version": None, "build": None, "refused": why}


def read_answer(raw: bytes | str | None, rank: int) -> dict[str, Any]:
    """The answer stored under ``rank``'s key, checked: a valid answer about that rank (unknown keys dropped), or
    a refused one naming why. Never raises."""
    if raw is None:
        return refused(rank, "it sent no answer")
    if len(raw) > MAX_ANSWER_BYTES:
        return refused(rank, f"its answer is {len(raw)} bytes, more than {MAX_ANSWER_BYTES}")
    try:
        answer = json.loads(raw)
    except (ValueError, RecursionError):
        return refused(rank, "its answer is not JSON")
    why = answer_problem(answer, rank)
    if why is not None:
        return refused(rank, why)
    return {key: answer[key] for key in ANSWER_FIELDS}


# --- the verdict (the same on every rank: it reads the same answers) -----------------------------------------

def _short(build: str | None) -> str:
    return build[:12] if build else "-"


def _torch_fix(version: str) -> str:
    """One command (shlex.join) from a checked torch version; plain ``pip install torch`` for any other."""
    if not _TORCH_RE.fullmatch(version):
        return shlex.join(["pip", "install", "torch"])
    public, _, local = version.partition("+")
    index = ["--index-url", f"https://download.pytorch.org/whl/{local}"] if local else []
    return shlex.join(["pip", "install", f"torch=={public}", *index])


def index_override(package: str) -> str | None:
    """``<PACKAGE>_INDEX_URL`` when set: one URL without whitespace or control characters, else RanksUsage."""
    name = f"{re.sub(r'[^A-Za-z0-9]', '_', package).upper()}_INDEX_URL"
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    if len(value) > 2048 or not _URL_RE.fullmatch(value) or not value.isprintable():
        raise RanksUsage(f"{name} is not one http(s) or file URL that can be shown in a command: "
                         f"{_printable(repr(value)[:80])}; unset it")
    return value.rstrip("/")


def _package_fix(ref: Mapping[str, Any] | None, package: str) -> str:
    """One command (shlex.join) that installs the reference rank's build; its values were checked when its
    answer was read (``read_answer``), the override when the check started."""
    if ref is None or not ref.get("version"):
        return shlex.join(["pip", "install", package])
    project = ref.get("project") or package
    base = index_override(package) or str(ref.get("index_url") or "").rstrip("/")
    built = str(ref.get("built_torch") or ref.get("torch") or "")
    minor = ".".join(built.split("+")[0].split(".")[:2])
    page = ["-f", f"{base}/{ref.get('cuda_tag') or 'cpu'}/torch{minor}/index.html"] if base and minor else []
    return shlex.join(["pip", "install", "--force-reinstall", "--no-deps", f"{project}=={ref['version']}", *page])


def healthy(answer: Mapping[str, Any]) -> bool:
    return (not answer.get("refused") and not answer.get("changed")
            and bool(answer.get("present")) and answer.get("torch") is not None and not answer.get("error")
            and answer.get("import_error") is None and not answer.get("ops_missing")
            and answer.get("gpu_ok") is not False)


def _key(answer: Mapping[str, Any]) -> tuple[Any, ...]:
    return answer.get("version"), answer.get("build"), answer.get("torch"), answer.get("cuda")


def reference_rank(answers: Sequence[Mapping[str, Any]]) -> int | None:
    """The rank the others are measured against: among the healthy ranks, one holding the most common
    (version, build, torch, CUDA), the lowest such rank on a tie; None when no rank is healthy."""
    good = [a for a in answers if healthy(a)]
    if not good:
        return None
    counts = Counter(_key(a) for a in good)
    best = max(counts.values())
    return min(int(a["rank"]) for a in good if counts[_key(a)] == best)


def problems(answer: Mapping[str, Any], ref: Mapping[str, Any] | None, torch_ref: str | None,
             package: str) -> list[tuple[str, str]]:
    """(problem, fix) of one rank against the reference answer, in the order to fix them."""
    found: list[tuple[str, str]] = []
    fix_package = _package_fix(ref, package)
    if answer.get("refused"):
        return [(f"its answer is refused: {answer['refused']}",
                 f"run the same kiln on every rank (answer protocol {PROTOCOL}); then {fix_package}")]
    if answer.get("torch") is None:
        found.append((f"torch cannot be imported: {answer.get('error')}",
                      _torch_fix(torch_ref) if torch_ref else "pip install torch"))
    elif answer.get("error"):
        found.append((f"the check failed on this rank: {answer['error']}", "see this rank's log"))
    cuda_ref = ref.get("cuda") if ref is not None else answer.get("cuda")
    if torch_ref and answer.get("torch") is not None and \
            (answer.get("torch"), answer.get("cuda")) != (torch_ref, cuda_ref):
        cuda = f" (CUDA {answer.get('cuda') or '-'}, not {cuda_ref or '-'})" if answer.get("cuda") != cuda_ref else ""
        found.append((f"torch {answer.get('torch')}, not {torch_ref}{cuda}", _torch_fix(torch_ref)))
    if not answer.get("present"):
        found.append((f"{package} is not installed", fix_package))
        return found
    if answer.get("import_error") is not None:
        found.append((f"import {package} fails: {answer['import_error']}", fix_package))
    if ref is not None and (answer.get("version"), answer.get("build")) != (ref.get("version"), ref.get("build")):
        found.append((f"another build: {answer.get('version')} {_short(answer.get('build'))}, not "
                      f"{ref.get('version')} {_short(ref.get('build'))}", fix_package))
    changed = list(answer.get("changed") or [])
    if changed:
        shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
        found.append((f"{len(changed)} compiled librar{'ies' if len(changed) > 1 else 'y'} changed on disk since "
                      f"install (not the bytes its RECORD lists): {shown}", fix_package))
    missing = list(answer.get("ops_missing") or [])
    if missing:
        shown = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
        found.append((f"{len(missing)} of {answer.get('ops')} declared ops not registered: {shown}", fix_package))
    if answer.get("gpu_ok") is False:
        found.append((str(answer.get("gpu_problem")), f"install a {package} build with code for this GPU"))
    return found


def _cell(value: object, limit: int = 40) -> str:
    """A table cell: printable (answers were checked; this holds for any caller) and at most ``limit`` wide."""
    text = _printable(str(value or "-"))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _ranges(ranks: Sequence[int]) -> str:
    out: list[str] = []
    for r in sorted(ranks):
        if out and out[-1].split("-")[-1] == str(r - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{r}"
        else:
            out.append(str(r))
    return ",".join(out)


def verdict(answers: Sequence[Mapping[str, Any]], package: str) -> tuple[bool, str]:
    """(all ranks agree, the report): one summary line when they do, else a table of the reference rank and
    every rank that differs, each with its problems and their fixes."""
    ranks = sorted(answers, key=lambda a: int(a["rank"]))
    ref_rank = reference_rank(ranks)
    ref = next((a for a in ranks if a["rank"] == ref_rank), None)
    torch_ref = ref.get("torch") if ref is not None else \
        Counter(a.get("torch") for a in ranks).most_common(1)[0][0]
    rows = [(a, problems(a, ref, torch_ref, package)) for a in ranks]
    bad = [(a, p) for a, p in rows if p]
    n = len(ranks)
    if not bad and ref is not None:
        gpu = sorted({str(a["gpu"]) for a in ranks if a.get("gpu")})
        return True, (f"{package}: all {n} rank{'s' * (n != 1)} agree: {package} {ref.get('version')} "
                      f"(build {_short(ref.get('build'))}), torch {ref.get('torch')}, "
                      f"CUDA {ref.get('cuda') or '-'}, {ref.get('ops')} ops registered, "
                      f"GPU {', '.join(gpu) or 'none'}")
    if ref is not None:
        head = (f"{package}: {len(bad)} of {n} ranks differ from rank {ref_rank} ({package} {ref.get('version')}, "
                f"build {_short(ref.get('build'))}, torch {ref.get('torch')}); fix each rank below, then rerun")
    else:
        head = f"{package}: no rank of {n} has a working {package}; fix each rank below, then rerun"
    table = [("rank", "host", package, "build", "torch", "CUDA", "GPU", "problem / fix")]
    shown: list[tuple[Mapping[str, Any], list[tuple[str, str]]]] = ([(ref, [])] if ref is not None else []) + bad
    lines: list[list[str]] = []
    for a, found in sorted(shown, key=lambda row: int(row[0]["rank"])):
        cells = (str(a["rank"]), _cell(a.get("host")), _cell(a.get("version")) if a.get("present") else "-",
                 _short(a.get("build")), _cell(a.get("torch")), _cell(a.get("cuda")),
                 _cell(str(a.get("gpu") or "-").split(" ")[0]))
        notes = ["ok (the reference)"] if not found else []
        for problem, fix in found:
            notes.append(problem)
            notes.append(f"  fix: {fix}")
        lines.append([*cells, notes[0]])
        lines.extend(["", "", "", "", "", "", "", note] for note in notes[1:])
    widths = [max(len(row[i]) for row in [list(table[0]), *lines]) for i in range(7)]

    def fmt(row: Sequence[str]) -> str:
        return "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:7])) + "  " + row[7]

    agree = [int(a["rank"]) for a, p in rows if not p]
    tail = [f"agree with rank {ref_rank}: ranks {_ranges(agree)}"] if ref is not None else []
    return False, "\n".join([head, fmt(table[0]), *(fmt(r).rstrip() for r in lines), *tail])


# --- gathering over the job's store ---------------------------------------------------------------------------

def _job() -> tuple[int, int, int]:
    """(rank, world size, local rank) from torchrun's environment; a lone process is rank 0 of 1."""
    try:
        rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    except ValueError as exc:
        raise RanksUsage(f"RANK, WORLD_SIZE or LOCAL_RANK is not a number: {exc}") from None
    if not 0 <= rank < world:
        raise RanksUsage(f"RANK {rank} is not a rank of a job of WORLD_SIZE {world}")
    return rank, world, local_rank


def _store(rank: int, world: int, timeout: timedelta) -> tuple[Any, bool]:
    """(the store the ranks meet in, whether this process serves it): the default process group's when one
    is initialized, torchrun's agent store when it offers one, else a TCPStore on MASTER_ADDR:MASTER_PORT
    served by rank 0."""
    try:
        import torch.distributed as dist
    except ImportError as exc:
        raise RanksError(f"this rank cannot import torch ({_first_line(exc)}), so it cannot join the check: "
                         "install torch") from None

    if dist.is_available() and dist.is_initialized():
        default = getattr(dist.distributed_c10d, "_get_default_store", None)
        if default is not None:
            return default(), False
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if not addr or not port:
        raise RanksUsage(f"WORLD_SIZE is {world} but MASTER_ADDR/MASTER_PORT are not set: run it under torchrun")
    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    serve = rank == 0 and not agent
    try:
        store = dist.TCPStore(  # type: ignore[attr-defined]
            addr, int(port), world, serve, timeout=timeout, wait_for_workers=False)
    except Exception as exc:
        who = "" if agent else " (rank 0 serves it: has rank 0 started the check?)"
        raise RanksError(f"cannot reach the job's store at {addr}:{port}{who} within {timeout.total_seconds():g} "
                         f"s: {_first_line(exc)}") from None
    return store, serve


def _wait_all(store: Any, keys: list[str], timeout_key: str, deadline: float) -> list[int]:
    """Wait until every key is set ([] then), or until the deadline or another rank's timeout (the ranks
    whose key is missing then, which this rank also publishes under timeout_key for the others)."""
    pause = 0.002
    try:
        while True:
            if store.check(keys):
                return []
            if store.check([timeout_key]):
                return _missing_ranks(store.get(timeout_key), len(keys))
            if time.monotonic() >= deadline:
                missing = [r for r, key in enumerate(keys) if not store.check([key])]
                if missing:
                    store.set(timeout_key, json.dumps(missing))
                return missing
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
    except RanksError:
        raise
    except Exception as exc:
        raise RanksError(f"lost the job's store while waiting for the other ranks: {_first_line(exc)}") from None


def _missing_ranks(raw: bytes, world: int) -> list[int]:
    """The ranks another rank published as missing (any rank may write that key): a malformed record ends the
    check with RanksError rather than a crash or a wrong name."""
    try:
        value = json.loads(raw) if len(raw) <= MAX_ANSWER_BYTES else None
    except (ValueError, RecursionError):
        value = None
    if isinstance(value, list) and value and all(type(r) is int and 0 <= r < world for r in value):
        return sorted(set(value))
    raise RanksError("a rank published a malformed timeout record in the job's store: the check cannot trust "
                     "this run; rerun it")


def _linger(store: Any, keys: list[str], seconds: float) -> None:
    """Wait up to ``seconds`` for ``keys`` (what the ranks reading this process's store set when done)."""
    end = time.monotonic() + seconds
    with contextlib.suppress(Exception):  # a rank gone already cannot be waited for
        while time.monotonic() < end and not store.check(keys):
            time.sleep(0.02)


def gather(package: str, timeout: float = DEFAULT_TIMEOUT_S) -> list[dict[str, Any]]:
    """Every rank's answer, in rank order, on every rank; RanksTimeout (on every rank that answered) when some
    rank has not answered ``timeout`` seconds after this one did."""
    timeout = checked_timeout(timeout)
    index_override(package)  # refused here, before any rank waits, when it cannot be shown in a fix
    rank, world, local_rank = _job()
    answer = local_answer(package, rank, local_rank)
    if world <= 1:
        return [read_answer(json.dumps(answer), rank)]
    deadline = time.monotonic() + timeout
    store, serve = _store(rank, world, timedelta(seconds=timeout))
    try:
        # Each run of the check gets keys of its own: the store counts the runs of each rank, across every copy of
        # the check in the process (the shipped module and the standalone script alike), so the n-th check of
        # every rank meets under run n and never reads an earlier run's answers.
        base = f"kiln-ranks/{package}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/"
        try:
            run = int(store.add(f"{base}runs/{rank}", 1))
        except Exception as exc:
            raise RanksError(f"lost the job's store before the check began: {_first_line(exc)}") from None
        prefix = f"{base}run/{run}/"
        keys = [f"{prefix}answer/{r}" for r in range(world)]
        store.set(keys[rank], json.dumps(answer))
        missing = _wait_all(store, keys, f"{prefix}timeout", deadline)
        if missing:
            answered = [r for r in range(world) if r not in missing]
            if serve:  # the others read the timeout from this process's store: stay until they have
                _linger(store, [f"{prefix}seen/{r}" for r in answered if r != rank], 3.0)
            else:
                store.set(f"{prefix}seen/{rank}", "1")
            raise RanksTimeout(
                f"{package}: rank{'s' * (len(missing) > 1)} {_ranges(missing)} of {world} never answered "
                f"within {timeout:g} s (answered: {_ranges(answered)}). A rank that never starts the check "
                f"(crashed, hung, or launched without it: `-m {package}._kiln.ranks` needs {package} "
                f"installed; `kiln guard ranks-script` writes a copy that does not) stops the job here: "
                f"see {'its' if len(missing) == 1 else 'their'} log", missing)
        try:
            answers = [read_answer(store.get(key), r) for r, key in enumerate(keys)]
        except RanksError:
            raise
        except Exception as exc:
            raise RanksError(f"lost the job's store while reading the answers: {_first_line(exc)}") from None
        store.set(f"{prefix}done/{rank}", "1")
        if serve:  # the others read from this process's store: stay until they have
            _linger(store, [f"{prefix}done/{r}" for r in range(world)], 10.0)
        return answers
    finally:
        del store


def checked_timeout(timeout: object) -> float:
    """``timeout`` as seconds when it is a finite number in (0, MAX_TIMEOUT_S]; else RanksUsage (an infinite one
    would overflow the store's timedelta)."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) \
            or not 0 < timeout <= MAX_TIMEOUT_S:
        raise RanksUsage(f"the timeout must be a number of seconds above 0 and at most {MAX_TIMEOUT_S:g}, not "
                         f"{_printable(repr(timeout))[:40]}")
    return float(timeout)


def check_ranks(package: str, timeout: float = DEFAULT_TIMEOUT_S) -> str:
    """Check that every rank of this job has the same working build of ``package`` with the same torch; call it
    on every rank before the first step. Returns the one-line summary; raises RanksError on every rank (its
    message: the table) when they differ, RanksTimeout when some rank never answered within ``timeout``."""
    started = time.monotonic()
    answers = gather(package, timeout)
    ok, report = verdict(answers, package)
    if not ok:
        raise RanksError(report, answers)
    return f"{report} ({time.monotonic() - started:.3f} s)"


# --- the command line ------------------------------------------------------------------------------------------

def main(package: str | None = None, argv: Sequence[str] | None = None) -> int:
    """``torchrun ... -m <package>._kiln.ranks``: exit 0 when every rank agrees (rank 0 prints one line), 1 on
    every rank when they differ (the table, once per host) or some rank never answered, 2 on bad usage."""
    prog = f"python -m {package}._kiln.ranks" if package else "kiln_ranks.py"
    parser = argparse.ArgumentParser(prog=prog, description="check that every rank of this torchrun job has the "
                                     "same working build of the package and the same torch")
    if package is None:
        parser.add_argument("package", help="the import name of the package to check")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                        help=f"how long to wait for the other ranks (default {DEFAULT_TIMEOUT_S:g})")
    parser.add_argument("--json", dest="json_path", type=Path, default=None, metavar="FILE",
                        help="rank 0 also writes every answer and the verdict here (JSON)")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    package = package or args.package
    if not package or not all(part.isidentifier() for part in package.split(".")):
        print(f"{prog}: {package!r} is not a package name", file=sys.stderr)
        return 2
    try:
        checked_timeout(args.timeout)
    except RanksUsage as exc:
        print(f"{prog}: --timeout: {exc}", file=sys.stderr)
        return 2
    try:
        rank, _, local_rank = _job()
        started = time.monotonic()
        answers = gather(package, args.timeout)
    except RanksUsage as exc:
        print(f"kiln ranks: {exc}", file=sys.stderr)
        return 2
    except RanksError as exc:  # a timeout, or the store lost
        print(f"kiln ranks: rank {rank}: {exc}", file=sys.stderr)
        return 1
    ok, report = verdict(answers, package)
    seconds = time.monotonic() - started
    if args.json_path is not None and rank == 0:
        doc = {"schema": 1, "ok": ok, "report": report, "seconds": round(seconds, 3), "answers": answers}
        args.json_path.write_text(json.dumps(doc, indent=1) + "\n")
    if ok:
        if rank == 0:
            print(f"kiln ranks: {report} ({seconds:.2f} s)")
        return 0
    if local_rank == 0:
        print(f"kiln ranks: rank {rank} stops: {report}", file=sys.stderr)
    else:
        print(f"kiln ranks: rank {rank} stops: the ranks differ (the table is in local rank 0's log)",
              file=sys.stderr)
    return 1


def _own_package() -> str | None:
    parent = __package__ or ""
    if parent.endswith("._kiln"):
        return parent[: -len("._kiln")]
    return PACKAGE


if __name__ == "__main__":
    sys.exit(main(_own_package()))
