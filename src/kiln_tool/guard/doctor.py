"""``python -m <package>._kiln doctor``: everything users otherwise collect by hand, a verdict and the exact fix.

Runs in the user's environment, also when importing the package fails: under
``python -m <package>[._kiln] doctor`` the guard's ``load`` hands its error over
to the doctor instead of raising (see ``guard.doctor_requested``). The libraries
are never loaded here when the preflight found a problem, so doctor cannot crash on it.

``--json`` prints one object (``schema`` = JSON_SCHEMA):
  verdict ("ok" | "warn" | "fail"), summary, fix (first command or null), fixes,
  checks: [{name, status ("ok" | "info" | "warn" | "fail"), value, detail: [str], fix}],
  python, platform, torch (version, cuda, cudnn, cxx11_abi, gpus: [{index, name,
  capability, sm}]), driver, build_info (the wheel's, verbatim), package, package_path,
  index_page, preflight {problems, advisories, skipped_by_env}, load_error (the raw
  loader message, or null), import_error, ops {manifest, registered, missing},
  fatbin {source, sass, ptx, build_info_archs, libraries} and gpu_coverage (CUDA builds),
  other_copies, library_path {LD_LIBRARY_PATH, LD_PRELOAD, shadows}, customize, env.
Exit status: 1 when the verdict is "fail", else 0.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import json
import os
import platform
import re
import struct
import sys
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import preflight as _preflight
from . import record, shell
from .buildinfo import PACKAGE, PACKAGE_DIR, compiled_files, distribution, module_name, targets

JSON_SCHEMA = 1
PYTORCH_INDEX = "https://download.pytorch.org/whl"
OK, INFO, WARN, FAIL = "ok", "info", "warn", "fail"
_RANK = {OK: 0, INFO: 0, WARN: 1, FAIL: 2}

# Libraries torch loads by name: a copy of one of these earlier on the loader's path replaces torch's own.
TORCH_LIB_PREFIXES = ("libc10", "libtorch", "libshm", "libtorch_python")
CUDA_LIB_PREFIXES = ("libcudart", "libcublas", "libcublasLt", "libcudnn", "libnccl", "libcusparse", "libcusolver",
                     "libcufft", "libcurand", "libnvrtc", "libnvJitLink", "libcupti", "libnvToolsExt", "libcufile",
                     "libnvshmem", "libcusparseLt")


@dataclass
class Check:
    name: str
    status: str
    value: str
    detail: list[str] = field(default_factory=list)
    fix: str | None = None


# Facts ----------------------------------------------------------------------------------------

def python_facts() -> dict[str, Any]:
    return {
        "version": platform.python_version(),
        "implementation": sys.implementation.name,
        "executable": sys.executable,
        "tag": _preflight.running_python_tag(),
        "prefix": sys.prefix,
    }


def platform_facts() -> dict[str, Any]:
    libc, libc_version = platform.libc_ver()
    return {
        "system": platform.system(),
        "machine": platform.machine(),
        "platform": platform.platform(),
        "libc": libc or None,
        "glibc": libc_version if libc == "glibc" else None,
    }


def driver_facts() -> dict[str, Any]:
    facts: dict[str, Any] = {"cuda_driver_api": None, "kernel_module": None}
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
        version = ctypes.c_int(0)
        if libcuda.cuDriverGetVersion(ctypes.byref(version)) == 0 and version.value:
            facts["cuda_driver_api"] = f"{version.value // 1000}.{version.value % 1000 // 10}"
    except OSError:
        pass
    try:
        first = Path("/proc/driver/nvidia/version").read_text().splitlines()[0]
        # "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build ..."
        match = re.search(r"\s(\d+\.\d+(?:\.\d+)*)\s", first + " ")
        facts["kernel_module"] = match.group(1) if match else first.strip()
    except (OSError, IndexError):
        pass
    return facts


def torch_facts() -> dict[str, Any]:
    try:
        import torch
    except Exception as exc:  # broad on purpose: a broken torch must still give a report
        return {"importable": False, "error": f"{type(exc).__name__}: {exc}"}
    facts: dict[str, Any] = {
        "importable": True,
        "version": str(torch.__version__),
        "path": str(Path(torch.__file__).parent),
        "cuda": torch.version.cuda,
        "cxx11_abi": bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", False)),
        "cudnn": None,
        "cuda_available": False,
        "gpus": [],
    }
    # cuDNN may be missing or broken; that is a fact to report, not a doctor failure.
    with contextlib.suppress(Exception):
        cudnn = torch.backends.cudnn
        facts["cudnn"] = cudnn.version() if cudnn.is_available() else None  # type: ignore[no-untyped-call]
    if torch.version.cuda:
        try:
            facts["cuda_available"] = bool(torch.cuda.is_available())
            for i in range(torch.cuda.device_count() if facts["cuda_available"] else 0):
                major, minor = torch.cuda.get_device_capability(i)
                facts["gpus"].append({"index": i, "name": torch.cuda.get_device_name(i),
                                      "capability": f"{major}.{minor}", "sm": f"sm_{major}{minor}"})
        except Exception as exc:
            facts["cuda_error"] = f"{type(exc).__name__}: {exc}"
    return facts


# The fatbin manifest of a library --------------------------------------------------------------------

_FATBIN_MAGIC = 0xBA55ED50
_KIND_PTX, _KIND_CUBIN = 1, 2
_FLAG_ARCH_SPECIFIC = 0x100000


def _elf_section(data: bytes, wanted: str) -> bytes | None:
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None  # only little-endian ELF64
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if not shoff or shstrndx >= shnum:
        return None
    headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_offset = headers[shstrndx][4]
    for name_off, _type, _flags, _addr, offset, size in headers:
        start = names_offset + name_off
        name = data[start:data.index(b"\0", start)].decode(errors="replace")
        if name == wanted:
            return data[offset:offset + size]
    return None


def fatbin_manifest(library: Path) -> dict[str, list[str]] | None:
    """SASS and PTX archs in the library's .nv_fatbin (e.g. {"sass": ["75", "90a"], "ptx": ["120"]})."""
    try:
        section = _elf_section(library.read_bytes(), ".nv_fatbin")
    except (OSError, ValueError, struct.error):
        return None
    if section is None:
        return None
    sass: set[str] = set()
    ptx: set[str] = set()
    pos = 0
    while pos + 16 <= len(section):
        magic, _version, header_size, payload = struct.unpack_from("<IHHQ", section, pos)
        if magic != _FATBIN_MAGIC:
            pos += 8  # containers are 8-byte aligned; skip padding
            continue
        entry, end = pos + header_size, pos + header_size + payload
        while entry + 0x30 <= end:
            kind = struct.unpack_from("<H", section, entry)[0]
            entry_header, entry_payload = struct.unpack_from("<IQ", section, entry + 4)
            sm = struct.unpack_from("<I", section, entry + 0x1C)[0]
            flags = struct.unpack_from("<Q", section, entry + 0x28)[0]
            arch = f"{sm}{'a' if flags & _FLAG_ARCH_SPECIFIC else ''}"
            if kind == _KIND_CUBIN:
                sass.add(arch)
            elif kind == _KIND_PTX:
                ptx.add(arch)
            if entry_header == 0:
                break
            entry += entry_header + entry_payload
        pos = end
    key = _sm_key
    return {"sass": sorted(sass, key=key), "ptx": sorted(ptx, key=key)}


