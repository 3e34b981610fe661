"""What every check sees: the artifact (wheel or loose file) and one library in it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any, NamedTuple

from .elf import Buffer, ElfLibrary
from .inputs import Wheel
from .loading import ApiEvidence, Variant
from .policy import Policy
from .resolve import Location, Resolver
from .target import TorchTarget

if TYPE_CHECKING:  # what a CUDA build or --fetch-dependencies brings: imported where it is used
    from .archs import ArchRequest, CudaArch
    from .dependencies import ShippedFile

_TORCH_NEEDED = re.compile(r"^lib(torch|torch_cpu|torch_cuda|c10|c10_cuda)\.so$")
_EXTENSION_RE = re.compile(r"^(?P<module>[A-Za-z_][A-Za-z0-9_]*)(?P<suffix>\.[A-Za-z0-9_-]+)?\.so$")


@dataclass
class ArtifactContext:
    label: str
    wheel: Wheel | None
    build_info: dict[str, Any] | None
    policy: Policy  # the symbol-version policy this artifact is held to
    policy_reason: str
    base_policy: Policy  # the policy asked for (AuditOptions.policy)
    arch: str
    torch: TorchTarget | None
    torch_problem: str  # why no torch was found, when none was
    archs: ArchRequest | None
    resolver: Resolver
    extra_exports: tuple[str, ...] = ()
    gpu: CudaArch | None = None
    release: ReleaseRule | None = None
    libraries: list[LibraryContext] = field(default_factory=list)
    loaded_by_name: dict[str, str] = field(default_factory=dict)  # member -> the .py file that dlopens it
    variants: dict[str, Variant] = field(default_factory=dict)  # member -> its per-platform family
    requires: tuple[str, ...] = ()  # METADATA Requires-Dist
    api: ApiEvidence | None = None  # what in the wheel says a library's exports are an API
    executables: set[str] = field(default_factory=set)  # ELF members that are programs, not libraries
    needed_by: dict[str, list[str]] = field(default_factory=dict)  # DT_NEEDED name -> the wheel's libraries naming it
    _dependency_files: dict[str, str] | None = None
    _uninstalled: list[str] | None = None
    _installed: dict[str, Any] | None = None
    # --fetch-dependencies: file name -> the uninstalled dependency whose downloaded wheel ships it, and where
    fetched: dict[str, ShippedFile] | None = None

    def dependency_providing(self, library: str) -> str | None:
        """The declared dependency (Requires-Dist) whose installed files hold `library`, looked up where the audit
        runs: the target torch's site-packages (where the wheel's dependencies are installed beside it), then
        kiln's own environment."""
        if self._dependency_files is None:
            self._dependency_files = {}
            if self.requires:
                from .dependencies import applicable

                installed = self._installed_distributions()
                for name, text in applicable(self.requires, self.arch):
                    dist = installed.get(name)
                    if dist is None:
                        continue
                    # Once per distribution: dist.metadata parses the whole METADATA file anew on every access.
                    label = f"{dist.metadata['Name']} {dist.version} (Requires-Dist: {text})"
                    for file in dist.files or []:
                        self._dependency_files.setdefault(PurePosixPath(str(file)).name, label)
        return self._dependency_files.get(library)

    def uninstalled_dependencies(self) -> list[str]:
        """The declared dependencies (Requires-Dist: not torch, not an extra's, markers holding on this wheel's
        platform) that are not installed where this audit runs: a needed library found nowhere else may be
        theirs, whatever its name."""
        if self._uninstalled is None:
            from .dependencies import uninstalled

            site = self.torch.site_dir if self.torch is not None else None
            self._uninstalled = uninstalled(self.requires, self.arch, site, self._installed_distributions)
        return self._uninstalled

    def _installed_distributions(self) -> dict[str, Any]:
        """What is installed where this audit runs (dependencies.installed_distributions), read once per artifact:
        every METADATA of the environment is opened for it."""
        if self._installed is None:
            from .dependencies import installed_distributions

            self._installed = installed_distributions(self.torch.site_dir if self.torch is not None else None)
        return self._installed

    @property
    def torch_platform(self) -> tuple[str, int | None] | None:
        """('cuda', 13) for a +cu130 torch, ('cpu', None), ('rocm', None); None when the version does not say."""
        if self.torch is None:
            return None
        local = self.torch.version.partition("+")[2]
        if local.startswith("cu") and local[2:].isdigit():
            return "cuda", int(local[2:-1] or 0)
        if local == "cpu":
            return "cpu", None
        if local.startswith("rocm"):
            return "rocm", None
        if local.startswith("xpu"):
            return "xpu", None
        return None


