"""wheel-tag and record: the wheel's name, metadata and RECORD agree with what it holds."""

from __future__ import annotations

import base64
import csv
import io
import re

from ..context import ArtifactContext
from ..inputs import Wheel
from ..loading import CUDART as _CUDART
from ..policy import glibc_of_policy_name, manylinux_policy_of_tag
from ..report import CheckResult, failed, passed
from ..target import torch_requirement

# packaging.version (its parser's regex is compiled at import) is imported for a version that is not a plain release
# and for torch pins: a plain release's local label is None without it.
_PLAIN_RELEASE = re.compile(r"[0-9]+(?:\.[0-9]+)*")
_CPYTHON_SUFFIX = re.compile(r"\.cpython-(\d)(\d+)[a-z]*-(\w+?)-linux-gnu\.so$")
_RECORD_ALGORITHMS = {"sha256", "sha384", "sha512"}


def _expanded_tags(wheel: Wheel) -> set[str]:
    n = wheel.name
    return {f"{p}-{a}-{t}" for p in n.python_tags for a in n.abi_tags for t in n.platform_tags}


def _cudart_majors(artifact: ArtifactContext) -> set[int]:
    majors = set()
    for lib in artifact.libraries:
        if lib.inactive_variant is not None:
            continue  # a per-CUDA variant for another CUDA: loaded only with a torch of its own CUDA
        for needed in lib.lib.needed:
            match = _CUDART.match(needed)
            if match:
                majors.add(int(match[1]))
    return majors


