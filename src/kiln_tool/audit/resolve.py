"""Find the libraries a shared object needs, as ld.so would in the installed layout. Statically:
libraries are read with pyelftools, never loaded.

The installed layout is site-packages holding the wheel's files over the target torch's
site-packages (torch/lib, nvidia/*/lib). Search order per DT_NEEDED name: DT_RPATH (only when
there is no DT_RUNPATH), DT_RUNPATH with $ORIGIN expanded, the libraries `import torch` has
already loaded (torch/lib, matched by name as ld.so matches loaded sonames), then the policy's
system libraries in the host's system directories. A name outside the policy's system list is
never taken from the host.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

from .elf import CORRUPT_ELF_ERRORS, ElfInvalid, ElfLibrary, file_arch
from .policy import Policy
from .target import TorchTarget
from .torch_abi import RecordedLibrary

# What a resolved location opens as: a real ELF, or a recorded torch library (data/torch_abi).
Opened = ElfLibrary | RecordedLibrary

SITE = "/site-packages"


def host_arch() -> str:
    """This machine's processor, as platform tags spell it."""
    machine = os.uname().machine  # platform.machine()'s answer on Linux, without importing platform
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine.lower(), machine)


class Location(NamedTuple):
    """Where a library lives: a member of the audited wheel, or a file on this machine."""

    member: str | None = None
    path: Path | None = None
    recorded: str | None = None  # a recorded torch library, by its path in site-packages
    driver: str | None = None  # a library the GPU driver installs (policy driver_libraries), by name
    # A system library of the wheel's platform that this host lacks (another processor's), as "name|what":
    # the manylinux platform provides it; its symbol versions are the symbol-versions check's to judge.
    platform: str | None = None

    def describe(self) -> str:
        if self.platform is not None:
            name, _, what = self.platform.partition("|")
            return f"{name} ({what})"
        if self.driver is not None:
            return f"{self.driver} (the user's GPU driver; exports not recorded)"
        if self.recorded is not None:
            return f"{self.recorded.lstrip('?')} (loaded by torch; symbols not recorded)" \
                if self.recorded.startswith("?") else f"{self.recorded} (recorded)"
        return f"{self.member} (in the wheel)" if self.member is not None else str(self.path)

    @property
    def unknown(self) -> bool:
        """A library whose exports are not known here: it vouches for no symbol."""
        return self.driver is not None or self.platform is not None or (
            self.recorded is not None and self.recorded.startswith("?"))

    @property
    def origin(self) -> str:
        """$ORIGIN: the directory holding the library (wheel members under the virtual /site-packages)."""
        if self.driver is not None or self.platform is not None:
            return "/"
        if self.member is not None:
            return posixpath.dirname(posixpath.join(SITE, self.member))
        if self.recorded is not None:
            return posixpath.dirname(posixpath.join(SITE, self.recorded))
        assert self.path is not None
        return str(self.path.parent)


class Found(NamedTuple):
    location: Location
    via: str  # "RUNPATH $ORIGIN/../torch/lib", "torch lib", "system"
    preload: bool = False  # found only because the package loads it first (no search path reaches it)


def expand_search_entry(entry: str, origin: str) -> str | None:
    """A DT_RUNPATH/DT_RPATH entry as a folder: $ORIGIN expanded; None for a relative one (the working
    directory's, never the package's)."""
    if "$ORIGIN" not in entry and "${ORIGIN}" not in entry:
        return entry if entry.startswith("/") else None
    return posixpath.normpath(entry.replace("${ORIGIN}", "$ORIGIN").replace("$ORIGIN", origin))


