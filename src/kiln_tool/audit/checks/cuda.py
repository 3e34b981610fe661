"""cuda-sass and cuda-ptx: the device code in `.nv_fatbin` covers the requested architectures."""

from __future__ import annotations

from .. import fatbin
from ..archs import why_not_covering
from ..context import LibraryContext
from ..report import CheckResult, failed, passed


def check_cuda(ctx: LibraryContext, data: fatbin.Data) -> tuple[list[CheckResult], fatbin.ArchManifest | None]:
    """Both checks for a library that carries a fatbin; returns the manifest found for the report."""
    base = ctx.lib.section_offset(".nv_fatbin")
    try:
        entries: list[fatbin.FatbinEntry] = []
        released = 0
        for entry in fatbin.iter_entries(data):
            entries.append(entry)
            if base is not None and len(entries) % 16 == 0:
                # Only headers are read, but each touch maps the pages around it: they go as the walk moves on.
                ctx.lib.release(base + released, entry.offset + entry.size - released)
                released = entry.offset + entry.size
    except fatbin.FatbinError as exc:
        detail = f"{ctx.member}: malformed .nv_fatbin ({exc}); the CUDA runtime cannot load its kernels."
        fix = "rebuild: the section was damaged after nvcc wrote it (a bad strip or objcopy step?)."
        return [failed("cuda-sass", detail, fix), failed("cuda-ptx", detail, fix)], None
    found = fatbin.manifest(entries)
    request = ctx.artifact.archs
    if request is None:
        note = f"found {found.describe()}; no arch list to compare (pass --cuda-archs or ship build info)"
        return [passed("cuda-sass", note), passed("cuda-ptx", note)], found
    results: list[CheckResult] = []
    missing_sass = [a for a in request.sass if a not in found.sass]
    if missing_sass:
        results.append(failed(
            "cuda-sass", f"{ctx.member} lacks SASS for {', '.join(a.sm for a in missing_sass)}: requested "
            f"{request.describe()}; found {found.describe()}. Those GPUs would JIT from PTX at first use (or fail).",
            "build with CMAKE_CUDA_ARCHITECTURES / KILN_CUDA_ARCHS covering every requested arch "
            "(e.g. 80-real;90a-real;120), and check nvcc's -gencode flags are not overridden."))
    else:
        results.append(passed("cuda-sass", f"SASS for every requested arch; found {found.describe()}"))
    missing_ptx = [a for a in request.ptx if a not in found.ptx]
    if missing_ptx:
        reasons = []
        for wanted in missing_ptx:
            others = [why_not_covering(f, wanted) for f in found.ptx]
            reasons.append(f"{wanted.compute} (asked by {wanted}+PTX)" + (f": {'; '.join(others)}" if others else
                                                                          ": the library has no PTX at all"))
        results.append(failed(
            "cuda-ptx", f"{ctx.member} lacks PTX {'; '.join(reasons)}. Requested {request.describe()}; found "
            f"{found.describe()}. GPUs newer than the newest SASS cannot run it.",
            "emit PTX for the archs marked +PTX (CMake '120' instead of '120-real', nvcc -gencode "
            "arch=compute_120,code=compute_120)."))
    elif request.ptx:
        results.append(passed("cuda-ptx", f"PTX for {', '.join(a.compute for a in request.ptx)}"))
    else:
        results.append(passed("cuda-ptx", f"no PTX requested (no +PTX in {request.source}); found "
                              f"{', '.join(a.compute for a in found.ptx) or 'none'}"))
    return results, found