def manifest_from_build_info(archs: Iterable[str]) -> dict[str, list[str]]:
    """TORCH_CUDA_ARCH_LIST entries ("8.0", "9.0a", "12.0+PTX") as the fatbin would hold them."""
    sass: list[str] = []
    ptx: list[str] = []
    for item in archs:
        base, _, plus = item.partition("+")
        sm = base.replace(".", "")
        sass.append(sm)
        if plus.upper() == "PTX":
            ptx.append(sm)
    return {"sass": sass, "ptx": ptx}


def _sm_key(sm: str) -> tuple[int, str]:
    digits = sm.rstrip("af")
    return (int(digits) if digits.isdigit() else 0, sm[len(digits):])


def _split_sm(sm: str) -> tuple[int, int, str]:
    digits = sm.rstrip("af")
    return int(digits[:-1]), int(digits[-1]), sm[len(digits):]


def coverage(capability: str, manifest: Mapping[str, list[str]]) -> str | None:
    """How a GPU of ``capability`` ("9.0") runs these kernels: "SASS sm_90", "PTX compute_80 (JIT)" or None."""
    major, minor = (int(x) for x in capability.split("."))
    runnable = []
    for sm in manifest.get("sass", []):
        s_major, s_minor, suffix = _split_sm(sm)
        # SASS runs on the same major with an equal or newer minor; arch-specific ("a") SASS only on its own arch.
        if s_major == major and (s_minor == minor if suffix == "a" else s_minor <= minor):
            runnable.append((s_minor, suffix == "a", sm))
    if runnable:
        return f"SASS sm_{max(runnable)[2]}"
    for sm in sorted(manifest.get("ptx", []), key=_sm_key, reverse=True):
        p_major, p_minor, suffix = _split_sm(sm)
        if suffix == "" and (p_major, p_minor) <= (major, minor):
            return f"PTX compute_{sm} (JIT-compiled on first use)"
    return None