class Resolver:
    """Resolves DT_NEEDED names and keeps every library it opened (close() when done)."""

    # What `import torch` loads first; everything they need is in memory afterwards.
    _TORCH_ENTRY_POINTS = ("libtorch_global_deps.so", "libtorch_python.so", "libtorch.so")

    def __init__(self, members: set[str], open_member: Callable[[str], ElfLibrary], torch: TorchTarget | None,
                 policy: Policy, arch: str) -> None:
        self._members = members
        self._open_member = open_member
        self.torch = torch
        self.policy = policy
        self.arch = arch
        self._opened: dict[Location, Opened | None] = {}
        self._system_dirs = [Path(d) for d in policy.system_library_dirs.get(arch, ())]
        self._torch_loaded: dict[str, Location] | None = None
        self.host = host_arch()

    def close(self) -> None:
        for location, lib in self._opened.items():
            if isinstance(lib, ElfLibrary) and location.path is not None:
                lib.close()
        self._opened.clear()

    def _exists(self, directory: str, name: str, from_wheel: bool) -> Location | None:
        candidate = posixpath.join(directory, name)
        if from_wheel and (candidate == SITE or candidate.startswith(SITE + "/")):
            member = candidate[len(SITE) + 1:]
            if member in self._members:
                return Location(member=member)
            if self.torch is not None and self.torch.recorded is not None:
                return Location(recorded=member) if member in self.torch.recorded.libraries else None
            if self.torch is not None and self.torch.site_dir is not None:
                real = self.torch.site_dir / member
                return Location(path=real) if real.is_file() else None
            return None
        if from_wheel:
            return None  # an absolute path: it names the build machine, not the user's
        real = Path(candidate)
        return Location(path=real) if real.is_file() else None

    def find(self, name: str, requester: Location, lib: Opened) -> Found | None:
        if "/" in name:
            return None
        found = self._search_paths(name, requester, lib)
        if found is not None:
            return found
        loaded = self._loaded_by_torch().get(name)
        if loaded is not None:
            return Found(loaded, "loaded by import torch")
        if name in self.policy.system_libraries:
            for directory in self._system_dirs:
                # Only a file of the wheel's processor: /usr/lib may hold another processor's libraries.
                if (directory / name).is_file() and file_arch(directory / name) == self.arch:
                    return Found(Location(path=directory / name), "system library")
            if self.arch != self.host:
                what = (f"the {self.arch} platform's system library ({self.policy.name} lists it); this "
                        f"{self.host} host has no {self.arch} copy, so its exports are not checked here")
                return Found(Location(platform=f"{name}|{what}"), f"system library of {self.policy.name} {self.arch}")
        if name in self.policy.driver_libraries:
            return Found(Location(driver=name), self.policy.driver_libraries[name])
        if requester.member is not None and not getattr(lib, "is_executable", False):
            return self._sibling(name)  # a program is never loaded after a sibling: only its search path counts
        return None

    def _sibling(self, name: str) -> Found | None:
        """A library of the same wheel that no search path of the requester reaches: ld.so matches it
        by name only when it is already loaded (the package dlopens it first, or a sibling that
        reaches it through its own RUNPATH was loaded earlier)."""
        matches = sorted(m for m in self._members if posixpath.basename(m) == name)
        if not matches:
            return None
        reached_by = sorted(m for m in self._members if m not in matches and self._reaches(m, name))
        how = (f"needed by {reached_by[0]}, which finds it through its own search path" if reached_by
               else "no library of the wheel reaches it through a search path")
        return Found(Location(member=matches[0]), f"only when preloaded: {how}", preload=True)

    def _reaches(self, member: str, name: str) -> bool:
        lib = self.open(Location(member=member))
        if not isinstance(lib, ElfLibrary) or name not in lib.needed:
            return False
        return self._search_paths(name, Location(member=member), lib) is not None

    def _search_paths(self, name: str, requester: Location, lib: Opened) -> Found | None:
        """DT_RPATH (without DT_RUNPATH) and DT_RUNPATH, $ORIGIN expanded in the installed layout."""
        from_wheel = requester.member is not None or requester.recorded is not None
        runpath = lib.runpath
        search: list[tuple[str, str]] = []
        if runpath is None and lib.rpath:
            search += [("RPATH", e) for e in lib.rpath]
        if runpath:
            search += [("RUNPATH", e) for e in runpath]
        for kind, entry in search:
            directory = expand_search_entry(entry, requester.origin) if entry else None
            if directory is None:
                continue
            hit = self._exists(directory, name, from_wheel)
            if hit is not None:
                return Found(hit, f"{kind} {entry}")
        return None

    def _loaded_by_torch(self) -> dict[str, Location]:
        """Libraries in memory after `import torch`, by name: torch/lib and what its libraries load
        (e.g. libcudart.so.13 from nvidia/cu13/lib through libtorch_cuda.so's RUNPATH)."""
        if self._torch_loaded is not None:
            return self._torch_loaded
        loaded: dict[str, Location] = {}
        if self.torch is not None and self.torch.recorded is not None:
            # The record holds torch/lib and the libraries torch loads that were recorded with it.
            record = self.torch.recorded
            for member, recorded in record.libraries.items():
                loaded.setdefault(recorded.name, Location(recorded=member))
            for name in record.loaded_unrecorded():
                if name not in self.policy.system_libraries and name not in self.policy.driver_libraries:
                    loaded.setdefault(name, Location(recorded=f"?{name}"))
        elif self.torch is not None and self.torch.lib_dir is not None:
            lib_dir = self.torch.lib_dir
            for path in sorted(lib_dir.glob("*.so*")):
                loaded[path.name] = Location(path=path)
            queue = [loaded[n] for n in self._TORCH_ENTRY_POINTS if n in loaded]
            seen = set(queue)
            while queue:
                location = queue.pop()
                lib = self.open(location)
                if lib is None:
                    continue
                for name in lib.needed:
                    found = self._search_paths(name, location, lib)
                    if found is not None and found.location not in seen:
                        seen.add(found.location)
                        loaded.setdefault(name, found.location)
                        queue.append(found.location)
        self._torch_loaded = loaded
        return loaded

    def open(self, location: Location) -> Opened | None:
        if location not in self._opened:
            try:
                if location.driver is not None or location.platform is not None:
                    name = location.driver or str(location.platform).partition("|")[0]
                    self._opened[location] = RecordedLibrary(name, name, (), (), b"", opaque=True)
                elif location.recorded is not None:
                    assert self.torch is not None and self.torch.recorded is not None
                    record = self.torch.recorded
                    name = location.recorded
                    self._opened[location] = record.opaque(name[1:]) if name.startswith("?") \
                        else record.libraries[name]
                elif location.member is not None:
                    self._opened[location] = self._open_member(location.member)
                else:
                    assert location.path is not None
                    self._opened[location] = ElfLibrary.open(location.path)
                opened = self._opened[location]
                if isinstance(opened, ElfLibrary):
                    # What resolving reads of it: damaged, it is judged as its own library (elf-valid), never
                    # blamed on the library that needs it.
                    _ = (opened.needed, opened.runpath, opened.rpath)
            except (ElfInvalid, OSError, *CORRUPT_ELF_ERRORS):
                self._opened[location] = None
        return self._opened[location]

    def loaded_by_torch(self) -> Iterator[tuple[str, Location, Opened]]:
        """The libraries in memory after `import torch`, opened."""
        for name, location in self._loaded_by_torch().items():
            lib = self.open(location)
            if lib is not None:
                yield name, location, lib

    def scope(self, requester: Location, lib: Opened) -> Iterator[tuple[str, Location, Opened]]:
        """The libraries ld.so searches for this library's symbols, breadth first: DT_NEEDED, then theirs."""
        seen: set[Location] = {requester}
        queue: list[tuple[Location, Opened]] = [(requester, lib)]
        while queue:
            next_queue: list[tuple[Location, Opened]] = []
            for loc, current in queue:
                for name in current.needed:
                    found = self.find(name, loc, current)
                    if found is None or found.location in seen:
                        continue
                    seen.add(found.location)
                    dep = self.open(found.location)
                    if dep is None:
                        continue
                    yield name, found.location, dep
                    next_queue.append((found.location, dep))
            queue = next_queue
