#!/usr/bin/env python3
"""Time the opkiln kernels against torch baselines and check their results.

    python benchmarks/bench_kernels.py [--device cpu|cuda] [--json PATH] [--no-compile]

CUDA: warmup, then CUDA-event timing, median of --iters runs. CPU: the same
with perf_counter and smaller default sizes. Every figure, the correctness
checks (max abs error vs a reference, NMS kept indices equal to torchvision's
or to a pure-PyTorch reference, roi_align against torchvision where importable
and the pure-PyTorch reference always) and the issue-8 targets go to the JSON file.
Bandwidth is "effective": the bytes an op must move at least, over its time,
and its fraction of a device-to-device copy measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

import opkiln

# The same pure-PyTorch reference of torchvision's nms the tests use.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.ops_reference import nms_ref
from support.roi_align_reference import random_rois, roi_align_ref

# issue 8, on the H200
TARGETS_MS = {"weighted_sum_256M_fp32": 0.80, "rms_norm_fwd_bf16_16384x8192": 0.15, "nms_10k": 2.0,
              "nms_100k": 50.0}
WEIGHTED_SUM_COPY_FRACTION = 0.95


def timer(device: str, iters: int, warmup: int) -> Callable[[Callable[[], object]], float]:
    def run(fn: Callable[[], object]) -> float:
        for _ in range(warmup):
            fn()
        times = []
        if device == "cuda":
            torch.cuda.synchronize()
            for _ in range(iters):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end))
        else:
            for _ in range(iters):
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)

    return run


class Report:
    def __init__(self, device: str) -> None:
        self.rows: list[dict[str, Any]] = []
        self.checks: list[dict[str, Any]] = []
        self.device = device
        self.copy_gbps: float | None = None

    def add(self, case: str, impl: str, ms: float, nbytes: int | None = None, **extra: Any) -> dict[str, Any]:
        row: dict[str, Any] = {"case": case, "impl": impl, "ms": round(ms, 5)}
        if nbytes is not None and ms > 0:
            gbps = nbytes / (ms * 1e-3) / 1e9
            row["gb_per_s"] = round(gbps, 1)
            if self.copy_gbps:
                row["fraction_of_copy"] = round(gbps / self.copy_gbps, 3)
        row.update(extra)
        self.rows.append(row)
        print(f"  {case:34s} {impl:22s} {ms:10.4f} ms" + (f"  {row['gb_per_s']:8.1f} GB/s" if "gb_per_s" in row else "")
              + (f"  {row['fraction_of_copy']:.2f}x copy" if "fraction_of_copy" in row else ""), flush=True)
        return row

    def check(self, name: str, ok: bool, **detail: Any) -> None:
        self.checks.append({"check": name, "ok": bool(ok), **detail})
        print(f"  check {name}: {'ok' if ok else 'FAILED'} {detail}", flush=True)


def maybe_compile(fn: Callable[..., torch.Tensor], enabled: bool) -> Callable[..., torch.Tensor] | None:
    if not enabled:
        return None
    try:
        return torch.compile(fn, fullgraph=True)
    except Exception as exc:  # torch.compile can be unavailable (no compiler); report, do not die
        print(f"  torch.compile unavailable: {exc}", file=sys.stderr)
        return None


def try_time(report: Report, run: Callable[[Callable[[], object]], float], case: str, impl: str,
             fn: Callable[[], object], nbytes: int | None = None) -> float | None:
    try:
        ms = run(fn)
    except Exception as exc:
        print(f"  {case} {impl}: skipped ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})", file=sys.stderr)
        report.rows.append({"case": case, "impl": impl, "error": f"{type(exc).__name__}: {exc}"[:500]})
        return None
    report.add(case, impl, ms, nbytes)
    return ms


# ---------------------------------------------------------------------------- cases


def bench_copy(report: Report, run: Callable[[Callable[[], object]], float], device: str, n: int) -> None:
    src = torch.randn(n, device=device)
    dst = torch.empty_like(src)
    ms = run(lambda: dst.copy_(src))
    report.copy_gbps = 2 * src.nbytes / (ms * 1e-3) / 1e9
    report.add(f"copy {n} fp32", "tensor.copy_", ms, 2 * src.nbytes)


def bench_weighted_sum(report: Report, run: Callable[[Callable[[], object]], float], device: str, n: int,
                       compile_: bool) -> None:
    alpha = 0.3
    a = torch.randn(n, device=device)
    b = torch.randn(n, device=device)
    case = f"weighted_sum {n} fp32"
    nbytes = 3 * a.nbytes
    ours = run(lambda: opkiln.weighted_sum(a, b, alpha))
    row = report.add(case, "opkiln", ours, nbytes)
    try_time(report, run, case, "eager a*x+(1-a)*y", lambda: alpha * a + (1 - alpha) * b, nbytes)
    try_time(report, run, case, "torch.lerp", lambda: torch.lerp(b, a, alpha), nbytes)
    compiled = maybe_compile(lambda x, y: alpha * x + (1 - alpha) * y, compile_)
    if compiled is not None:
        try_time(report, run, case, "torch.compile", lambda: compiled(a, b), nbytes)
    # Reference in float64 on a slice (the full tensor would double the memory).
    m = min(n, 1 << 22)
    out = opkiln.weighted_sum(a, b, alpha)[:m].double()
    err = (out - (alpha * a[:m].double() + (1 - alpha) * b[:m].double())).abs().max().item()
    report.check(f"{case} max abs error vs fp64", err < 1e-5, max_abs_error=err)
    if device == "cuda" and n == 256 << 20:
        target = TARGETS_MS["weighted_sum_256M_fp32"]
        report.check(f"{case} <= {target} ms", ours <= target, ms=round(ours, 4))
        frac = row.get("fraction_of_copy", 0.0)
        report.check(f"{case} >= {WEIGHTED_SUM_COPY_FRACTION:.0%} of copy bandwidth",
                     frac >= WEIGHTED_SUM_COPY_FRACTION, fraction=frac)


def rms_norm_eager(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def bench_rms_norm(report: Report, run: Callable[[Callable[[], object]], float], device: str, rows: int, cols: int,
                   compile_: bool) -> None:
    eps = 1e-6
    dtype = torch.bfloat16
    x = torch.randn(rows, cols, device=device, dtype=dtype)
    w = (1 + 0.1 * torch.randn(cols, device=device)).to(dtype)
    case = f"rms_norm fwd {rows}x{cols} bf16"
    nbytes = 2 * x.nbytes + w.nbytes
    ours = run(lambda: opkiln.rms_norm(x, w, eps))
    report.add(case, "opkiln", ours, nbytes)
    try_time(report, run, case, "eager (fp32 math)", lambda: rms_norm_eager(x, w, eps), nbytes)
    try_time(report, run, case, "F.rms_norm", lambda: F.rms_norm(x, (cols,), w, eps), nbytes)
    compiled = maybe_compile(lambda t, v: rms_norm_eager(t, v, eps), compile_)
    if compiled is not None:
        try_time(report, run, case, "torch.compile", lambda: compiled(x, w), nbytes)
    ref_rows = min(rows, 2048)
    err = (opkiln.rms_norm(x[:ref_rows], w, eps).float() - rms_norm_eager(x[:ref_rows].double(), w.double(), eps)
           .float()).abs().max().item()
    report.check(f"{case} max abs error vs fp64", err < 0.05, max_abs_error=err)
    if device == "cuda" and (rows, cols) == (16384, 8192):
        target = TARGETS_MS["rms_norm_fwd_bf16_16384x8192"]
        report.check(f"{case} <= {target} ms", ours <= target, ms=round(ours, 4))

    # Backward: the fused kernel alone, and full autograd backward against eager autograd.
    case = f"rms_norm bwd {rows}x{cols} bf16"
    grad = torch.randn_like(x)
    _, rstd = torch.ops.opkiln._rms_norm_forward(x, w, eps)
    bwd_bytes = 3 * x.nbytes + 2 * w.nbytes  # read grad and x, write dx
    report.add(case, "opkiln fused kernel", run(lambda: torch.ops.opkiln._rms_norm_backward(grad, x, w, rstd)),
               bwd_bytes)
    xg = x.detach().requires_grad_(True)
    wg = w.detach().requires_grad_(True)
    y_ours = opkiln.rms_norm(xg, wg, eps)
    y_eager = rms_norm_eager(xg, wg, eps)
    y_f = F.rms_norm(xg, (cols,), wg, eps)
    report.add(case, "opkiln autograd", run(lambda: torch.autograd.grad(y_ours, (xg, wg), grad, retain_graph=True)),
               bwd_bytes)
    try_time(report, run, case, "eager autograd",
             lambda: torch.autograd.grad(y_eager, (xg, wg), grad, retain_graph=True), bwd_bytes)
    try_time(report, run, case, "F.rms_norm autograd",
             lambda: torch.autograd.grad(y_f, (xg, wg), grad, retain_graph=True), bwd_bytes)
    ref_rows = min(rows, 1024)
    xd = x[:ref_rows].double().requires_grad_(True)
    wd = w.double().requires_grad_(True)
    dx_ref, dw_ref = torch.autograd.grad(rms_norm_eager(xd, wd, eps), (xd, wd), grad[:ref_rows].double())
    dx, dw = torch.ops.opkiln._rms_norm_backward(grad[:ref_rows], x[:ref_rows], w, rstd[:ref_rows])
    err_dx = (dx.double() - dx_ref).abs().max().item()
    err_dw = ((dw.double() - dw_ref).abs() / (dw_ref.abs() + 1)).max().item()
    report.check(f"{case} dx max abs error vs fp64", err_dx < 0.1, max_abs_error=err_dx)
    report.check(f"{case} dw max rel error vs fp64", err_dw < 0.05, max_rel_error=err_dw)


def random_boxes(n: int, device: str, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Detection-like boxes: corners uniform in a 1024 x 1024 image, sides uniform in [16, 128), all on a
    quarter-pixel grid so that every area and intersection is exact in float32 (no rounding decides a
    comparison with torchvision); distinct scores (no ties, whose order torchvision leaves to its sort)."""
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g) * 1024
    wh = 16 + torch.rand(n, 2, generator=g) * 112
    boxes = (torch.cat([xy, xy + wh], 1) * 4).round() / 4
    scores = torch.randperm(n, generator=g).float() / n
    return boxes.to(device), scores.to(device)


