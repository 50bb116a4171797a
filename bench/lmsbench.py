"""Run an LMS benchmark program and plot its JSON (docs/gpu.md).

    python3 bench/lmsbench.py copy    --bin-dir BUILD/bin --out DIR [-- PROGRAM_OPTIONS...]
    python3 bench/lmsbench.py oversub --bin-dir BUILD/bin --out DIR [-- PROGRAM_OPTIONS...]
    python3 bench/lmsbench.py plot RESULT.json [--png FILE]
    python3 bench/lmsbench.py compare RESULT.json REFERENCE.json

`copy` and `oversub` run lms_bench_copy / lms_bench_oversub, which write
DIR/copy-engine.json or DIR/oversubscription.json, then plot it next to it (.png) and print a
table. `plot` redraws a PNG from a JSON file alone, on any machine with matplotlib. `compare`
puts two results of one benchmark side by side, row by row (a simulated run against the GPU
run its timing model was calibrated on, or two GPUs).

Exit codes: those of the program (0 ok, 1 a data check failed, 2 bad usage, 4 no CUDA device),
and 2 for a bad argument of this driver.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NO_CUDA = 0, 1, 2, 4
BENCHMARKS = {
    # name: (program, result file stem, "benchmark" field of the JSON)
    "copy": ("lms_bench_copy", "copy-engine", "copy-engine"),
    "oversub": ("lms_bench_oversub", "oversubscription", "oversubscription"),
}
MiB = 1024 * 1024


class BadResult(Exception):
    """A JSON file that is not a benchmark result this script understands."""


def load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise BadResult(f"cannot read {path}: {error}") from error
    kinds = {kind for _, _, kind in BENCHMARKS.values()}
    if not isinstance(data, dict) or data.get("benchmark") not in kinds:
        raise BadResult(f"{path} is not a benchmark result (its 'benchmark' is not one of "
                        f"{', '.join(sorted(kinds))})")
    if data.get("schema") != 1 or not isinstance(data.get("results"), list):
        raise BadResult(f"{path}: unknown schema {data.get('schema')!r}")
    return data


def size_label(size: int) -> str:
    for unit, scale in (("G", 1024 ** 3), ("M", MiB), ("K", 1024)):
        if size >= scale and size % scale == 0:
            return f"{size // scale}{unit}"
    return str(size)


def device_label(data: dict[str, Any]) -> str:
    """The device's name; results from the simulated CUDA runtime say so (never a GPU result)."""
    device = data.get("device", {}).get("name", "unknown device")
    if data.get("simulated"):
        calibration = data.get("timing", {}).get("calibration", {}).get("name")
        device += (f" — SIMULATED, calibration {calibration}: not a GPU result" if calibration
                   else " — SIMULATED: lmsforge's cuda_sim, not a GPU result")
    return device


def _relative(value: float, reference: float) -> str:
    return f"{(value / reference - 1):+7.1%}" if reference else "      -"


def compare(data: dict[str, Any], reference: dict[str, Any]) -> str:
    """Two results of one benchmark side by side, matched by k or by size, with the relative
    difference of the first from the second."""
    if data["benchmark"] != reference["benchmark"]:
        raise BadResult(f"cannot compare {data['benchmark']} with {reference['benchmark']}")
    lines = [f"{data['benchmark']}: {device_label(data)}",
             f"  against: {device_label(reference)}"]
    differing = sorted(key for key in set(data.get("settings", {})) | set(
        reference.get("settings", {})) if data.get("settings", {}).get(key) !=
        reference.get("settings", {}).get(key))
    if differing:
        lines.append("  settings that differ: " + ", ".join(
            f"{key} {data.get('settings', {}).get(key)} vs "
            f"{reference.get('settings', {}).get(key)}" for key in differing))
    if data["benchmark"] == "oversubscription":
        columns = (("LMS ms", lambda row: row["lms"]["step_ms"]),
                   ("oracle ms", lambda row: (row.get("oracle") or {}).get("step_ms", 0.0)),
                   ("bound ms", lambda row: row["bound"]["step_ms"]),
                   ("bound eff", lambda row: row["bound_efficiency"]))
        key, label = "k", lambda value: str(value)
    else:
        columns = (("raw d2h GB/s", lambda row: row["raw_d2h"]["gbps"]),
                   ("raw h2d GB/s", lambda row: row["raw_h2d"]["gbps"]),
                   ("ratio out", lambda row: row["ratio_out"]),
                   ("ratio in", lambda row: row["ratio_in"]))
        key, label = "size", size_label
    lines.append(f"{key:>6}" + "".join(f" {name:>12} {'ref':>9} {'diff':>7}"
                                        for name, _ in columns))
    ours = {row[key]: row for row in data["results"]}
    for row in reference["results"]:
        if row[key] not in ours:
            continue
        mine = ours[row[key]]
        lines.append(f"{label(row[key]):>6}" + "".join(
            f" {value(mine):>12.3f} {value(row):>9.3f} {_relative(value(mine), value(row))}"
            for _, value in columns))
    if len(lines) == 3 + bool(differing):
        lines.append(f"  no {key} in common")
    return "\n".join(lines)