def check_wheel_tag(artifact: ArtifactContext) -> list[CheckResult]:
    wheel = artifact.wheel
    assert wheel is not None
    problems: list[str] = []
    notes: list[str] = []
    declared = {t.strip() for t in wheel.wheel_file().get("Tag", [])}
    if not declared:
        problems.append("the dist-info WHEEL file is missing or has no Tag lines")
    elif declared != _expanded_tags(wheel):
        problems.append(f"WHEEL declares tags {', '.join(sorted(declared))} but the file name says "
                        f"{', '.join(sorted(_expanded_tags(wheel)))}")

    # Python/ABI tags against the extension suffixes.
    for lib in artifact.libraries:
        if lib.extension_module is None:
            continue  # an op library (torch.ops.load_library) is loaded by path: its suffix binds nothing
        match = _CPYTHON_SUFFIX.search(lib.member)
        if match:
            tag = f"cp{match[1]}{match[2]}"
            if tag not in wheel.name.python_tags or tag not in wheel.name.abi_tags:
                problems.append(f"{lib.member} is built for {tag} but the wheel is tagged "
                                f"{'.'.join(wheel.name.python_tags)}-{'.'.join(wheel.name.abi_tags)}")
            if not any(t.endswith(match[3]) for t in wheel.name.platform_tags):
                problems.append(f"{lib.member} is built for {match[3]}, the platform tag says "
                                f"{'.'.join(wheel.name.platform_tags)}")
        elif lib.member.endswith(".abi3.so") and "abi3" not in wheel.name.abi_tags:
            problems.append(f"{lib.member} is a stable-ABI (abi3) module but the ABI tag is "
                            f"{'.'.join(wheel.name.abi_tags)}")

    # Build info, local version and the CUDA runtime the binaries need.
    info = artifact.build_info
    cudart = _cudart_majors(artifact)
    version = wheel.name.version
    local: str | None = None
    if not _PLAIN_RELEASE.fullmatch(version):  # 1.13.2 is a PEP 440 version without a local label as it stands
        from packaging.version import InvalidVersion, Version

        try:
            local = Version(version).local
        except InvalidVersion:
            problems.append(f"version '{version}' in the file name is not a PEP 440 version")
    if info is not None:
        if info.get("version") not in (None, version):
            problems.append(f"build info says version {info.get('version')}, the wheel {version}")
        python_tag = info.get("python_tag")
        if python_tag and python_tag.split("-")[0] not in wheel.name.python_tags:
            problems.append(f"build info says {python_tag}, the wheel is tagged {'.'.join(wheel.name.python_tags)}")
        cuda = info.get("cuda")
        torch_version = str(info.get("torch_version") or "")
        stable = info.get("abi_mode") == "stable"
        if local is not None and not stable and not torch_version:
            problems.append(f"local version '+{local}' names a torch build, but the build info has no torch_version")
        elif local is not None:
            cuda_tag = str(info.get("cuda_tag", "cpu"))
            if stable:
                expected = cuda_tag  # one wheel serves every torch from the floor on: only the CUDA variant
            else:
                major_minor = torch_version.split("+")[0].split(".")[:2]
                expected = f"pt{''.join(major_minor)}{cuda_tag}"
            if local != expected:
                problems.append(f"local version '+{local}' does not name the build's "
                                f"{'CUDA variant' if stable else 'torch and CUDA'} ('+{expected}')")
        if cuda is None and cudart:
            problems.append(f"a CPU build (build info cuda: null) whose binaries need libcudart.so.{min(cudart)}")
        if cuda is not None:
            major = int(str(cuda).split(".")[0])
            if cudart and cudart != {major}:
                problems.append(f"built for CUDA {cuda} but the binaries need "
                                f"{', '.join(f'libcudart.so.{m}' for m in sorted(cudart))}")
    if artifact.torch is not None and "+cu" in artifact.torch.version and cudart:
        torch_cuda_major = int(artifact.torch.version.split("+cu")[1][:-1] or 0)
        if cudart != {torch_cuda_major}:
            problems.append(f"the binaries need {', '.join(f'libcudart.so.{m}' for m in sorted(cudart))} but torch "
                            f"{artifact.torch.version} ships CUDA {torch_cuda_major}")

    # The torch pin.
    requirement = torch_requirement(wheel.metadata().get("Requires-Dist", []))
    if info is not None and info.get("torch_version"):
        build_torch = str(info["torch_version"]).split("+")[0]
        if requirement is None:
            problems.append(f"METADATA has no torch requirement, but the binaries only work with torch {build_torch}")
        else:
            problems += _pin_problems(requirement, build_torch, str(info.get("abi_mode", "torch")),
                                      str(info["torch_min"]) if info.get("torch_min") else None)

    foreign_pin = _foreign_pin(artifact, requirement) if info is None else None

    # The platform floor: torch's own wheel's manylinux tag. Without a target torch it is unknown
    # (the --policy default says nothing about torch).
    floor: tuple[int, int] | None = None
    floor_source = ""
    floor_unknown = ""
    below: list[str] = []
    if artifact.torch is not None:
        torch_floors = [manylinux_policy_of_tag(t) for t in artifact.torch.platform_tags()]
        glibcs = [glibc_of_policy_name(p[0]) for p in torch_floors if p]
        if glibcs and all(glibcs):
            floor = min(g for g in glibcs if g)
            floor_source = f"torch {artifact.torch.version}'s own wheel"
        else:
            floor_unknown = f"torch {artifact.torch.version}'s own platform tags are unknown"
    elif requirement is None and not (info and info.get("torch_version")) and not any(
            _TORCH_NEEDED.match(n) for lib in artifact.libraries for n in lib.lib.needed):
        # No torch at all (neither required nor linked): torch's floor does not apply.
        notes.append("no torch is required or linked: torch's platform floor does not apply")
    else:
        floor_unknown = f"no target torch ({artifact.torch_problem})"
    for tag in wheel.name.platform_tags:
        claim = manylinux_policy_of_tag(tag)
        if claim is None:
            notes.append(f"platform tag {tag} makes no manylinux claim (`kiln repair` assigns one)")
            continue
        glibc = glibc_of_policy_name(claim[0])
        if floor is not None and glibc is not None and glibc < floor:
            below.append(f"platform tag {tag} is below manylinux_{floor[0]}_{floor[1]}, the floor of "
                         f"{floor_source}: pip would install it where torch itself cannot run")
    results = _release_results(artifact, wheel)
    if foreign_pin is not None:
        results.append(foreign_pin)
    if below:
        results.append(failed("wheel-tag", f"{wheel.path.name}: " + "; ".join(below) + ".",
                              "repair with auditwheel --plat at or above torch's own manylinux tag.", "below-floor"))
    if floor_unknown and any(manylinux_policy_of_tag(t) for t in wheel.name.platform_tags):
        results.append(failed(
            "wheel-tag", f"{wheel.path.name}: the platform floor (torch's own manylinux tag) is unknown: "
            f"{floor_unknown}; the tags {'.'.join(wheel.name.platform_tags)} were not compared with it.",
            "audit where the target torch is installed (--torch-lib DIR) or recorded (data/torch_abi).",
            "floor-unknown"))
    if problems:
        results.insert(0, failed(
            "wheel-tag", f"{wheel.path.name}: " + "; ".join(problems) + ".",
            "let the build name the wheel (scikit-build-core tags from the interpreter, the version's local "
            "part and torch pin come from the torch built against), repair with auditwheel using "
            "--plat at or above torch's manylinux floor, and never rename wheel files by hand."))
        return results
    suffix = f" ({'; '.join(notes)})" if notes else ""
    if info is None:
        # Not kiln's build: what only its build info says (the build's torch, CUDA variant, local version) is
        # not known, so it is not checked; the torch pin is judged against what the binaries link (above).
        return [passed("wheel-tag", "tags and binaries agree; not checked: local version and CUDA variant against "
                       f"the build (the wheel has no kiln build info){suffix}"), *results]
    return [passed("wheel-tag", f"tags, version, torch pin and binaries agree{suffix}"), *results]


