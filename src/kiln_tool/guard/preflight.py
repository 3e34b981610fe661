"""Compare the package's build info with the running environment before its libraries load.

A wheel loaded into the wrong environment fails deep inside the dynamic loader
(``undefined symbol: _ZN3c10...``, ``libc10_cuda.so: cannot open shared object
file``), or worse, loads and crashes. This module turns every such case into one
error (an ImportError named ``<Package>EnvironmentError``) that says what the wheel
was built for, what is installed, and the exact command that installs the right wheel.

It runs on every import of the package: stdlib only, no subprocess, and the facts
about torch come from the already imported ``torch`` module.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from typing import Any

from . import shell
from .buildinfo import INDEX_URL_ENV, PACKAGE, SKIP_ENV, compiled_files, distribution, doctor_command


class GuardError(ImportError):
    """The package cannot work in this environment; the message says why and how to fix it.

    Attributes: ``problems`` (one line each), ``built_for`` and ``installed``
    (one-line summaries), ``fix`` (a shell command), ``fix_reason``, ``loader_error``
    (the raw loader message when loading was attempted, else None). Raised as the
    package's own subclass (:func:`error_class`), e.g. ``opkiln.OpkilnEnvironmentError``.
    """

    def __init__(self, headline: str, *, built_for: str, installed: str, problems: list[str], fix: str,
                 fix_reason: str, loader_error: str | None = None) -> None:
        self.headline = headline
        self.built_for = built_for
        self.installed = installed
        self.problems = list(problems)
        self.fix = fix
        self.fix_reason = fix_reason
        self.loader_error = loader_error
        super().__init__(self._render(), name=PACKAGE)

    def _render(self) -> str:
        import textwrap  # only on the error path: keeps the import lean

        width = 13
        lines = [self.headline, ""]
        lines.append(f"  {'built for:':<{width}}{self.built_for}")
        lines.append(f"  {'installed:':<{width}}{self.installed}")
        for i, problem in enumerate(self.problems):
            label = "problem:" if i == 0 else ""
            wrapped = textwrap.wrap(problem, 100 - width, initial_indent="- ", subsequent_indent="  ")
            for j, line in enumerate(wrapped):
                lines.append(f"  {label if j == 0 else '':<{width}}{line}")
        lines.append(f"  {'fix:':<{width}}{self.fix_reason}")
        lines.append(f"  {'':<{width}}  {self.fix}")
        lines.append("")
        lines.append(f"  More: `{doctor_command()}` checks this environment and prints the same fix.")
        lines.append(f"  The index base URL comes from the wheel's build info; set {INDEX_URL_ENV} to use a mirror.")
        lines.append(f"  Experts: {SKIP_ENV}=1 skips these checks (a mismatched library may then crash).")
        return "\n".join(lines)


@cache
def error_class() -> type[GuardError]:
    """The package's own error class, ``<Package>EnvironmentError`` in the package's module (``opkiln`` ->
    ``opkiln.OpkilnEnvironmentError``): tracebacks show the name users catch."""
    last = PACKAGE.rpartition(".")[2]
    name = "".join(part[:1].upper() + part[1:] for part in re.split(r"[^A-Za-z0-9]+", last) if part)
    name = f"{name or 'Package'}EnvironmentError"
    cls = type(name, (GuardError,), {"__module__": PACKAGE, "__qualname__": name,
                                     "__doc__": f"{PACKAGE} cannot work in this environment; the message says "
                                                "why and how to fix it (see GuardError for the fields)."})
    return cls


@dataclass(frozen=True)
class Environment:
    """The running interpreter and torch, as far as loading the package's libraries is concerned."""

    torch_version: str
    cuda: str | None
    cxx11_abi: bool | None
    python_version: tuple[int, int]
    python_tag: str
    extension_suffixes: tuple[str, ...]

    @property
    def torch_major_minor(self) -> str:
        return major_minor(self.torch_version)

    @property
    def cuda_tag(self) -> str:
        return cuda_tag(self.cuda)


def major_minor(version: str) -> str:
    """``2.14.1+cu130`` -> ``2.14``."""
    return ".".join(version.split("+")[0].split(".")[:2])


def version_tuple(version: str) -> tuple[int, ...]:
    """Leading numeric release parts: ``2.14.0a0+git`` -> (2, 14, 0)."""
    parts: list[int] = []
    for piece in version.split("+")[0].split("."):
        match = re.match(r"\d+", piece)
        if not match:
            break
        parts.append(int(match.group()))
        if match.group() != piece:
            break
    return tuple(parts)


