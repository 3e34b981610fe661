#!/usr/bin/env python3
"""Run the benchmarks and write results.json, results.md and kernels.png into --out.

    python benchmarks/run_all.py --out benchmarks/results [--only import,kernels] [--no-cuda]
                                 [--gpu-json gpu-check-out/bench.json]

Each benchmark is its own script (they measure and print; they are not tests).
--gpu-json adds the kernel figures measured on a GPU machine by
scripts/gpu_check.sh to the table and the chart.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def benchmarks(out: Path, cuda: bool) -> dict[str, list[str]]:
    py = sys.executable
    steps = {
        "import": [py, str(HERE / "bench_import.py"), "--json", str(out / "import.json")],
        "kernels": [py, str(HERE / "bench_kernels.py"), "--device", "cpu", "--json", str(out / "kernels-cpu.json")],
        "build": [py, str(HERE / "bench_build.py"), "--variant", "cpu", "--json", str(out / "build-cpu.json")],
        "audit": [py, str(HERE / "bench_audit.py")],
        "index": [py, str(HERE / "bench_index.py")],
        "hostile": [py, str(HERE / "bench_hostile.py")],
    }
    if cuda:
        steps["build-cuda"] = [py, str(HERE / "bench_build.py"), "--variant", "cu130", "--archs", "9.0+PTX",
                               "--json", str(out / "build-cu130.json")]
        steps["size"] = [py, str(HERE / "bench_size.py"), "--variant", "cu130", "--json", str(out / "size.json")]
    return steps


def kernel_rows(doc: dict[str, Any], where: str) -> list[dict[str, Any]]:
    return [{**row, "where": where} for row in doc.get("results", []) if "ms" in row]


def write_markdown(out: Path, results: dict[str, Any], kernels: list[dict[str, Any]]) -> None:
    lines = ["# opkiln benchmarks", ""]
    for name, res in results.items():
        lines += [f"## {name}", "", f"exit {res['rc']}, {res['seconds']:.1f} s", ""]
        if res.get("json"):
            lines += ["```json", json.dumps(res["json"], indent=2)[:4000], "```", ""]
        else:
            lines += ["```", res["stdout"][-3000:].rstrip(), "```", ""]
    if kernels:
        lines += ["## kernels", "", "| where | case | impl | ms | GB/s | x copy |", "|---|---|---|---|---|---|"]
        for r in kernels:
            lines.append(f"| {r['where']} | {r['case']} | {r['impl']} | {r['ms']} | {r.get('gb_per_s', '')} | "
                         f"{r.get('fraction_of_copy', '')} |")
    (out / "results.md").write_text("\n".join(lines) + "\n")


def write_chart(out: Path, kernels: list[dict[str, Any]]) -> Path | None:
    if not kernels:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = sorted({(r["where"], r["case"]) for r in kernels})
    fig, axes = plt.subplots(len(groups), 1, figsize=(9, 1.6 + 1.1 * len(groups) * 1.6), squeeze=False)
    for ax, (where, case) in zip(axes[:, 0], groups, strict=True):
        rows = [r for r in kernels if r["where"] == where and r["case"] == case]
        names = [r["impl"] for r in rows]
        values = [r["ms"] for r in rows]
        colors = ["#d9480f" if n.startswith("opkiln") else "#868e96" for n in names]
        ax.barh(names, values, color=colors)
        ax.set_title(f"{case} ({where})", fontsize=9, loc="left")
        ax.set_xlabel("ms (lower is better)", fontsize=8)
        ax.tick_params(labelsize=8)
        for y, v in enumerate(values):
            ax.text(v, y, f" {v:.3g}", va="center", fontsize=7)
    fig.tight_layout()
    path = out / "kernels.png"
    fig.savefig(path, dpi=110)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--only", default="", help="comma-separated benchmark names")
    parser.add_argument("--no-cuda", action="store_true", help="skip the CUDA build and size benchmarks")
    parser.add_argument("--gpu-json", type=Path, action="append", default=[],
                        help="kernel results from scripts/gpu_check.sh (bench.json), repeatable")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    steps = benchmarks(args.out, not args.no_cuda)
    wanted = [n for n in args.only.split(",") if n] or list(steps)
    unknown = set(wanted) - set(steps)
    if unknown:
        parser.error(f"unknown benchmark(s) {sorted(unknown)}; known: {sorted(steps)}")
    results: dict[str, Any] = {}
    for name in wanted:
        print(f"== {name}", flush=True)
        started = time.perf_counter()
        proc = subprocess.run(steps[name], capture_output=True, text=True)
        print(proc.stdout[-2500:], proc.stderr[-1500:] if proc.returncode else "", flush=True)
        entry: dict[str, Any] = {"rc": proc.returncode, "seconds": time.perf_counter() - started,
                                 "stdout": proc.stdout}
        json_args = [a for i, a in enumerate(steps[name]) if i and steps[name][i - 1] == "--json"]
        if json_args and Path(json_args[0]).exists():
            entry["json"] = json.loads(Path(json_args[0]).read_text())
        results[name] = entry
    kernels: list[dict[str, Any]] = []
    if "kernels" in results and results["kernels"].get("json"):
        kernels += kernel_rows(results["kernels"]["json"], "cpu")
    for path in args.gpu_json:
        doc = json.loads(path.read_text())
        kernels += kernel_rows(doc, doc.get("environment", {}).get("gpu", "gpu"))
    (args.out / "results.json").write_text(json.dumps({k: {kk: vv for kk, vv in v.items() if kk != "stdout"}
                                                       for k, v in results.items()}, indent=2))
    write_markdown(args.out, results, kernels)
    chart = write_chart(args.out, kernels)
    print(f"wrote {args.out / 'results.json'}, {args.out / 'results.md'}" + (f", {chart}" if chart else ""))
    return 1 if any(r["rc"] for r in results.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
