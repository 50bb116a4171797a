"""What a PyTorch user would pick instead of LMS, on the shapes of the oversubscription benchmark
(docs/gpu.md): one command runs them beside LMS and writes one JSON and one plot.

    python3 bench/peers.py --out DIR [--lms-result DIR/oversubscription.json] [--device cuda]
    python3 bench/peers.py --out DIR --device cpu          # smoke run: tiny shapes, no GPU
    python3 bench/peers.py plot DIR/peers.json

The workload is lms_bench_oversub's: L layers, each saving one activation of A bytes for the
backward pass; k = L / (layers per limit) is how many limits' worth of activations a step
saves. Each method runs the same forward and backward:

  oracle       no limit: every activation stays on the device
  save_on_cpu  torch.autograd.graph.save_on_cpu(pin_memory=True): every saved activation goes
               to pinned host memory in forward and comes back in backward
  checkpoint   torch.utils.checkpoint (non-reentrant) per group of `layers per limit` layers:
               recompute instead of keeping
  lms          torch.cuda.set_enabled_lms(True) with the limit, when this torch is LMS-patched

With --lms-result the shapes (limit, activation size, layers per limit, k) are those of that
lms_bench_oversub result, and its LMS figures join the table and the plot. Every method's step
is compared with the least-traffic bound (lms-anchors.md section 4.3): the oracle's forward and
backward, overlapped with (k - 1) limits' worth of bytes each way at the measured pinned
bandwidth. Every method's input gradient must equal the oracle's bit for bit.

Exit codes: 0 done, 1 a method computed a different gradient, 2 bad usage, 4 no CUDA device
for --device cuda (the reason is printed; --device cpu runs the smoke run instead).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NO_CUDA = 0, 1, 2, 4
MiB = 1024 * 1024
METHODS = ("oracle", "save_on_cpu", "checkpoint", "lms")
# Shapes when no --lms-result gives them: a GPU run like lms_bench_oversub's defaults, and a
# CPU smoke run that only proves the code runs and writes its files.
GPU_SHAPE = {"limit": 1024 * MiB, "layers_per_limit": 8, "factors": [1, 2, 4, 8]}
SMOKE_SHAPE = {"limit": 2 * MiB, "layers_per_limit": 4, "factors": [1, 2]}
# One elementwise pass per round: 12 passes over an activation take about what 64 rounds of
# lms_bench_oversub's integer mixing take on an H100 (compare the oracle times in the JSON).
GPU_ROUNDS, SMOKE_ROUNDS = 12, 2


class UsageError(Exception):
    pass


class NoCuda(Exception):
    pass


def shape_from_lms_result(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The shapes of an lms_bench_oversub result, and its LMS figures."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise UsageError(f"cannot read {path}: {error}") from error
    if not isinstance(data, dict) or data.get("benchmark") != "oversubscription":
        raise UsageError(f"{path} is not an lms_bench_oversub result")
    settings = data["settings"]
    shape = {"limit": settings["limit_bytes"], "layers_per_limit": settings["layers_per_limit"],
             "factors": [row["k"] for row in data["results"]],
             "activation_bytes": settings["activation_bytes"]}
    lms = {"source": str(path), "device": data.get("device", {}).get("name"),
           "simulated": bool(data.get("simulated")),
           "results": [{"k": row["k"], "step_ms": row["lms"]["step_ms"],
                        "bound_ms": row["bound"]["min_traffic_step_ms"],
                        "bound_efficiency": row["bound"]["min_traffic_step_ms"] /
                        row["lms"]["step_ms"]} for row in data["results"]]}
    return shape, lms


def _torch() -> Any:
    import torch

    return torch


def make_layer(torch: Any) -> Any:
    class SineLayer(torch.autograd.Function):
        """`rounds` elementwise sines; saves only its input, as a layer of lms_bench_oversub
        saves one activation, and recomputes from it what backward needs."""

        @staticmethod
        def forward(ctx: Any, x: Any, rounds: int) -> Any:
            ctx.save_for_backward(x)
            ctx.rounds = rounds
            y = x
            for _ in range(rounds):
                y = torch.sin(y)
            return y

        @staticmethod
        def backward(ctx: Any, grad: Any) -> tuple[Any, None]:
            (x,) = ctx.saved_tensors
            y, slope = x, grad
            for _ in range(ctx.rounds):
                slope = slope * torch.cos(y)
                y = torch.sin(y)
            return slope, None

    return SineLayer


class Workload:
    def __init__(self, torch: Any, device: str, elements: int, rounds: int,
                 layers_per_limit: int) -> None:
        self.torch = torch
        self.device = device
        self.elements = elements
        self.rounds = rounds
        self.group = layers_per_limit
        self.layer = make_layer(torch)

    def synchronize(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def layers(self, x: Any, count: int) -> Any:
        for _ in range(count):
            x = self.layer.apply(x, self.rounds)
        return x

    def forward(self, method: str, x: Any, layers: int) -> Any:
        torch = self.torch
        if method == "save_on_cpu":
            with torch.autograd.graph.save_on_cpu(pin_memory=self.device == "cuda"):
                return self.layers(x, layers)
        if method == "checkpoint":
            from torch.utils.checkpoint import checkpoint

            done = 0
            while done < layers:
                count = min(self.group, layers - done)
                x = checkpoint(self.layers, x, count, use_reentrant=False)
                done += count
            return x
        return self.layers(x, layers)

    def step(self, method: str, layers: int) -> tuple[float, float, Any]:
        """Forward and backward milliseconds, and the input's gradient."""
        torch = self.torch
        x0 = torch.full((self.elements,), 0.5, device=self.device, requires_grad=True)
        self.synchronize()
        started = time.perf_counter()
        loss = self.forward(method, x0, layers).sum()
        self.synchronize()
        forward_done = time.perf_counter()
        loss.backward()
        self.synchronize()
        finished = time.perf_counter()
        return (forward_done - started) * 1e3, (finished - forward_done) * 1e3, x0.grad