def torch_install_command(info: Mapping[str, Any]) -> str:
    """The torch this wheel was built for, from PyTorch's own index for its CUDA tag."""
    if _preflight.is_stable(info):
        spec = f"torch>={info.get('torch_min') or info.get('torch_major_minor')}"
    else:
        spec = f"torch=={info.get('torch_major_minor')}.*"
    tag = str(info.get("cuda_tag") or "cpu")
    return shell.command("pip", "install", spec, "--index-url", f"{PYTORCH_INDEX}/{tag}")


# Other copies, loader paths, customize hooks --------------------------------------------------

def search_roots() -> list[Path]:
    import site

    roots: list[str] = [p for p in sys.path if p]
    with contextlib.suppress(AttributeError):  # old virtualenv's site module has none
        roots += site.getsitepackages()
    user_site = site.getusersitepackages() if hasattr(site, "getusersitepackages") else None
    if user_site:
        roots.append(user_site)
    seen: set[Path] = set()
    result: list[Path] = []
    for root in roots:
        path = Path(root).resolve()
        if path not in seen and path.is_dir():
            seen.add(path)
            result.append(path)
    return result


def other_copies(package_dir: Path, roots: Iterable[Path], stems: Iterable[str] = ("_C",),
                 dist: str = PACKAGE) -> list[dict[str, str]]:
    """Other copies of the package, stray copies of its libraries (file stems ``stems``) and extra dist-infos
    besides the package in use."""
    package_dir = package_dir.resolve()
    rel = Path(*PACKAGE.split("."))
    found: list[dict[str, str]] = []
    dist_infos: list[Path] = []
    stems = sorted(set(stems))
    dist_glob = dist.replace("-", "_")
    for root in roots:
        candidate = root / rel
        if candidate.is_dir() and candidate.resolve() != package_dir:
            libs = sorted(lib for stem in stems for lib in candidate.glob(f"{stem}.*so"))
            if (candidate / "__init__.py").exists():
                found.append({"path": str(candidate), "kind": "package",
                              "detail": f"another {PACKAGE} package" + (f" with {libs[0].name}" if libs else "")})
            else:
                found.extend({"path": str(lib), "kind": "library",
                              "detail": f"a stray copy of {PACKAGE}'s {lib.name.split('.', 1)[0]}"} for lib in libs)
        for lib in sorted(lib for stem in stems for lib in root.glob(f"{stem}.*so")):
            try:
                if PACKAGE.encode() in lib.read_bytes():
                    found.append({"path": str(lib), "kind": "library",
                                  "detail": f"a copy of {PACKAGE}'s {lib.name.split('.', 1)[0]}"})
            except OSError:
                pass
        dist_infos.extend(sorted(root.glob(f"{dist_glob}-*.dist-info")))
        dist_infos.extend(sorted(root.glob(f"__editable__*{dist_glob}*")))
    ours = package_dir.parents[PACKAGE.count(".")]
    for info in dict.fromkeys(d.resolve() for d in dist_infos):
        if info.parent != ours:
            found.append({"path": str(info), "kind": "install", "detail": f"{dist} installed in another location"})
    return found