def report(data: dict[str, Any]) -> str:
    """A plain-text table of a result, the numbers the plots show."""
    lines = [f"{data['benchmark']} on {device_label(data)}"]
    if data["benchmark"] == "copy-engine":
        goal = data["goal"]
        lines.append(f"{'size':>6} {'count':>5} {'raw d2h':>9} {'lms out':>9} {'raw h2d':>9} "
                     f"{'lms in':>9} {'out':>6} {'in':>6}   (GB/s; ratio = lms / raw)")
        for row in data["results"]:
            mark = ""
            if row["size"] >= goal["min_size"] and min(row["ratio_out"],
                                                        row["ratio_in"]) < goal["ratio"]:
                mark = f"  below the {goal['ratio']} goal"
            if not row["data_ok"]:
                mark += "  DATA MISMATCH"
            lines.append(
                f"{size_label(row['size']):>6} {row['count']:>5} "
                f"{row['raw_d2h']['gbps']:>9.2f} {row['lms_out']['gbps']:>9.2f} "
                f"{row['raw_h2d']['gbps']:>9.2f} {row['lms_in']['gbps']:>9.2f} "
                f"{row['ratio_out']:>6.3f} {row['ratio_in']:>6.3f}{mark}")
    else:
        # Chunks the pinned host pool pinned during the timed steps (series that report it):
        # pinning stalls the host, which the device-side step time shows only as idle gaps.
        pool = any("host_pool" in row["lms"] for row in data["results"])
        lines.append(f"{'k':>3} {'layers':>6} {'lms ms':>9} {'oracle ms':>9} {'bound ms':>9} "
                     f"{'bound eff':>9} {'overhead':>9}" + (f" {'pinned':>6}" if pool else ""))
        for row in data["results"]:
            oracle = row.get("oracle")
            overhead = row.get("overhead_vs_oracle")
            pinned = ""
            if pool:
                chunks = row["lms"].get("host_pool", {})
                pinned = " {:>6}".format(chunks.get("chunks_pinned_ahead", 0)
                                         + chunks.get("chunks_pinned_on_demand", 0)
                                         if chunks else "-")
            lines.append(
                f"{row['k']:>3} {row['layers']:>6} {row['lms']['step_ms']:>9.2f} "
                f"{(format(oracle['step_ms'], '9.2f') if oracle else '-'):>9} "
                f"{row['bound']['step_ms']:>9.2f} {row['bound_efficiency']:>9.3f} "
                f"{(format(overhead, '+9.1%') if overhead is not None else '-'):>9}{pinned}"
                f"{'' if row['data_ok'] else '  DATA MISMATCH'}")
    lines.append("data check: " + ("passed" if data.get("data_ok") else "FAILED"))
    return "\n".join(lines)