def measure_bandwidth(torch: Any, activation_bytes: int) -> dict[str, float]:
    """Pinned host <-> device bytes per ms at the activation size (CUDA events)."""
    elements = activation_bytes // 4
    device = torch.empty(elements, device="cuda")
    host = torch.empty(elements, pin_memory=True)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    rates = {}
    for name, copy in (("d2h", lambda: host.copy_(device, non_blocking=True)),
                       ("h2d", lambda: device.copy_(host, non_blocking=True))):
        copy()
        torch.cuda.synchronize()
        start.record()
        for _ in range(8):
            copy()
        stop.record()
        stop.synchronize()
        rates[name] = 8 * activation_bytes / start.elapsed_time(stop)
    return rates


def lms_unavailable(torch: Any, device: str) -> str:
    if device != "cuda":
        return "LMS pages between GPU and host memory: CUDA only"
    if not hasattr(torch.cuda, "set_enabled_lms"):
        return f"torch {torch.__version__} is not LMS-patched (no torch.cuda.set_enabled_lms)"
    return ""


def run_method(work: Workload, method: str, layers: int, steps: int, warmup: int,
               limit: int) -> tuple[dict[str, Any], Any]:
    torch = work.torch
    if work.device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    if method == "lms":
        torch.cuda.set_limit_lms(limit)
        torch.cuda.set_enabled_lms(True)
    try:
        samples = [work.step(method, layers) for _ in range(warmup + steps)][warmup:]
    finally:
        if method == "lms":
            torch.cuda.set_enabled_lms(False)
    forward = statistics.median(s[0] for s in samples)
    backward = statistics.median(s[1] for s in samples)
    result = {"forward_ms": forward, "backward_ms": backward,
              "step_ms": statistics.median(s[0] + s[1] for s in samples),
              "step_samples_ms": [s[0] + s[1] for s in samples],
              "peak_bytes": torch.cuda.max_memory_allocated() if work.device == "cuda" else None}
    return result, samples[-1][2]