_TORCH_NEEDED = re.compile(r"^lib(torch|c10)[a-z0-9_]*\.so")
_TORCH_CXX = re.compile(r"^_Z(?:N|T[ISV]N)?K?(?:3c10|2at|5torch|6caffe2)")


def _foreign_pin(artifact: ArtifactContext, requirement: str | None) -> CheckResult | None:
    """A wheel without kiln's build info: its torch requirement against what its binaries link. Linking torch
    with no torch requirement, or (for torch's C++ ABI, which changes every minor) allowing more than one torch
    minor, is a finding; None when no binary links torch."""
    linking = [(lib, [n for n in lib.lib.needed if _TORCH_NEEDED.match(n)]) for lib in artifact.libraries]
    linking = [(lib, names) for lib, names in linking if names]
    if not linking:
        return None
    first, names = linking[0]
    who = f"{first.member} (and {len(linking) - 1} more)" if len(linking) > 1 else first.member
    cxx = [(lib, sum(1 for sym in lib.lib.dynamic_symbols if not sym.defined and _TORCH_CXX.match(sym.name)))
           for lib, _ in linking]
    cxx = [(lib, n) for lib, n in cxx if n]
    fix = ("declare the torch the binaries were built against in Requires-Dist: torch==X.Y.* for torch's C++ ABI "
           "(it changes every minor), torch>=X.Y for the LibTorch stable ABI only.")
    if requirement is None:
        return failed("wheel-tag", f"{artifact.wheel.path.name if artifact.wheel else artifact.label}: METADATA "
                      f"requires no torch, but {who} links {', '.join(names)}: pip installs it beside any torch (or "
                      "none), where it fails to load.", fix, "torch-pin")
    if not cxx:
        return None  # stable ABI / C shims only: a lower bound is what matters, and torch checks it at load
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import Version

    try:
        spec = SpecifierSet(requirement)
    except InvalidSpecifier:
        return None  # the pin check above says it does not parse
    lib, count = cxx[0]
    torch = artifact.torch
    if torch is not None:
        built = Version(torch.public_version)
        minors = [Version(f"{built.major}.{built.minor + 1}.0")] + (
            [Version(f"{built.major}.{built.minor - 1}.0")] if built.minor else [])
        wider = [str(v) for v in minors if spec.contains(v, prereleases=True)]
        basis = f"the target torch {torch.version}, chosen by that requirement"
    else:
        wider = ["any later torch"] if spec.contains(Version("999.0"), prereleases=True) else []
        basis = "no upper bound"
    if not wider:
        return None
    return failed("wheel-tag", f"{artifact.wheel.path.name if artifact.wheel else artifact.label}: torch "
                  f"requirement 'torch{requirement}' allows {', '.join(wider)} ({basis}), but {lib.member} uses "
                  f"{count} symbol(s) of torch's C++ ABI, which changes every minor: it fails to load (undefined "
                  "symbol) on another minor.", fix, "torch-pin")


def _release_results(artifact: ArtifactContext, wheel: Wheel) -> list[CheckResult]:
    """--release: every manylinux tag at the release floor, or exactly the stand-in base's one tag."""
    rule = artifact.release
    if rule is None:
        return []
    tags = wheel.name.platform_tags
    floor = f"manylinux_{rule.floor[0]}_{rule.floor[1]}"
    if rule.standin_tag is not None:
        expected = {f"{rule.standin_tag}_{artifact.arch}"}
        if set(tags) != expected:
            return [failed("wheel-tag", f"{wheel.path.name}: built in a STAND-IN base that gives "
                           f"{rule.standin_tag}, but the wheel is tagged {'.'.join(tags)}.",
                           "repair with kiln repair in the same image; data/containers.json names the tag "
                           "its base gives.", "standin-tag")]
        return [passed("wheel-tag", f"STAND-IN run: tagged {rule.standin_tag} as its base (glibc) gives, not "
                       f"the release floor {floor}; not a release wheel")]
    above = []
    for tag in tags:
        claim = manylinux_policy_of_tag(tag)
        glibc = glibc_of_policy_name(claim[0]) if claim else None
        if glibc is None or glibc > rule.floor:
            above.append(tag)
    if above:
        return [failed("wheel-tag", f"{wheel.path.name}: a release wheel must be tagged at the release floor "
                       f"{floor} (the build matrix's manylinux_floor), so it installs wherever torch does; "
                       f"it is tagged {', '.join(above)}: it was built outside the {floor} image.",
                       f"build the release wheels with `kiln cibuildwheel` (it builds, repairs and audits them in "
                       f"the {floor} image), not `kiln wheels`, which builds on this machine.",
                       "above-release-floor")]
    return [passed("wheel-tag", f"release: tagged at or below the release floor {floor}")]