def cuda_tag(cuda: str | None) -> str:
    return "cpu" if not cuda else "cu" + cuda.replace(".", "")


def cuda_major(cuda: str | None) -> str | None:
    return cuda.split(".")[0] if cuda else None


def tag_python_version(tag: str) -> tuple[int, int] | None:
    """``cp310`` -> (3, 10)."""
    digits = re.sub(r"^[a-z]+", "", tag).rstrip("t")
    return (int(digits[0]), int(digits[1:])) if len(digits) >= 2 and digits.isdigit() else None


def running_python_tag() -> str:
    impl = "cp" if sys.implementation.name == "cpython" else sys.implementation.name
    threaded = "t" if "t" in getattr(sys, "abiflags", "") else ""
    return f"{impl}{sys.version_info.major}{sys.version_info.minor}{threaded}"


def current_environment() -> Environment:
    """Facts about the running torch and Python. Imports torch (the package does anyway)."""
    import torch

    abi = getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", None)
    return Environment(
        torch_version=str(torch.__version__),
        cuda=torch.version.cuda or None,
        cxx11_abi=None if abi is None else bool(abi),
        python_version=(sys.version_info.major, sys.version_info.minor),
        python_tag=running_python_tag(),
        extension_suffixes=tuple(EXTENSION_SUFFIXES),
    )