def first_difference(got: list[int], expected: list[int]) -> dict[str, Any]:
    pos = next((i for i, (a, b) in enumerate(zip(got, expected, strict=False)) if a != b), min(len(got), len(expected)))
    return {"position": pos, "got": got[pos:pos + 5], "expected": expected[pos:pos + 5]}


def import_torchvision_ops() -> Any:
    try:
        import torchvision.ops as tv_ops  # optional: present on the GPU machine only
    except Exception:
        return None
    return tv_ops


def bench_nms(report: Report, device: str, n: int, label: str, iters: int) -> None:
    thr = 0.5
    boxes, scores = random_boxes(n, device, seed=n)
    case = f"nms {label} ({n} boxes, iou 0.5)"
    slow_iters = max(3, iters // 4)
    run = timer(device, slow_iters, 2)
    ours_ms = run(lambda: opkiln.nms(boxes, scores, thr))
    keep = opkiln.nms(boxes, scores, thr)
    report.add(case, "opkiln", ours_ms, kept=int(keep.numel()))
    tv_ops = import_torchvision_ops()
    if tv_ops is not None:
        try:
            tv_ms = run(lambda: tv_ops.nms(boxes, scores, thr))
            expected = tv_ops.nms(boxes, scores, thr)
            report.add(case, "torchvision.ops.nms", tv_ms, kept=int(expected.numel()))
            got_list, exp_list = keep.cpu().tolist(), expected.cpu().tolist()
            detail = {} if got_list == exp_list else {"first_difference": first_difference(got_list, exp_list)}
            report.check(f"{case} kept indices == torchvision", got_list == exp_list, kept=len(got_list),
                         torchvision_kept=len(exp_list), **detail)
        except Exception as exc:  # e.g. torchvision built for another torch: report, go on
            report.check(f"{case} torchvision comparison", False, error=f"{type(exc).__name__}: {exc}"[:300])
    elif n <= 20000:
        got_list, exp_list = keep.cpu().tolist(), nms_ref(boxes, scores, thr).tolist()
        detail = {} if got_list == exp_list else {"first_difference": first_difference(got_list, exp_list)}
        report.check(f"{case} kept indices == reference", got_list == exp_list, kept=len(got_list), **detail)
    if device == "cuda" and label in ("10k", "100k"):
        target = TARGETS_MS[f"nms_{label}"]
        report.check(f"{case} <= {target} ms", ours_ms <= target, ms=round(ours_ms, 4))


def bench_roi_align(report: Report, run: Callable[[Callable[[], object]], float], device: str,
                    shape: tuple[int, int, int, int], num_rois: int) -> None:
    """A detector's box head: 7x7 bins, sampling ratio 2, aligned, on one FPN level (stride 16)."""
    n, c, h, w = shape
    scale, pooled, sampling_ratio, aligned = 1 / 16, 7, 2, True
    dtype = torch.float32
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(device)
    rois = random_rois(num_rois, n, h, w, dtype, seed=1, spatial_scale=scale).to(device)
    case = f"roi_align {num_rois} rois {n}x{c}x{h}x{w} fp32"
    args = (scale, pooled, pooled, sampling_ratio, aligned)  # the registered op's order (and the reference's)
    tv_args = ((pooled, pooled), scale, sampling_ratio, aligned)  # torchvision's, which opkiln.roi_align takes
    report.add(f"{case} fwd", "opkiln", run(lambda: opkiln.roi_align(x, rois, *tv_args)))
    tv_ops = import_torchvision_ops()
    if tv_ops is not None:
        try_time(report, run, f"{case} fwd", "torchvision.ops.roi_align", lambda: tv_ops.roi_align(x, rois, *tv_args))
    xg = x.detach().requires_grad_(True)
    grad = torch.randn(num_rois, c, pooled, pooled, generator=torch.Generator().manual_seed(2)).to(device)
    y_ours = opkiln.roi_align(xg, rois, *tv_args)
    report.add(f"{case} bwd", "opkiln autograd",
               run(lambda: torch.autograd.grad(y_ours, xg, grad, retain_graph=True)))
    if tv_ops is not None:
        try:
            y_tv = tv_ops.roi_align(xg, rois, *tv_args)
            try_time(report, run, f"{case} bwd", "torchvision autograd",
                     lambda: torch.autograd.grad(y_tv, xg, grad, retain_graph=True))
            out, expected = opkiln.roi_align(x, rois, *tv_args), tv_ops.roi_align(x, rois, *tv_args)
            err = (out - expected).abs().max().item()
            report.check(f"{case} fwd max abs error vs torchvision", err < 1e-4, max_abs_error=err)
            (g_ours,) = torch.autograd.grad(y_ours, xg, grad, retain_graph=True)
            (g_tv,) = torch.autograd.grad(y_tv, xg, grad, retain_graph=True)
            err = ((g_ours - g_tv).abs().max() / (g_tv.abs().max() + 1)).item()
            report.check(f"{case} bwd max rel error vs torchvision", err < 1e-5, max_rel_error=err)
        except Exception as exc:  # e.g. torchvision built for another torch: report, go on
            report.check(f"{case} torchvision comparison", False, error=f"{type(exc).__name__}: {exc}"[:300])
    # The pure-PyTorch reference in float64 on the first rois (it loops over rois in Python).
    k = min(num_rois, 64)
    xd = x.double().requires_grad_(True)
    ref = roi_align_ref(xd, rois[:k].double(), *args)
    (g_ref,) = torch.autograd.grad(ref, xd, grad[:k].double())
    xs = x.detach().requires_grad_(True)
    out = opkiln.roi_align(xs, rois[:k], *tv_args)
    (g_out,) = torch.autograd.grad(out, xs, grad[:k])
    err = (out.double() - ref).abs().max().item()
    report.check(f"{case} fwd max abs error vs fp64 reference ({k} rois)", err < 1e-4, max_abs_error=err)
    err = ((g_out.double() - g_ref).abs().max() / (g_ref.abs().max() + 1)).item()
    report.check(f"{case} bwd max rel error vs fp64 reference ({k} rois)", err < 1e-5, max_rel_error=err)


# ---------------------------------------------------------------------------- the RoI family beside torchvision

# issue 37: every RoI-family op and nms at most this fraction of torchvision's CPU time, at 1 and 2 threads.
ROI_FAMILY_TARGET = 0.8


def roi_family_shapes() -> list[tuple[str, tuple[int, int, int, int], int, float]]:
    """(label, input [N, C, H, W], boxes, box side in input pixels): the issue's shape (2x256x64x64, 512
    boxes, 7x7, sampling ratio 2, aligned; boxes up to the whole map), small boxes (2-8 pixels: the per-box
    overhead), many channels (1024). The position-sensitive ops take C rounded to a multiple of 49."""
    return [("issue 2x256x64x64 512 boxes", (2, 256, 64, 64), 512, 64.0),
            ("small boxes 2x256x64x64 512 boxes", (2, 256, 64, 64), 512, 8.0),
            ("many channels 2x1024x32x32 256 boxes", (2, 1024, 32, 32), 256, 32.0)]


def family_rois(num_rois: int, n: int, h: int, w: int, side: float, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    b = torch.randint(0, n, (num_rois, 1), generator=g).float()
    size = 2 + torch.rand(num_rois, 2, generator=g) * (side - 2)
    xy = torch.rand(num_rois, 2, generator=g) * (torch.tensor([w, h]) - size).clamp(min=1)
    return torch.cat([b, xy, xy + size], dim=1)


def roi_call(op: Callable[..., torch.Tensor], x: torch.Tensor, rois: torch.Tensor, args: tuple[Any, ...],
             kind: str) -> Callable[[], object]:
    """op(x, rois, *args), or it and the backward of its sum (kind "fwd+bwd")."""
    if kind == "fwd":
        return lambda: op(x, rois, *args)
    xg = x.clone().requires_grad_(True)
    return lambda: torch.autograd.grad(op(xg, rois, *args).sum(), xg)


def time_interleaved(ours: Callable[[], object], theirs: Callable[[], object],
                     iters: int) -> tuple[float, float, float, float]:
    """(our median ms, their median ms, median of the per-round ratios, ratio of the two bests), the two timed
    in alternation, so that a busy shared machine slows both alike (the ratio is the figure; the times move
    with the load)."""
    ours()
    theirs()
    pairs = []
    for i in range(iters):
        order = (ours, theirs) if i % 2 == 0 else (theirs, ours)
        times = {}
        for fn in order:
            t0 = time.perf_counter()
            fn()
            times[fn is ours] = (time.perf_counter() - t0) * 1e3
        pairs.append((times[True], times[False]))
    return (statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs),
            statistics.median(p[0] / p[1] for p in pairs), min(p[0] for p in pairs) / min(p[1] for p in pairs))


def nms_call(nms: Callable[..., torch.Tensor]) -> Callable[[], object]:
    boxes, scores = random_boxes(10_000, "cpu", seed=10_000)
    return lambda: nms(boxes, scores, 0.5)


DEFORM_SHAPE = "2x256x64x64 3x3 pad 1, 1 offset group, mask"


def deform_call(op: Callable[..., torch.Tensor], kind: str) -> Callable[[], object]:
    """deform_conv2d at the issue's shape (batch 2, 256 -> 256 channels, 64x64, 3x3, one offset group, with a
    mask: DCN v2), offsets of about 2 pixels; or it and the backward of its sum into all five inputs."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 256, 64, 64, generator=g)
    offset = torch.randn(2, 18, 64, 64, generator=g) * 2
    mask = torch.rand(2, 9, 64, 64, generator=g)
    weight = torch.randn(256, 256, 3, 3, generator=g) * 0.02
    bias = torch.randn(256, generator=g)
    if kind == "fwd":
        return lambda: op(x, offset, weight, bias, padding=(1, 1), mask=mask)
    xs = [t.clone().requires_grad_(True) for t in (x, offset, weight, bias, mask)]
    return lambda: torch.autograd.grad(op(xs[0], xs[1], xs[2], xs[3], padding=(1, 1), mask=xs[4]).sum(), xs)


def row(op: str, shape: str, threads: int, kind: str, timing: tuple[float, float, float, float]) -> dict[str, Any]:
    ours_ms, tv_ms, ratio, best_ratio = timing
    print(f"  {op + ' ' + shape + f' ({threads} thr)':62s} {kind:8s} opkiln {ours_ms:9.3f} ms  torchvision "
          f"{tv_ms:9.3f} ms  {ratio:.2f}x", flush=True)
    return {"op": op, "shape": shape, "threads": threads, "pass": kind, "opkiln_ms": round(ours_ms, 3),
            "torchvision_ms": round(tv_ms, 3), "ratio": round(ratio, 3), "best_ratio": round(best_ratio, 3)}


def print_table(table: list[dict[str, Any]], loads: tuple[tuple[float, ...], tuple[float, ...]]) -> None:
    """The whole RoI family + nms table in one piece: median times, the median of the per-round ratios (the
    figure the target reads) and the ratio of the best times, with the load average before and after."""
    print(f"\nRoI family + nms + deform_conv2d beside torchvision on the CPU (target <= {ROI_FAMILY_TARGET}x; "
          f"load average "
          f"{' '.join(f'{v:.2f}' for v in loads[0])} before, {' '.join(f'{v:.2f}' for v in loads[1])} after)")
    print(f"  {'op':13s} {'shape':38s} {'thr':>3s} {'pass':8s} {'opkiln ms':>10s} {'tv ms':>10s} {'ratio':>6s} "
          f"{'best':>6s}  met")
    for r in table:
        print(f"  {r['op']:13s} {r['shape']:38s} {r['threads']:3d} {r['pass']:8s} {r['opkiln_ms']:10.3f} "
              f"{r['torchvision_ms']:10.3f} {r['ratio']:6.2f} {r['best_ratio']:6.2f}  "
              f"{'yes' if r['ratio'] <= ROI_FAMILY_TARGET else 'NO'}")


def bench_roi_family(report: Report, iters: int, threads: list[int]) -> list[dict[str, Any]]:
    """Every RoI-family op (forward; forward + backward) and nms 10k beside torchvision on the CPU, at each
    thread count: one row per (op, shape, threads) with both times and the ratio."""
    tv_ops = import_torchvision_ops()
    if tv_ops is None:
        print("  the RoI family table needs torchvision (pip install --no-deps torchvision==0.29.1)", file=sys.stderr)
        return []
    table: list[dict[str, Any]] = []
    pooled, sr = 7, 2
    ops_: dict[str, tuple[Callable[..., torch.Tensor], Callable[..., torch.Tensor], tuple[Any, ...], bool]] = {
        "roi_align": (opkiln.ops.roi_align, tv_ops.roi_align, ((pooled, pooled), 1.0, sr, True), False),
        "roi_pool": (opkiln.ops.roi_pool, tv_ops.roi_pool, ((pooled, pooled), 1.0), False),
        "ps_roi_align": (opkiln.ops.ps_roi_align, tv_ops.ps_roi_align, ((pooled, pooled), 1.0, sr), True),
        "ps_roi_pool": (opkiln.ops.ps_roi_pool, tv_ops.ps_roi_pool, ((pooled, pooled), 1.0), True),
    }
    saved = torch.get_num_threads()
    load_before = os.getloadavg()
    try:
        for t in threads:
            torch.set_num_threads(t)
            for label, (n, c, h, w), num_rois, side in roi_family_shapes():
                rois = family_rois(num_rois, n, h, w, side, seed=1)
                for name, (ours, theirs, args, position_sensitive) in ops_.items():
                    channels = c // 49 * 49 if position_sensitive else c
                    x = torch.randn(n, channels, h, w, generator=torch.Generator().manual_seed(0))
                    for kind in ("fwd", "fwd+bwd"):
                        timing = time_interleaved(roi_call(ours, x, rois, args, kind),
                                                  roi_call(theirs, x, rois, args, kind), iters)
                        table.append(row(name, label, t, kind, timing))
                    err = (ours(x, rois, *args) - theirs(x, rois, *args)).abs().max().item()
                    report.check(f"{name} {label} ({t} thr) fwd max abs error vs torchvision", err < 1e-4,
                                 max_abs_error=err)
            table.append(row("nms", "10k boxes, iou 0.5", t, "fwd",
                             time_interleaved(nms_call(opkiln.nms), nms_call(tv_ops.nms), iters)))
            for kind in ("fwd", "fwd+bwd"):
                table.append(row("deform_conv2d", DEFORM_SHAPE, t, kind,
                                 time_interleaved(deform_call(opkiln.ops.deform_conv2d, kind),
                                                  deform_call(tv_ops.deform_conv2d, kind), iters)))
            err = (deform_call(opkiln.ops.deform_conv2d, "fwd")() - deform_call(tv_ops.deform_conv2d, "fwd")())
            report.check(f"deform_conv2d ({t} thr) fwd max abs error vs torchvision", err.abs().max().item() < 1e-3,
                         max_abs_error=err.abs().max().item())
    finally:
        torch.set_num_threads(saved)
    print_table(table, (load_before, os.getloadavg()))
    met = [r for r in table if r["ratio"] <= ROI_FAMILY_TARGET]
    report.check(f"RoI family + nms + deform_conv2d <= {ROI_FAMILY_TARGET}x torchvision's CPU time",
                 len(met) == len(table),
                 met=len(met), rows=len(table),
                 missed=[f"{r['op']} {r['shape']} {r['threads']}thr {r['pass']} {r['ratio']}x" for r in table
                         if r["ratio"] > ROI_FAMILY_TARGET])
    return table


# ---------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--json", metavar="PATH", help="write every figure and check here")
    parser.add_argument("--iters", type=int, default=None, help="timed runs per case (median); default 50 cuda, 5 cpu")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile baselines")
    parser.add_argument("--quick", action="store_true", help="small sizes on any device (smoke test)")
    parser.add_argument("--roi-family", action="store_true",
                        help="only the RoI family + nms + deform_conv2d table beside torchvision on the CPU, "
                             "at --threads")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="thread counts of the RoI table")
    args = parser.parse_args(argv)
    device = args.device
    if device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available")
    big = device == "cuda" and not args.quick
    iters = args.iters or (50 if device == "cuda" else 5)
    run = timer(device, iters, warmup=5 if device == "cuda" else 1)
    compile_ = not args.no_compile

    ws_n = (256 << 20) if big else (8 << 20)
    rms_shape = (16384, 8192) if big else (1024, 4096)
    nms_cases = [(10_000, "10k"), (100_000, "100k")] if big else [(2_000, "2k"), (10_000, "10k-cpu")]
    roi_case = ((2, 256, 50, 68), 1000) if big else ((2, 64, 50, 68), 256)

    env = {"device": device, "torch": torch.__version__, "opkiln": opkiln.__version__,
           "python": platform.python_version(),
           "gpu": torch.cuda.get_device_name() if device == "cuda" else platform.processor() or platform.machine(),
           "threads": torch.get_num_threads(), "iters": iters, "load_average": os.getloadavg(),
           "command": " ".join([Path(sys.executable).name, *sys.argv]),
           "timing": "cuda events, median" if device == "cuda" else "perf_counter, median"}
    print(f"opkiln kernel benchmark on {env['gpu']} ({device}), torch {env['torch']}, opkiln {env['opkiln']}")
    print(f"  command: {env['command']}; load average {' '.join(f'{v:.2f}' for v in env['load_average'])}"
          + (f"; RoI table at {' and '.join(map(str, args.threads))} thread(s)" if args.roi_family else ""))
    report = Report(device)
    if args.roi_family:
        table = bench_roi_family(report, iters, args.threads)
        return finish(report, env, args.json, {"roi_family": table})
    bench_copy(report, run, device, ws_n)
    bench_weighted_sum(report, run, device, ws_n, compile_)
    bench_rms_norm(report, run, device, *rms_shape, compile_)
    for n, label in nms_cases:
        bench_nms(report, device, n, label, iters)
    bench_roi_align(report, run, device, *roi_case)
    return finish(report, env, args.json, {})


def finish(report: Report, env: dict[str, Any], json_path: str | None, extra: dict[str, Any]) -> int:
    failed = [c["check"] for c in report.checks if not c["ok"]]
    summary = {"environment": env, "copy_gb_per_s": round(report.copy_gbps or math.nan, 1), "targets_ms": TARGETS_MS,
               "results": report.rows, "checks": report.checks, "all_checks_ok": not failed, **extra}
    if json_path:
        with open(json_path, "w") as fh:
            json.dump(summary, fh, indent=2)
        print(f"wrote {json_path}")
    ok = len(report.checks) - len(failed)
    print(f"{ok}/{len(report.checks)} checks ok" + (f"; failed: {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