def _pin_problems(requirement: str, build_torch: str, abi_mode: str, torch_min: str | None) -> list[str]:
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import Version

    try:
        spec = SpecifierSet(requirement)
    except InvalidSpecifier:
        return [f"torch requirement '{requirement}' does not parse"]
    built = Version(build_torch)
    problems = []
    if not spec.contains(built, prereleases=True):
        problems.append(f"torch requirement 'torch{requirement}' excludes torch {build_torch}, the build's torch")
    if abi_mode == "stable":
        floor = Version(torch_min) if torch_min else None
        if floor is not None and not spec.contains(floor, prereleases=True):
            problems.append(f"torch requirement 'torch{requirement}' excludes torch {torch_min}, the stable-ABI "
                            "floor the binaries were compiled for")
        elif floor is not None and spec.contains(Version(f"{floor.major}.{floor.minor - 1}.0") if floor.minor
                                                  else Version(f"{floor.major - 1}.0"), prereleases=True):
            problems.append(f"torch requirement 'torch{requirement}' allows torch older than the stable-ABI floor "
                            f"{torch_min}")
    else:
        newer = Version(f"{built.major}.{built.minor + 1}.0")
        older = Version(f"{built.major}.{built.minor - 1}.0") if built.minor else None
        leaks = [str(v) for v in (older, newer) if v is not None and spec.contains(v, prereleases=True)]
        if leaks:
            problems.append(f"torch requirement 'torch{requirement}' allows torch {', '.join(leaks)}, whose C++ ABI "
                            f"differs from {build_torch}'s (pin {built.major}.{built.minor}.*)")
    return problems


def check_record(wheel: Wheel) -> CheckResult:
    dist_info = wheel.dist_info
    record_name = f"{dist_info}/RECORD" if dist_info else None
    if record_name is None or record_name not in wheel.infos:
        return failed("record", f"{wheel.path.name} has no {dist_info or '<name>.dist-info'}/RECORD.",
                      "build the wheel with a PEP 517 backend, which writes RECORD; never edit a wheel by hand.")
    problems: list[str] = []
    listed: dict[str, tuple[str, str]] = {}
    try:
        rows = list(csv.reader(io.StringIO(wheel.read(record_name).decode("utf-8"))))
    except (UnicodeDecodeError, csv.Error) as exc:
        return failed("record", f"{record_name} is not a readable CSV file ({exc}).",
                      "rebuild the wheel; RECORD is written by the build backend.")
    for row in rows:
        if not row:
            continue
        if len(row) != 3:
            problems.append(f"malformed RECORD row {row!r}")
            continue
        listed[row[0]] = (row[1], row[2])
    signatures = {f"{dist_info}/RECORD", f"{dist_info}/RECORD.jws", f"{dist_info}/RECORD.p7s"}
    for member in sorted(wheel.infos):
        if member.endswith("/") or member in signatures:
            continue
        if member not in listed:
            problems.append(f"{member} is not in RECORD")
            continue
        hash_field, size_field = listed[member]
        algorithm, _, expected = hash_field.partition("=")
        if algorithm not in _RECORD_ALGORITHMS or not expected:
            problems.append(f"{member}: hash '{hash_field}' is not sha256/384/512")
            continue
        raw_digest, size = wheel.digest(member, algorithm)
        digest = base64.urlsafe_b64encode(raw_digest).rstrip(b"=").decode()
        if digest != expected:
            problems.append(f"{member}: {algorithm} {digest} differs from RECORD's {expected}")
        if size_field and size_field != str(size):
            problems.append(f"{member}: {size} bytes, RECORD says {size_field}")
    for member in sorted(set(listed) - set(wheel.infos) - signatures):
        problems.append(f"RECORD lists {member}, which the wheel does not hold")
    if problems:
        shown = "; ".join(problems[:6]) + (f"; and {len(problems) - 6} more" if len(problems) > 6 else "")
        return failed("record", f"{record_name}: {shown}. pip refuses (or silently installs) a wheel whose files do "
                      "not match RECORD.", "rewrite RECORD after changing files (auditwheel repair and `wheel pack` do "
                      "this); never edit a wheel with a zip tool.")
    return passed("record", f"{len(listed)} RECORD entries match")