def run(out: Path, device: str, shape: dict[str, Any], rounds: int, steps: int, warmup: int,
        lms_result: dict[str, Any] | None, say: Callable[[str], None] = print) -> dict[str, Any]:
    torch = _torch()
    if device == "cpu":
        torch.set_num_threads(1)  # a smoke run; it shares the machine
    if device == "cuda" and not torch.cuda.is_available():
        raise NoCuda(f"no CUDA device for torch {torch.__version__} "
                     f"({'a CPU build' if torch.version.cuda is None else 'CUDA ' + torch.version.cuda}); "
                     "--device cpu runs the smoke run")
    limit, per_limit = shape["limit"], shape["layers_per_limit"]
    activation = shape.get("activation_bytes") or limit // per_limit
    work = Workload(torch, device, activation // 4, rounds, per_limit)
    skipped = {}
    methods = [method for method in METHODS if method != "lms"]
    why_not = lms_unavailable(torch, device)
    if why_not:
        skipped["lms"] = why_not
        say(f"peers: lms skipped: {why_not}")
    else:
        methods.append("lms")
    bandwidth = measure_bandwidth(torch, activation) if device == "cuda" else None
    rows = []
    mismatches = 0
    for k in shape["factors"]:
        layers = k * per_limit
        row: dict[str, Any] = {"k": k, "layers": layers}
        oracle_grad = None
        for method in methods:
            say(f"peers: k = {k}, {method}")
            result, grad = run_method(work, method, layers, steps, warmup, limit)
            if method == "oracle":
                oracle_grad = grad
            result["matches_oracle"] = bool(torch.equal(grad, oracle_grad))
            mismatches += 0 if result["matches_oracle"] else 1
            row[method] = result
        moved = max(0, k - 1) * limit
        out_ms = moved / bandwidth["d2h"] if bandwidth else 0.0
        in_ms = moved / bandwidth["h2d"] if bandwidth else 0.0
        bound = (max(row["oracle"]["forward_ms"], out_ms) +
                 max(row["oracle"]["backward_ms"], in_ms))
        row["bound_ms"] = bound
        for method in methods:
            row[method]["bound_efficiency"] = bound / row[method]["step_ms"]
        rows.append(row)
    data = {
        "benchmark": "peers", "schema": 1, "smoke": device == "cpu",
        "device": {"name": torch.cuda.get_device_name() if device == "cuda" else "cpu",
                   "torch": torch.__version__, "kind": device},
        "settings": {"limit_bytes": limit, "activation_bytes": activation,
                     "layers_per_limit": per_limit, "rounds": rounds, "steps": steps,
                     "warmup": warmup, "pin_memory": device == "cuda"},
        "bandwidth": None if bandwidth is None else
        {"d2h_gbps": bandwidth["d2h"] / 1e6, "h2d_gbps": bandwidth["h2d"] / 1e6},
        "methods": methods, "skipped": skipped, "results": rows,
        "lms_benchmark": lms_result, "data_ok": mismatches == 0}
    out.mkdir(parents=True, exist_ok=True)
    (out / "peers.json").write_text(json.dumps(data, indent=1) + "\n")
    return data


def load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise UsageError(f"cannot read {path}: {error}") from error
    if not isinstance(data, dict) or data.get("benchmark") != "peers" or data.get("schema") != 1:
        raise UsageError(f"{path} is not a peers result")
    return data


def _title(data: dict[str, Any]) -> str:
    device = data["device"]
    title = f"{device['name']}, torch {device['torch']}"
    if data["smoke"]:
        title += " — CPU SMOKE RUN: proves the code runs; the figures mean nothing"
    return title


def _lms_label(data: dict[str, Any]) -> str:
    lms = data["lms_benchmark"]
    label = "LMS (lms_bench_oversub)"
    if lms and lms.get("simulated"):
        label += " SIMULATED"
    return label


def report(data: dict[str, Any]) -> str:
    lines = [f"peers on {_title(data)}",
             f"{'k':>3} {'method':>24} {'fwd ms':>9} {'bwd ms':>9} {'step ms':>9} "
             f"{'bound ms':>9} {'eff':>6} {'peak GiB':>9}"]
    lms = {row["k"]: row for row in (data["lms_benchmark"] or {}).get("results", [])}
    for row in data["results"]:
        for method in data["methods"]:
            r = row[method]
            peak = f"{r['peak_bytes'] / 2**30:9.2f}" if r["peak_bytes"] is not None else "        -"
            lines.append(f"{row['k']:>3} {method:>24} {r['forward_ms']:9.2f} "
                         f"{r['backward_ms']:9.2f} {r['step_ms']:9.2f} {row['bound_ms']:9.2f} "
                         f"{r['bound_efficiency']:6.3f} {peak}"
                         f"{'' if r['matches_oracle'] else '  GRADIENT DIFFERS'}")
        if row["k"] in lms:
            mine = lms[row["k"]]
            lines.append(f"{row['k']:>3} {_lms_label(data):>24} {'':>9} {'':>9} "
                         f"{mine['step_ms']:9.2f} {mine['bound_ms']:9.2f} "
                         f"{mine['bound_efficiency']:6.3f}")
    for method, why in data["skipped"].items():
        lines.append(f"{method}: skipped: {why}")
    lines.append("data check: " + ("passed" if data["data_ok"] else "FAILED"))
    return "\n".join(lines)


def plot(data: dict[str, Any], png: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 8), sharex=True)
    ks = [row["k"] for row in data["results"]]
    styles = {"oracle": ("s--", "tab:blue"), "save_on_cpu": ("v-", "tab:orange"),
              "checkpoint": ("d-", "tab:green"), "lms": ("o-", "tab:red")}
    efficiencies = [1.0]
    for method in data["methods"]:
        style, color = styles[method]
        label = method if method != "lms" else "LMS (this torch)"
        top.plot(ks, [row[method]["step_ms"] for row in data["results"]], style, color=color,
                 label=label)
        if method != "oracle":
            values = [row[method]["bound_efficiency"] for row in data["results"]]
            bottom.plot(ks, values, style, color=color, label=label)
            efficiencies += values
    top.plot(ks, [row["bound_ms"] for row in data["results"]], "k:",
             label="bound: least traffic at pinned bandwidth")
    lms = (data["lms_benchmark"] or {}).get("results", [])
    if lms:
        lms_ks = [row["k"] for row in lms]
        top.plot(lms_ks, [row["step_ms"] for row in lms], "o-", color="black",
                 label=_lms_label(data))
        values = [row["bound_efficiency"] for row in lms]
        bottom.plot(lms_ks, values, "o-", color="black",
                    label=f"{_lms_label(data)}, against its own bound")
        efficiencies += values
    limit = data["settings"]["limit_bytes"]
    top.set_title(f"Peers of LMS, limit {limit // MiB} MiB\n{_title(data)}", fontsize=9)
    top.set_ylabel("step time, ms (median)")
    bottom.set_ylabel("bound efficiency (bound / step)")
    bottom.set_ylim(0, max(1.1, max(efficiencies) * 1.05))
    bottom.set_xlabel("k = saved activation bytes / limit")
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