def plot(data: dict[str, Any], png: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    device = device_label(data)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 8), sharex=True)
    if data["benchmark"] == "copy-engine":
        rows = data["results"]
        sizes = [row["size"] for row in rows]
        goal = data["goal"]
        top.plot(sizes, [row["ratio_out"] for row in rows], "o-", label="page-out / raw D2H")
        top.plot(sizes, [row["ratio_in"] for row in rows], "s-", label="page-in / raw H2D")
        top.axhline(goal["ratio"], color="gray", linestyle="--",
                    label=f"goal {goal['ratio']} (sizes ≥ {size_label(goal['min_size'])})")
        top.axvspan(goal["min_size"], max(sizes + [goal["min_size"]]) * 1.5, color="green",
                    alpha=0.06)
        top.set_ylabel("LMS throughput / raw pinned cudaMemcpyAsync")
        top.set_ylim(0, max(1.1, *(row["ratio_out"] for row in rows),
                            *(row["ratio_in"] for row in rows)) * 1.05)
        top.set_title(f"LMS copy engine vs raw pinned copies\n{device}", fontsize=9)
        for key, label, style in (("raw_d2h", "raw D2H", "o--"), ("lms_out", "LMS page-out", "o-"),
                                  ("raw_h2d", "raw H2D", "s--"), ("lms_in", "LMS page-in", "s-")):
            bottom.plot(sizes, [row[key]["gbps"] for row in rows], style, label=label)
        bottom.set_ylabel("GB/s (median)")
        bottom.set_xlabel("storage size")
        bottom.set_xscale("log", base=2)
        bottom.set_xticks(sizes, [size_label(size) for size in sizes])
    else:
        rows = data["results"]
        ks = [row["k"] for row in rows]
        top.plot(ks, [row["lms"]["step_ms"] for row in rows], "o-", label="LMS")
        oracle = [(row["k"], row["oracle"]["step_ms"]) for row in rows if row.get("oracle")]
        if oracle:
            top.plot(*zip(*oracle), "s--", label="no limit (oracle)")
        top.plot(ks, [row["bound"]["step_ms"] for row in rows], "k:",
                 label="bound: bytes moved / measured bandwidth")
        top.plot(ks, [row["bound"]["min_traffic_step_ms"] for row in rows], "^:", color="gray",
                 label="bound with least traffic (k−1)·limit")
        limit = data["settings"]["limit_bytes"]
        top.set_ylabel("step time, ms (median)")
        top.set_title(f"Oversubscription, limit {size_label(limit)}\n{device}", fontsize=9)
        bottom.plot(ks, [row["bound_efficiency"] for row in rows], "o-",
                    label="bound efficiency (bound / LMS)")
        speed = [(row["k"], row["oracle"]["step_ms"] / row["lms"]["step_ms"])
                 for row in rows if row.get("oracle")]
        if speed:
            bottom.plot(*zip(*speed), "s--", label="oracle / LMS step time")
        bottom.set_ylim(0, 1.1)
        bottom.set_ylabel("fraction")
        bottom.set_xlabel("k = activation bytes / LMS limit")
        bottom.set_xscale("log", base=2)
        bottom.set_xticks(ks, [str(k) for k in ks])
    for axes in (top, bottom):
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize=8)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png


def run_benchmark(name: str, bin_dir: Path, out: Path, program_args: Sequence[str]) -> int:
    program, stem, _ = BENCHMARKS[name]
    binary = bin_dir / program
    if not binary.is_file():
        print(f"lmsbench: {binary} not found: build the bundle first (run-gpu.sh --build-only)",
              file=sys.stderr)
        return EXIT_USAGE
    out.mkdir(parents=True, exist_ok=True)
    result = out / f"{stem}.json"
    result.unlink(missing_ok=True)  # a stale result must never be plotted as this run's
    with open(out / f"{stem}.log", "w") as log:
        proc = subprocess.Popen([str(binary), "--out", str(result), *program_args],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            sys.stdout.write(line)
        code = proc.wait()
    if code in (EXIT_OK, EXIT_FAILED) and result.is_file():
        data = load(result)
        png = plot(data, result.with_suffix(".png"))
        print(report(data))
        print(f"lmsbench: wrote {result} and {png}")
    return code


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    program_args: list[str] = []
    if "--" in args:
        split = args.index("--")
        args, program_args = args[:split], args[split + 1:]
    parser = argparse.ArgumentParser(prog="lmsbench.py", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name in BENCHMARKS:
        sub = commands.add_parser(name, help=f"run {BENCHMARKS[name][0]} and plot it")
        sub.add_argument("--bin-dir", type=Path, required=True,
                         help="folder with the built programs (BUILD/bin)")
        sub.add_argument("--out", type=Path, required=True, help="results folder")
    plot_cmd = commands.add_parser("plot", help="draw the PNG of a result JSON")
    plot_cmd.add_argument("json", type=Path)
    plot_cmd.add_argument("--png", type=Path, default=None)
    compare_cmd = commands.add_parser("compare", help="two results of one benchmark, row by row")
    compare_cmd.add_argument("json", type=Path)
    compare_cmd.add_argument("reference", type=Path)
    parsed = parser.parse_args(args)
    if parsed.command == "compare":
        try:
            print(compare(load(parsed.json), load(parsed.reference)))
        except BadResult as error:
            print(f"lmsbench: {error}", file=sys.stderr)
            return EXIT_USAGE
        return EXIT_OK
    if parsed.command == "plot":
        if program_args:
            parser.error("plot takes no program options after --")
        try:
            data = load(parsed.json)
        except BadResult as error:
            print(f"lmsbench: {error}", file=sys.stderr)
            return EXIT_USAGE
        png = plot(data, parsed.png or parsed.json.with_suffix(".png"))
        print(report(data))
        print(f"lmsbench: wrote {png}")
        return EXIT_OK
    if "--out" in program_args or any(arg.startswith("--out=") for arg in program_args):
        parser.error("give the results folder with --out before --, not to the program")
    return run_benchmark(parsed.command, parsed.bin_dir, parsed.out, program_args)


if __name__ == "__main__":
    sys.exit(main())