class ReleaseRule(NamedTuple):
    """`kiln audit --release`: a release wheel is tagged at the release floor (data/matrix.json
    manylinux_floor), never above it, so it installs wherever torch does. `standin_tag` (a stand-in
    base's run, KILN_STANDIN_MANYLINUX): the one tag that base can give, asserted instead; such a
    wheel is never a release wheel."""

    floor: tuple[int, int]
    standin_tag: str | None = None


@dataclass
class LibraryContext:
    member: str
    location: Location
    lib: ElfLibrary
    # The whole file: bytes, or its read-only mapping (search it with re, or find(x, 0): an mmap's
    # find starts at its current position).
    data: Buffer
    artifact: ArtifactContext

    @property
    def filename(self) -> str:
        return PurePosixPath(self.member).name

    @property
    def loaded_by(self) -> str | None:
        """The Python file of the wheel that loads this library by name (ctypes, dlopen), if one does; never
        for a library that defines PyInit_*: that one is imported."""
        if self.member not in self.artifact.loaded_by_name or any(
                s.defined and s.name.startswith("PyInit_") for s in self.lib.dynamic_symbols):
            return None
        return self.artifact.loaded_by_name[self.member]

    @property
    def inactive_variant(self) -> str | None:
        """Why this per-platform variant is never loaded with the target torch (None: it may be)."""
        variant = self.artifact.variants.get(self.member)
        target = self.artifact.torch_platform
        if variant is None or target is None or self.artifact.torch is None or variant.platform == "default":
            return None
        torch = self.artifact.torch.version
        if variant.platform == "cuda" and target[0] == "cuda" and variant.cuda_major not in (None, target[1]):
            return f"{self.member} is {variant.describe()}; the target torch {torch} is CUDA {target[1]}"
        if variant.platform != "cuda" and target[0] != variant.platform:
            return f"{self.member} is {variant.describe()}; the target torch {torch} is not a {variant.platform} build"
        if variant.platform == "cuda" and target[0] != "cuda":
            return f"{self.member} is {variant.describe()}; the target torch {torch} is not a CUDA build"
        return None

    @property
    def extension_module(self) -> str | None:
        """The Python module name when this library is an extension module (imported), else None.

        A library named like one (_C.abi3.so) that defines no PyInit_<module> but registers torch
        operators or links torch is an op library that torch.ops.load_library dlopens, not an import.
        """
        match = _EXTENSION_RE.match(self.filename)
        if match is None or self.loaded_by is not None or self.lib.is_executable:
            return None
        module = match["module"]
        suffix = match["suffix"] or ""
        if any(s.defined and s.name == f"PyInit_{module}" for s in self.lib.dynamic_symbols):
            return module
        if suffix.startswith((".cpython-", ".abi3", ".cp3", ".pypy")) and not self.op_library:
            return module
        return None

    @property
    def op_library(self) -> bool:
        """Defines no PyInit_* and registers torch operators or links torch: loaded with torch.ops.load_library."""
        symbols = self.lib.dynamic_symbols
        if any(s.defined and s.name.startswith("PyInit_") for s in symbols):
            return False
        if any(m != self.member for m in self.artifact.needed_by.get(self.filename, ())):
            return False  # another library of the wheel names it in DT_NEEDED: ld.so loads it, not load_library
        policy = self.artifact.resolver.policy
        return any(_TORCH_NEEDED.match(n) for n in self.lib.needed) or any(
            not s.defined and policy.is_registration_symbol(s.name) for s in symbols)

    @property
    def loaded_by_python(self) -> bool:
        """Loaded into a Python process, whose interpreter provides the Py* symbols."""
        if self.lib.is_executable:
            return False  # a program runs on its own: no interpreter provides its Py* symbols
        return self.artifact.wheel is not None or self.extension_module is not None