def library_path_shadows(environ: Mapping[str, str], torch_lib: Path | None) -> list[dict[str, str]]:
    """LD_PRELOAD entries and LD_LIBRARY_PATH files that would replace torch's or CUDA's own libraries."""
    shadows: list[dict[str, str]] = []
    for entry in environ.get("LD_PRELOAD", "").replace(":", " ").split():
        name = Path(entry).name
        if name.startswith(TORCH_LIB_PREFIXES + CUDA_LIB_PREFIXES):
            shadows.append({"variable": "LD_PRELOAD", "path": entry, "severity": FAIL,
                            "detail": f"preloads {name} ahead of torch's own"})
        else:
            shadows.append({"variable": "LD_PRELOAD", "path": entry, "severity": WARN,
                            "detail": f"preloads {name} into every process"})
    for entry in environ.get("LD_LIBRARY_PATH", "").split(":"):
        if not entry:
            continue
        directory = Path(entry)
        if torch_lib is not None and directory.resolve() == torch_lib.resolve():
            continue
        try:
            names = sorted(p.name for p in directory.iterdir() if ".so" in p.name)
        except OSError:
            continue
        torch_libs = [n for n in names if n.startswith(TORCH_LIB_PREFIXES)]
        cuda_libs = [n for n in names if n.startswith(CUDA_LIB_PREFIXES)]
        if torch_libs:
            shadows.append({"variable": "LD_LIBRARY_PATH", "path": entry, "severity": FAIL,
                            "detail": "holds " + ", ".join(torch_libs[:4]) + ", which replace torch's own"})
        if cuda_libs:
            shadows.append({"variable": "LD_LIBRARY_PATH", "path": entry, "severity": WARN,
                            "detail": "holds " + ", ".join(cuda_libs[:4])
                            + ", which take precedence over the CUDA libraries torch ships with"})
    return shadows


def customize_hooks() -> list[dict[str, str]]:
    import sysconfig

    stdlib = {Path(sysconfig.get_paths()[key]).resolve() for key in ("stdlib", "platstdlib")}
    hooks = []
    for name in ("sitecustomize", "usercustomize"):
        module = sys.modules.get(name)
        origin = getattr(module, "__file__", None) if module else None
        if origin is None:
            try:
                spec = importlib.util.find_spec(name)
            except (ImportError, ValueError):
                spec = None
            origin = spec.origin if spec else None
        if origin:
            # Debian's and Ubuntu's Pythons ship one in the stdlib folder; that one is the distribution's own.
            own = Path(origin).resolve().parent in stdlib
            hooks.append({"module": name, "path": str(origin), "origin": "distribution" if own else "local"})
    return hooks


# The report -----------------------------------------------------------------------------------

def _registered_ops(manifest: list[str]) -> tuple[list[str], list[str]]:
    from .loader import missing_ops

    missing = missing_ops(manifest)
    return [op for op in manifest if op not in missing], missing