def _size(text: str) -> int:
    units = {"K": 1024, "M": MiB, "G": 1024 * MiB}
    try:
        if text[-1:] in units:
            return int(text[:-1]) * units[text[-1]]
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (use e.g. 64M, 1G)") from None


def _factors(text: str) -> list[int]:
    try:
        factors = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of integers: {text!r}") from None
    if not factors or min(factors) < 1:
        raise argparse.ArgumentTypeError("factors are integers of at least 1")
    return factors


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["plot"]:
        parser = argparse.ArgumentParser(prog="peers.py plot")
        parser.add_argument("json", type=Path)
        parsed = parser.parse_args(args[1:])
        try:
            data = load(parsed.json)
        except UsageError as error:
            print(f"peers: {error}", file=sys.stderr)
            return EXIT_USAGE
        print(report(data))
        print(f"peers: wrote {plot(data, parsed.json.with_suffix('.png'))}")
        return EXIT_OK
    parser = argparse.ArgumentParser(prog="peers.py", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="results folder")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--lms-result", type=Path,
                        help="an lms_bench_oversub JSON: its shapes, and its LMS beside the peers")
    parser.add_argument("--limit", type=_size, help="memory limit whose multiples k are run")
    parser.add_argument("--layers-per-limit", type=int, help="activations per limit")
    parser.add_argument("--factors", type=_factors, help="k, comma-separated")
    parser.add_argument("--rounds", type=int, help="elementwise passes per layer")
    parser.add_argument("--steps", type=int, help="timed steps per configuration")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    parsed = parser.parse_args(args)
    smoke = parsed.device == "cpu"
    given = {key: getattr(parsed, key) for key in ("limit", "layers_per_limit", "factors")
             if getattr(parsed, key) is not None}
    try:
        lms_result = None
        if parsed.lms_result is not None:
            if given:
                raise UsageError(f"--lms-result sets the shapes; drop "
                                 f"{', '.join('--' + key.replace('_', '-') for key in given)}")
            shape, lms_result = shape_from_lms_result(parsed.lms_result)
        else:
            shape = {**(SMOKE_SHAPE if smoke else GPU_SHAPE), **given}
        if shape["layers_per_limit"] < 1 or shape["limit"] // shape["layers_per_limit"] < 4:
            raise UsageError("--limit / --layers-per-limit leaves no activation")
        rounds = parsed.rounds or (SMOKE_ROUNDS if smoke else GPU_ROUNDS)
        steps = parsed.steps or (1 if smoke else 5)
        if rounds < 1 or steps < 1 or parsed.warmup < 0:
            raise UsageError("--rounds and --steps are at least 1, --warmup at least 0")
        data = run(parsed.out, parsed.device, shape, rounds, steps, parsed.warmup, lms_result)
    except UsageError as error:
        print(f"peers: {error}", file=sys.stderr)
        return EXIT_USAGE
    except NoCuda as error:
        print(f"peers: skipped: {error}", file=sys.stderr)
        return EXIT_NO_CUDA
    if smoke:
        print("peers: CUDA path skipped: --device cpu is a smoke run (tiny shapes, no pinned "
              "memory); its figures are not GPU figures")
    png = plot(data, parsed.out / "peers.png")
    print(report(data))
    print(f"peers: wrote {parsed.out / 'peers.json'} and {png}")
    return EXIT_OK if data["data_ok"] else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