def skip_requested(environ: Mapping[str, str] | None = None) -> bool:
    environ = os.environ if environ is None else environ
    return environ.get(SKIP_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


# What the wheel was built for, and what is installed ------------------------------------------

def _abi_text(flag: bool | None) -> str:
    return "unknown" if flag is None else ("on" if flag else "off")


def is_stable(info: Mapping[str, Any]) -> bool:
    return info.get("abi_mode") == "stable"


def describe_build(info: Mapping[str, Any]) -> str:
    if is_stable(info):
        torch_part = f"torch >= {info.get('torch_min') or info.get('torch_major_minor')} (stable ABI)"
    else:
        torch_part = f"torch {info.get('torch_major_minor')}.x (built with {info.get('torch_version')})"
    cuda = info.get("cuda")
    kernels = f"CUDA {cuda} kernels ({info.get('cuda_tag')})" if cuda else "CPU kernels only (cpu)"
    parts = [torch_part, kernels, f"Python {info.get('python_tag')}"]
    if not is_stable(info):
        parts.append(f"C++11 ABI {_abi_text(info.get('cxx11_abi'))}")
    return ", ".join(parts) + f"  [{distribution(info)} {info.get('version')}]"


def describe_environment(env: Environment) -> str:
    cuda = f"CUDA {env.cuda} ({env.cuda_tag})" if env.cuda else "CPU-only build (cpu)"
    return (f"torch {env.torch_version}, {cuda}, Python {env.python_tag} "
            f"({env.python_version[0]}.{env.python_version[1]}), C++11 ABI {_abi_text(env.cxx11_abi)}")


# The fix --------------------------------------------------------------------------------------

def index_base_url(info: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> str | None:
    """${PREFIX}_INDEX_URL, else the build info's index_url; None when neither names one. A value that cannot
    be shown in a command safely raises shell.UnsafeValue naming the variable (the build info's own was checked
    when it was read)."""
    environ = os.environ if environ is None else environ
    override = environ.get(INDEX_URL_ENV, "")
    if override.strip():
        return shell.url(override, INDEX_URL_ENV) or None
    base = str(info.get("index_url") or "").strip()
    return (shell.url(base, "the build info's index_url") or None) if base else None


def index_page_path(env: Environment) -> str:
    """The page `kiln index`/`kiln release` write for this torch, relative to the site root:
    ``<cuda tag>/torch<major.minor>/index.html`` (kiln_tool.index.combos.Combination.page)."""
    tag = env.cuda_tag if re.fullmatch(r"cpu|cu[0-9]+", env.cuda_tag) else "cpu"
    minor = env.torch_major_minor if re.fullmatch(r"[0-9]+\.[0-9]+", env.torch_major_minor) else "0.0"
    return f"{tag}/torch{minor}/index.html"


def index_page_url(info: Mapping[str, Any], env: Environment, environ: Mapping[str, str] | None = None) -> str:
    """The index page for the installed torch; ``${<PREFIX>_INDEX_URL}/...`` when no base URL is known."""
    base = index_base_url(info, environ) or "${" + INDEX_URL_ENV + "}"
    return f"{base}/{index_page_path(env)}"


def install_command(info: Mapping[str, Any], env: Environment, environ: Mapping[str, str] | None = None) -> str:
    """One command: reinstall the distribution from the index page for this torch. ``--force-reinstall``
    because with any build installed a plain ``pip install <dist>`` is "already satisfied"; ``--no-deps`` so
    the reinstall never touches torch. Raises shell.UnsafeValue for an unsafe ${PREFIX}_INDEX_URL."""
    dist = shell.dist_name(distribution(info), "the build info's project")
    words = ["pip", "install", "--force-reinstall", "--no-deps", dist, "-f"]
    base = index_base_url(info, environ)
    if base is None:
        # The variable must expand when pasted: the one word kiln writes by hand, from checked parts only.
        variable = shell.env_name(INDEX_URL_ENV, "the index URL variable")
        return f'{shell.command(*words)} "${{{variable}}}"/{index_page_path(env)}'
    return shell.command(*words, f"{base}/{index_page_path(env)}")


def fix_reason(info: Mapping[str, Any], env: Environment, environ: Mapping[str, str] | None = None) -> str:
    kind = f"CUDA {env.cuda}" if env.cuda else "CPU"
    where = "here:" if index_base_url(info, environ) else f"(this build names no index URL: set {INDEX_URL_ENV}):"
    return (f"install the {distribution(info)} wheel built for your torch ({kind}, torch {env.torch_major_minor}) "
            f"{where}")


def install_fix(info: Mapping[str, Any], env: Environment, environ: Mapping[str, str] | None = None
                ) -> tuple[str, str]:
    """(reason, command) that installs the right wheel; when ${PREFIX}_INDEX_URL cannot be shown safely, the
    fix is to unset it, and the reason says why (the value itself is never printed raw)."""
    try:
        return fix_reason(info, env, environ), install_command(info, env, environ)
    except shell.UnsafeValue as exc:
        return (f"{exc}; kiln refuses to print it in a command: unset it (then run `{doctor_command()}`):",
                shell.command("unset", INDEX_URL_ENV))


# The checks -----------------------------------------------------------------------------------

def find_problems(info: Mapping[str, Any], env: Environment) -> list[str]:
    """Every reason the wheel described by ``info`` cannot load here; empty when it can."""
    problems: list[str] = []
    problems.extend(_python_problems(info, env))
    problems.extend(_torch_problems(info, env))
    problems.extend(_cuda_problems(info, env))
    if not is_stable(info):
        built_abi = info.get("cxx11_abi")
        if built_abi is not None and env.cxx11_abi is not None and bool(built_abi) != env.cxx11_abi:
            problems.append(
                f"the wheel was compiled with _GLIBCXX_USE_CXX11_ABI={int(bool(built_abi))} but the installed torch "
                f"uses _GLIBCXX_USE_CXX11_ABI={int(env.cxx11_abi)}; their C++ symbols do not match")
    return problems


def _python_problems(info: Mapping[str, Any], env: Environment) -> list[str]:
    tag = str(info.get("python_tag") or "")
    if tag.endswith("-abi3"):
        wanted = tag_python_version(tag.split("-")[0])
        if wanted and env.python_version < wanted:
            return [f"the wheel needs Python >= {'.'.join(map(str, wanted))} (abi3) but this is Python "
                    f"{env.python_version[0]}.{env.python_version[1]}"]
        if ".abi3.so" not in env.extension_suffixes:
            return [f"the wheel is built for the stable Python ABI (abi3), which Python {env.python_tag} cannot load"]
        return []
    if tag and tag != env.python_tag:
        return [f"the wheel's compiled library is for Python {tag} but this is Python {env.python_tag}, "
                "so Python cannot even find it"]
    suffix = str(info.get("extension_suffix") or "")
    if suffix and f".{suffix}.so" not in env.extension_suffixes:
        return [f"the wheel's compiled library has the suffix .{suffix}.so, which this Python does not load "
                f"(it loads {', '.join(env.extension_suffixes)})"]
    return []


def _torch_problems(info: Mapping[str, Any], env: Environment) -> list[str]:
    if is_stable(info):
        minimum = str(info.get("torch_min") or info.get("torch_major_minor") or "")
        if minimum and version_tuple(env.torch_version)[:2] < version_tuple(minimum)[:2]:
            return [f"the wheel uses the LibTorch stable ABI from torch {minimum} on, but torch {env.torch_version} "
                    "is installed"]
        return []
    built = str(info.get("torch_major_minor") or major_minor(str(info.get("torch_version") or "")))
    if built and built != env.torch_major_minor:
        return [f"the wheel was compiled against torch {built} (C++ ABI of that minor series) but torch "
                f"{env.torch_version} is installed; torch's C++ symbols differ between minor series"]
    return []


def _cuda_problems(info: Mapping[str, Any], env: Environment) -> list[str]:
    built = info.get("cuda")
    if not built:
        return []  # CPU kernels need no CUDA library, whatever torch has
    if not env.cuda:
        return [f"the wheel has CUDA {built} kernels and needs torch's CUDA libraries (libc10_cuda, libcudart), "
                f"but torch {env.torch_version} is a CPU-only build"]
    if cuda_major(str(built)) != cuda_major(env.cuda):
        return [f"the wheel's kernels are built with CUDA {built} but torch {env.torch_version} uses CUDA {env.cuda}; "
                "the CUDA major versions must match"]
    return []


def advisories(info: Mapping[str, Any], env: Environment) -> list[str]:
    """Combinations that load and work, but probably not as the user meant (never raised on import)."""
    notes: list[str] = []
    if not info.get("cuda") and env.cuda:
        notes.append(f"this {PACKAGE} has CPU kernels only, but torch {env.torch_version} has CUDA {env.cuda}: "
                     f"{PACKAGE} ops on CUDA tensors will fail")
    return notes


def environment_error(info: Mapping[str, Any], env: Environment, problems: list[str], headline: str,
                      loader_error: str | None = None, fix: tuple[str, str] | None = None) -> GuardError:
    """The error for ``problems``; ``fix`` is (reason, command), by default: install the wheel for this torch."""
    reason, command = fix or install_fix(info, env)
    return error_class()(
        headline,
        built_for=describe_build(info),
        installed=describe_environment(env),
        problems=problems,
        fix=command,
        fix_reason=reason,
        loader_error=loader_error,
    )


def check(info: Mapping[str, Any], env: Environment) -> None:
    problems = find_problems(info, env)
    if problems:
        raise environment_error(info, env, problems, f"{PACKAGE} cannot be imported: this {distribution(info)} "
                                                     "wheel was built for a different environment.")


# After a failed load --------------------------------------------------------------------------

_MISSING_LIB_RE = re.compile(r"([\w.+-]+\.so(?:\.[\w.]+)?): cannot open shared object file")
_UNDEFINED_RE = re.compile(r"undefined symbol: (\S+)")


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception and what caused it: torch.ops.load_library raises "Could not load this library" from the
    loader's OSError, which holds the reason (an undefined symbol, a missing library)."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and len(chain) < 8 and all(current is not seen for seen in chain):
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def explain_load_failure(exc: BaseException, info: Mapping[str, Any], env: Environment, library: str) -> list[str]:
    """One or more plain sentences for an exception raised while loading ``library`` (``opkiln/_C``), from the
    exception and its causes."""
    text = "\n".join(str(e) for e in _chain(exc))
    if isinstance(exc, (ModuleNotFoundError, FileNotFoundError)) or "no such library file" in text:
        found = [p.name for p in compiled_files(info) if p.name.split(".", 1)[0] == Path(library).name]
        if found:
            return [f"{PACKAGE}'s compiled library is there ({', '.join(found)}) but this Python "
                    f"({env.python_tag}) cannot load a library with that name: it belongs to another Python"]
        return [f"{PACKAGE}'s compiled library ({library}.*.so) is missing: the install is incomplete or this is a "
                "source checkout"]
    missing_lib = _MISSING_LIB_RE.search(text)
    if missing_lib:
        lib = missing_lib.group(1)
        owner = "CUDA" if any(k in lib for k in ("cuda", "cudart", "nvrtc", "cublas", "cudnn")) else "torch"
        return [f"the compiled library needs {lib}, which the installed torch does not provide ({owner} library "
                "missing): it was built for another torch or CUDA variant"]
    undefined = _UNDEFINED_RE.search(text)
    if undefined:
        symbol = undefined.group(1)
        shown = symbol if symbol.isprintable() and len(symbol) <= 200 else ascii(symbol[:200])
        return [f"the compiled library needs C++ symbols that the installed torch does not export (undefined "
                f"symbol: {shown}): it was built against a different torch (or C++ ABI)"]
    return [f"the compiled library failed to load ({type(exc).__name__}); the files may be damaged or built "
            "for another system"]


def loader_error_text(exc: BaseException) -> str:
    return "; caused by ".join(f"{type(e).__name__}: {e}" for e in _chain(exc))


__all__ = ["INDEX_URL_ENV", "SKIP_ENV", "Environment", "GuardError", "check", "current_environment",
           "environment_error", "error_class", "find_problems", "index_page_url", "install_command", "install_fix",
           "skip_requested"]