def collect(package_error: BaseException | None = None, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Gather every fact and check. ``package_error`` is what importing the package raised, if it did."""
    from .buildinfo import BuildInfoMissing, build_info

    environ = os.environ if environ is None else environ
    package_dir = PACKAGE_DIR
    checks: list[Check] = []
    report: dict[str, Any] = {"schema": JSON_SCHEMA, "package": PACKAGE, "package_path": str(package_dir),
                              "index_page": None,
                              "preflight": None, "load_error": None, "import_error": None, "ops": None,
                              "fatbin": None, "gpu_coverage": []}

    report["python"] = py = python_facts()
    checks.append(Check("python", INFO, f"{py['version']} ({py['tag']})", [py["executable"]]))
    report["platform"] = plat = platform_facts()
    checks.append(Check("platform", INFO, f"{plat['system']} {plat['machine']}, glibc {plat['glibc'] or 'unknown'}"))

    report["torch"] = tf = torch_facts()
    report["driver"] = driver = driver_facts()
    if not tf["importable"]:
        checks.append(Check("torch", FAIL, "not importable", [tf["error"]], shell.command("pip", "install", "torch")))
    else:
        cuda_text = f"CUDA {tf['cuda']}" if tf["cuda"] else "CPU-only"
        checks.append(Check("torch", INFO, f"{tf['version']} ({cuda_text})", [tf["path"]]))
        checks.append(Check("cudnn", INFO, str(tf["cudnn"]) if tf["cudnn"] else "none"))
        checks.append(Check("C++11 ABI (torch)", INFO, "on" if tf["cxx11_abi"] else "off"))
        gpu_text = ", ".join(f"{g['name']} ({g['sm']})" for g in tf["gpus"]) or "none visible"
        checks.append(Check("GPUs", INFO, gpu_text, [tf["cuda_error"]] if "cuda_error" in tf else []))
    driver_text = driver["kernel_module"] or "none"
    if driver["cuda_driver_api"]:
        driver_text += f" (CUDA {driver['cuda_driver_api']})"
    checks.append(Check("NVIDIA driver", INFO, driver_text))

    try:
        info: dict[str, Any] | None = build_info()
    except (BuildInfoMissing, ValueError) as exc:
        info = None
        from .buildinfo import reinstall_command

        checks.append(Check("build info", FAIL, "missing or invalid", [str(exc)], reinstall_command()))
    report["build_info"] = info
    if info is not None and not tf["importable"]:
        checks[[c.name for c in checks].index("torch")].fix = torch_install_command(info)

    env = _preflight.current_environment() if tf["importable"] else None
    fix_command = None
    if info is not None:
        checks.append(Check(f"{PACKAGE} build", INFO, _preflight.describe_build(info),
                            [f"commit {info.get('git_commit')}, source {str(info.get('source_hash'))[:12]}",
                             f"at {package_dir}"]))
    if info is not None and env is not None:
        fix_reason, fix_command = _preflight.install_fix(info, env, environ)
        try:
            report["index_page"] = _preflight.index_page_url(info, env, environ)
        except shell.UnsafeValue as exc:
            checks.append(Check(_preflight.INDEX_URL_ENV, FAIL, "refused", [str(exc), fix_reason], fix_command))
        problems = _preflight.find_problems(info, env)
        report["preflight"] = {"problems": problems, "advisories": _preflight.advisories(info, env),
                               "skipped_by_env": _preflight.skip_requested(environ)}
        checks.append(Check("preflight", FAIL if problems else OK,
                            "mismatch" if problems else "build matches this torch and Python", problems,
                            fix_command if problems else None))
        for note in report["preflight"]["advisories"]:
            checks.append(Check("kernels", WARN, "CPU only", [note], fix_command))
        _check_load(checks, report, info, env, problems, package_error, fix_command)
        _check_gpu_archs(checks, report, info, tf, package_dir)
    if package_error is not None:
        report["import_error"] = str(package_error)
    if (info is None or env is None) and package_error is not None:
        report["load_error"] = f"{type(package_error).__name__}: {package_error}"
        checks.append(Check(f"import {PACKAGE}", FAIL, "failed", [report["load_error"]]))

    stems = [Path(path).name for path, _ in targets(info or {})]
    copies = other_copies(package_dir, search_roots(), stems, distribution(info or {}))
    report["other_copies"] = copies
    removable, unproven = removal_plan(copies, distribution(info or {}))
    checks.append(Check("other copies", FAIL if copies else OK,
                        f"{len(copies)} found" if copies else "none",
                        [f"{_safe(c['path'])}: {c['detail']}" for c in copies]
                        + [f"{_safe(path)}: no installed distribution's RECORD lists it, so kiln names no command "
                           "that deletes it: remove it yourself if it is not yours" for path in unproven],
                        shell.command("rm", "-f", "--", *removable) if removable else None))

    torch_lib = Path(tf["path"]) / "lib" if tf.get("importable") else None
    shadows = library_path_shadows(environ, torch_lib)
    report["library_path"] = {"LD_LIBRARY_PATH": environ.get("LD_LIBRARY_PATH"),
                              "LD_PRELOAD": environ.get("LD_PRELOAD"), "shadows": shadows}
    worst = max((s["severity"] for s in shadows), key=_RANK.__getitem__, default=OK)
    shadow_fix = None
    if shadows:
        variables = sorted({s["variable"] for s in shadows if s["severity"] == worst})
        shadow_fix = shell.command("unset", *variables)  # or remove the listed entries: the detail names them
    checks.append(Check("LD_LIBRARY_PATH/LD_PRELOAD", worst,
                        f"{len(shadows)} shadowing entries" if shadows else "clean",
                        [f"{s['variable']}: {s['path']}: {s['detail']}" for s in shadows], shadow_fix))

    hooks = customize_hooks()
    report["customize"] = hooks
    local_hooks = [h for h in hooks if h["origin"] == "local"]
    checks.append(Check("sitecustomize/usercustomize", WARN if local_hooks else (INFO if hooks else OK),
                        ", ".join(h["module"] for h in hooks) or "none",
                        [f"{h['module']}: {h['path']} runs at every interpreter start and can change imports"
                         for h in hooks]))

    report["checks"] = [asdict(c) for c in checks]
    verdict = max((c.status for c in checks), key=_RANK.__getitem__, default=OK)
    verdict = {INFO: OK}.get(verdict, verdict)
    fixes = list(dict.fromkeys(c.fix for c in checks if c.fix and c.status == verdict and verdict != OK))
    report["verdict"] = verdict
    report["fixes"] = fixes
    report["fix"] = fixes[0] if fixes else None
    report["summary"] = _summary(verdict, checks)
    report["env"] = {"skip_preflight": _preflight.SKIP_ENV, "index_url": _preflight.INDEX_URL_ENV,
                     "index_url_value": environ.get(_preflight.INDEX_URL_ENV)}
    return report


def _check_load(checks: list[Check], report: dict[str, Any], info: Mapping[str, Any], env: _preflight.Environment,
                problems: list[str], package_error: BaseException | None, fix: str) -> None:
    from .loader import is_loaded

    manifest = list(info.get("ops", []))
    report["ops"] = {"manifest": manifest, "registered": [], "missing": manifest}
    report["load_error"] = None
    declared = targets(info)
    name = "load " + ", ".join(module_name(path) for path, _ in declared)
    loaded = all(is_loaded(path, kind) for path, kind in declared)
    if package_error is not None and not loaded:
        raw = getattr(package_error, "loader_error", None)
        if raw is None and not isinstance(package_error, _preflight.GuardError):
            raw = f"{type(package_error).__name__}: {package_error}"
        report["load_error"] = raw
        if isinstance(package_error, _preflight.GuardError) and raw is None and problems:
            checks.append(Check(name, INFO, "not attempted: the preflight found a mismatch"))
        else:
            reasons = list(getattr(package_error, "problems", None) or [])
            checks.append(Check(name, FAIL, "failed", [*reasons, f"loader said: {report['load_error']}"], fix))
        return
    if problems:
        # Only reachable with <PREFIX>_SKIP_PREFLIGHT=1: the package imported despite the mismatch.
        checks.append(Check(name, WARN, f"loaded despite the mismatch ({_preflight.SKIP_ENV}=1)"))
    else:
        checks.append(Check(name, OK, "loaded"))
    registered, missing = _registered_ops(manifest)
    report["ops"] = {"manifest": manifest, "registered": registered, "missing": missing}
    checks.append(Check("registered ops", FAIL if missing else OK,
                        f"{len(registered)}/{len(manifest)}" + (f", missing {', '.join(missing)}" if missing else ""),
                        [", ".join(registered)] if registered else [], fix if missing else None))


def _check_gpu_archs(checks: list[Check], report: dict[str, Any], info: Mapping[str, Any], tf: Mapping[str, Any],
                     package_dir: Path) -> None:
    if not info.get("cuda"):
        report["fatbin"] = None
        return
    per_library = {str(lib.name): fatbin_manifest(lib) for lib in compiled_files(info)}
    found = {lib: m for lib, m in per_library.items() if m is not None and (m["sass"] or m["ptx"])}
    declared = manifest_from_build_info(info.get("cuda_archs", []))
    source = "fatbin"
    if found:
        # A GPU runs the package when it runs every library with kernels: the archs all of them carry.
        sass = set.intersection(*(set(m["sass"]) for m in found.values()))
        ptx = set.intersection(*(set(m["ptx"]) for m in found.values()))
        manifest = {"sass": sorted(sass, key=_sm_key), "ptx": sorted(ptx, key=_sm_key)}
    else:
        manifest, source = declared, "build info"
    report["fatbin"] = {"source": source, **manifest, "build_info_archs": list(info.get("cuda_archs", [])),
                        "libraries": found}
    detail = [f"SASS: {', '.join('sm_' + s for s in manifest['sass']) or 'none'}; "
              f"PTX: {', '.join('compute_' + s for s in manifest['ptx']) or 'none'} (from the {source})"]
    status = OK
    if source == "fatbin" and (set(manifest["sass"]) != set(declared["sass"])
                               or set(manifest["ptx"]) != set(declared["ptx"])):
        status = WARN
        detail.append(f"the build info declares {', '.join(info.get('cuda_archs', []))}, the fatbin differs")
    report["gpu_coverage"] = []
    fix = None
    for gpu in tf.get("gpus", []):
        how = coverage(gpu["capability"], manifest)
        report["gpu_coverage"].append({**gpu, "covered_by": how})
        detail.append(f"cuda:{gpu['index']} {gpu['name']} ({gpu['sm']}): " + (how or "NOT COVERED"))
        if how is None:
            status = FAIL
            detail.append(f"in {distribution(info)}'s source checkout, the fix builds wheels with code for this GPU")
            fix = shell.with_env({"KILN_CUDA_ARCHS": str(gpu["capability"])}, "kiln", "wheels")
    value = "no GPU visible" if not tf.get("gpus") else ("all GPUs covered" if status != FAIL else "GPU not covered")
    checks.append(Check("GPU arch coverage", status, value, detail, fix))


def _summary(verdict: str, checks: list[Check]) -> str:
    if verdict == OK:
        return f"{PACKAGE} is correctly installed for this environment."
    bad = [c.name for c in checks if c.status == verdict]
    word = "problem" if verdict == FAIL else "warning"
    return f"{len(bad)} {word}{'s' if len(bad) != 1 else ''}: {', '.join(bad)}."


def _safe(text: str) -> str:
    """A path for a line of the report: as itself when printable, else its escaped repr."""
    return text if text.isprintable() else shell.shown(text, 300)


def removal_plan(copies: Iterable[Mapping[str, str]], dist: str = PACKAGE) -> tuple[list[str], list[str]]:
    """(files a fix may delete, paths it may not name) for the other copies found: a file is named only when
    an installed distribution's RECORD lists it (the same file on disk) and that distribution is ``dist`` or
    installs the package's folder, and only when the path is printable."""
    removable: dict[str, None] = {}
    unproven: list[str] = []
    for copy in copies:
        path = Path(copy["path"])
        files: list[Path] = []
        if copy["kind"] == "install":
            found = record.installed(path)
            files = record.owned_files(found) if found is not None else []
        elif copy["kind"] == "package":
            for found in record.distributions([path.parent]):
                files += record.owned_files(found, inside=path)
        else:
            owner = record.copy_owner(path, [path.parent], dist, PACKAGE)
            files = [path] if owner is not None else []
        shown = [str(f) for f in files if str(f).isprintable()]
        if shown:
            removable.update(dict.fromkeys(shown))
        else:
            unproven.append(str(path))
    return list(removable), unproven


def render(report: Mapping[str, Any]) -> str:
    rows = [(c["status"].upper(), c["name"], c["value"]) for c in report["checks"]]
    widths = [max(len(r[i]) for r in [*rows, ("STATUS", "CHECK", "")]) for i in range(2)]
    lines = [f"{'STATUS':<{widths[0]}}  {'CHECK':<{widths[1]}}  VALUE",
             f"{'-' * widths[0]}  {'-' * widths[1]}  {'-' * 40}"]
    indent = " " * (widths[0] + widths[1] + 4)
    for check, (status, name, value) in zip(report["checks"], rows, strict=True):
        lines.append(f"{status:<{widths[0]}}  {name:<{widths[1]}}  {value}")
        full = check["status"] in (WARN, FAIL) or check["name"] in (f"{PACKAGE} build", "GPU arch coverage")
        show = check["detail"] if full else check["detail"][:1]
        lines.extend(f"{indent}{d}" for d in show)
    lines.append("")
    lines.append(f"Verdict: {report['verdict'].upper()}: {report['summary']}")
    for fix in report["fixes"]:
        lines.append(f"Fix:     {fix}")
    if report.get("index_page"):
        lines.append(f"Index page for this torch: {report['index_page']}  (base URL: ${_preflight.INDEX_URL_ENV} "
                     "or the build info's index_url)")
    lines.append(f"{_preflight.SKIP_ENV}=1 skips the import preflight (experts only).")
    return "\n".join(lines)


def main(json_output: bool, package_error: BaseException | None = None) -> int:
    report = collect(package_error)
    if json_output:
        print(json.dumps(report, indent=2, sort_keys=True, default=str))
    else:
        print(render(report))
    return 1 if report["verdict"] == FAIL else 0
