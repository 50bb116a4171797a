"""`lmsforge plan`'s replay through the v2.6.0 series' real allocator on the simulator, and the
command end to end (slow: builds the replay program).

The program is built where the session's one `lmsforge verify` of the bundled series built
core-sim (conftest.bundled_verification, the shared test cache): one translation unit more. The
figures asserted are ones counted by hand: the caching allocator's 512-byte blocks for a tiny
step, and for a chain of 32 MiB activations under a 192 MiB limit, the storages that must leave
the device. Times are asserted only where the simulator makes them deterministic (LMS off: one
host thread) and only against the trace's own durations, never a wall clock.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fixtures import lmsforge
from lmsforge.options import Options
from lmsforge.plan import played_plan, replay, tune
from lmsforge.plan.profiles import profile
from lmsforge.plan.trace import trace_step
from lmsforge.plan.trace_format import Op, Storage, Trace
from lmsforge.verify.pytorch_c10 import plan_build

pytestmark = pytest.mark.slow

MiB = 1 << 20
REPO = Path(__file__).resolve().parents[2]
ON_DEMAND = "lms:True,lms_limit:201326592,lms_sync_mode:3"  # 192 MiB, no policies ahead


@pytest.fixture(scope="module")
def program(bundled_verification, real_cache_dir: Path) -> Path:
    bundled_verification("pytorch", "v2.6.0")  # the tree and the core-sim build to share
    saved = os.environ.get("LMSFORGE_CACHE_DIR")
    try:
        with plan_build.replay_program(Options.resolve(None, real_cache_dir), print) as built:
            path = built
    finally:  # Options.resolve points the environment at the cache; give it back
        if saved is None:
            os.environ.pop("LMSFORGE_CACHE_DIR", None)
        else:
            os.environ["LMSFORGE_CACHE_DIR"] = saved
    assert path.is_file()
    return path


def run(program: Path, trace: Trace, work: Path, conf: str, memory: int = 1 << 30,
        seed: int = 0) -> replay.Replayed:
    script, calibration = work / "replay.txt", work / "calibration.txt"
    replay.write_script(trace, "h100-pcie", script)
    calibration.write_text(replay.calibration_text(profile("h100-pcie")))
    return replay.run(program, script, work, device_memory=memory, calibration=calibration,
                      alloc_conf=conf, name=conf.replace(":", "_").replace(",", "-") or "off",
                      seed=seed)


def chain(size: int = 32 * MiB, layers: int = 8, us: float = 1000.0) -> Trace:
    """A forward/backward chain: weight W (0) and input X (1); forward makes A1..A8 (each reads
    the last one and W); backward reads A8..A1 and W, makes the gradient G at its first step,
    frees each activation after its use; SGD updates W from G, then G is freed. Every storage
    is SIZE bytes and every operator takes US of the GPU."""
    ops: list[Op] = []
    sid, previous, acts = 2, 1, []
    for _ in range(layers):
        ops.append(Op(len(ops), "fwd", [previous, 0], [sid], [[sid, size]], [], 0, 0, 0, 0,
                      {"h100-pcie": us}))
        acts.append(sid)
        previous, sid = sid, sid + 1
    grad = sid
    for i, act in enumerate(reversed(acts)):
        ops.append(Op(len(ops), "bwd", [act, 0] + ([grad] if i else []), [grad],
                      [[grad, size]] if i == 0 else [], [act], 0, 0, 0, 0, {"h100-pcie": us}))
    ops.append(Op(len(ops), "sgd", [0, grad], [0], [], [grad], 0, 0, 0, 0, {"h100-pcie": us}))
    return Trace("chain", "hand", 1, "float32", "-", [Storage(0, size, "param"),
                                                       Storage(1, size, "input")], ops,
                 ["h100-pcie"])


def test_the_tiny_step_takes_the_blocks_counted_by_hand(program, tmp_path):
    trace = trace_step(lambda: torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU()),
                       lambda: (torch.randn(3, 4), torch.randn(3, 8)),
                       torch.nn.functional.mse_loss,
                       lambda params: torch.optim.SGD(params, lr=0.1),
                       model_name="tiny", input_desc="4", batch=3)
    for conf in ("", "lms:True"):
        done = run(program, trace, tmp_path, conf)
        # Every storage is one 512-byte block; test_plan_trace counts what lives after each
        # operator: 4 before the step, addmm's output, ... 9 at threshold_backward.
        assert [n // 512 for n in done.allocated_after_op] == [5, 6, 6, 7, 8, 9, 8, 9, 6, 6]
        assert done.peak_allocated == 9 * 512 and done.reserved_after_op[0] == 2 * MiB
        assert done.completed and done.data_ok and done.bytes_in == 0
        # Ten operators of 4 µs each (the roofline's launch floor) and nothing else on the GPU.
        assert done.step_ms == pytest.approx(0.040, abs=0.005)


def test_the_second_step_finds_the_optimizer_state_of_the_first(program, tmp_path):
    trace = trace_step(lambda: torch.nn.Linear(4, 8),
                       lambda: (torch.randn(3, 4), torch.randn(3, 8)),
                       torch.nn.functional.mse_loss,
                       lambda params: torch.optim.Adam(params, foreach=True),
                       model_name="tiny-adam", input_desc="4", batch=3)
    done = run(program, trace, tmp_path, "lms:True")
    assert done.completed and done.data_ok
    # The second step skips the six operators that made the state (two zeros_like and a
    # lifted step counter per parameter), and no more.
    assert len(done.allocated_after_op) == len(trace.ops) - 6 > 0
    # It starts with weight, bias, input and target, Adam's two moments of each parameter and
    # their two step counters: 10 blocks of 512 B, and the first operator's output.
    assert done.allocated_after_op[0] == 11 * 512


def test_a_chain_under_a_limit_pages_what_was_counted_by_hand(program, tmp_path):
    trace = chain()
    assert trace.peak_live_bytes() == 11 * 32 * MiB
    off = run(program, trace, tmp_path, "")
    # Without LMS: W, X, eight activations and the gradient at the first backward step.
    assert off.peak_allocated == 11 * 32 * MiB
    assert [n // (32 * MiB) for n in off.allocated_after_op] == [
        3, 4, 5, 6, 7, 8, 9, 10, 11, 10, 9, 8, 7, 6, 5, 4, 3]
    assert off.step_ms == pytest.approx(17.0, abs=0.05)  # 17 operators of 1 ms, back to back
    assert off.ended_us_after_op == pytest.approx([1000 * (i + 1) for i in range(17)], abs=50)
    assert off.bytes_out == off.bytes_in == 0

    # 192 MiB holds 6 of them: at the peak 5 must be on the host. LMS on demand pages out the
    # least recently used as A5..A8 and G come: X, then A1..A4 (W is used by every operator).
    # A4..A1 come back for their backward steps, X for the next step's first operator: 5 out
    # and 5 in per step, the least any schedule moves. X's page-out in the second step copies
    # nothing (its host copy is current: nothing wrote it). Under the simulator's adversarial
    # delays (seed 3), so that a copy LMS does not wait for is wrong data.
    demand = run(program, trace, tmp_path, ON_DEMAND, seed=3)
    assert demand.completed and demand.data_ok
    assert demand.lms_limit == 192 * MiB and demand.peak_allocated == 192 * MiB
    assert demand.stats["reclaimed"] == 5 and demand.stats["paged_in"] == 5
    assert demand.stats["paged_in_bytes"] == 5 * 32 * MiB
    assert demand.bytes_out == 4 * 32 * MiB and demand.stats["clean_reclaims"] == 1
    assert demand.step_ms > off.step_ms  # the page-ins it waited for
    assert max(demand.allocated_after_op) <= 192 * MiB
    # Each operator ends at least its own 1 ms after the one before. The first waits for X's
    # page-in (32 MiB, about 0.6 ms); the next three page nothing in and do not wait.
    ended = demand.ended_us_after_op
    gaps = [b - a for a, b in zip([0] + ended, ended)]
    assert len(ended) == 17 and min(gaps) >= 1000 - 50
    assert gaps[0] > 1000 + 400 and gaps[1:4] == pytest.approx([1000] * 3, abs=50)
    assert ended[-1] == pytest.approx(demand.step_ms * 1000, abs=50)

    ahead = run(program, trace, tmp_path, "lms:True,lms_limit:201326592", seed=3)
    assert ahead.completed and ahead.data_ok and ahead.peak_allocated <= 192 * MiB
    assert ahead.stats["paged_in_bytes"] >= 5 * 32 * MiB

    # 64 MiB cannot hold one operator: the first reads X and W and makes A1, 96 MiB.
    tight = run(program, trace, tmp_path, "lms:True,lms_limit:67108864", memory=96 * MiB)
    assert not tight.completed and tight.oom_op == 0
    assert "out of memory" in tight.oom.lower()


def test_plan_answers_the_three_ways_with_json_and_a_plot(program, real_cache_dir, tmp_path):
    # The 3D U-Net of models.py at 64^3, batch 2: 0.51 GiB allocated at its peak.
    base = ["--cache-dir", str(real_cache_dir), "plan", "--model", "unet3d", "--input",
            "1x64x64x64", "--batch", "2"]
    fits = lmsforge(*base)
    assert fits.exit_code == 0, fits.output
    assert "\nfits without LMS: peak 0.51 GiB allocated" in fits.stdout
    assert "SIMULATED" in fits.stdout

    # 560 MiB holds the 0.51 GiB of tensors but not the 0.60 GiB the allocator reserves with
    # room to spare: on 560 MiB it gives cached blocks back and retries, and the step fits.
    tight = json.loads(lmsforge(*base, "--gpu-memory", "560M", "--json").stdout)
    assert tight["verdict"] == "fits" and tight["with_lms"] is None
    assert tight["without_lms"]["peak_reserved_bytes"] > 560 * MiB
    assert tight["without_lms_on_gpu"]["peak_reserved_bytes"] <= 560 * MiB
    assert "reserved of 0.55 GiB" in tight["lines"][1]

    plot = tmp_path / "memory.png"
    with_lms = lmsforge(*base, "--gpu-memory", "400M", "--plot", str(plot), "--json")
    assert with_lms.exit_code == 0, with_lms.output
    data = json.loads(with_lms.stdout)
    assert data["verdict"] == "fits-with-lms" and data["simulated"] is True
    assert data["data_ok"] is True
    assert len(data["tried"]) == len(tune.CANDIDATES) == 10
    assert data["recommended_alloc_conf"].startswith("lms:True")
    # The last two candidates are the recorded-order policy: torch.cuda.lms_step() with the
    # defaults, and with page-outs ahead only at the limit.
    assert [(run["alloc_conf"], run["lms_step"]) for run in data["tried"][-2:]] == [
        ("lms:True", True), ("lms:True,lms_swapout_threshold:1.0", True)]
    chosen, without = data["with_lms"], data["without_lms"]
    # 400 MiB less the automatic limit's 256 MiB head-room: a 144 MiB limit.
    assert chosen["lms_limit_bytes"] == 144 * MiB
    assert chosen["peak_allocated_bytes"] <= 400 * MiB < without["peak_allocated_bytes"]
    assert data["bytes_moved_per_step"] == (chosen["bytes_out_per_step"]
                                            + chosen["bytes_in_per_step"]) > 0
    assert data["step_over_compute"] > 1.0
    assert data["lines"][1].startswith("fits with LMS: step ≈ ")
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # 100 MiB: less than the largest operator, a convolution's backward, needs.
    none = lmsforge(*base, "--gpu-memory", "100M", "--no-search", "--plot",
                    str(tmp_path / "none.png"))
    assert none.exit_code == 0, none.output
    assert (tmp_path / "none.png").read_bytes()[:4] == b"\x89PNG"
    assert ("\ndoes not fit: the largest operator needs 0.16 GiB "
            "(aten.convolution_backward.default, operator 91)") in none.stdout


def test_many_models_plan_asks_the_planner(program, real_cache_dir):
    proc = subprocess.run(
        [sys.executable, str(REPO / "examples" / "pytorch" / "many_models.py"), "-a",
         "resnet50", "--image-size", "128", "-b", "4", "--plan", "--gpu-memory", "512M"],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "LMSFORGE_CACHE_DIR": str(real_cache_dir)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "$ lmsforge plan --model resnet50 --input 3x128x128 --batch 4" in proc.stdout
    # 0.37 GiB at its peak in 0.5 GiB.
    assert "\nfits without LMS: peak 0.37 GiB allocated" in proc.stdout


def test_bad_input_to_the_replay_program_is_one_line(program, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("not a replay script\n")
    proc = subprocess.run([str(program), "--script", str(bad), "--out", str(tmp_path / "o")],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "is not an lmsforge replay script (version 1)" in proc.stderr


def test_a_played_plan_moves_what_it_names_and_keeps_every_byte(program, tmp_path):
    # The chain under 192 MiB with LMS's policies ahead off (sync mode 3): on demand alone it
    # pages 5 storages in, each when its operator needs it (the test above). A plan from the
    # trace (lmsforge.plan.played_plan) names the page-outs after each storage's last forward
    # use and the page-ins ahead of backward; LMS starts them, the page-ins are used before
    # anything reclaims them (prefetch hits), and every byte checks under the simulator's
    # adversarial delays.
    trace = chain()
    limit = 192 * MiB
    script, calibration = tmp_path / "replay.txt", tmp_path / "calibration.txt"
    replay.write_script(trace, "h100-pcie", script)
    calibration.write_text(replay.calibration_text(profile("h100-pcie")))
    moves = played_plan.make(trace, profile("h100-pcie"), limit,
                             replay.first_step_only(trace), page_in_lead=60)
    assert moves.outs and moves.ins
    moves.write(tmp_path / "moves.txt")
    played = replay.run(program, script, tmp_path, device_memory=1 << 30,
                        calibration=calibration, alloc_conf=f"{ON_DEMAND},lms_swapin_ahead:0",
                        name="played", seed=3, plan=tmp_path / "moves.txt")
    assert played.completed and played.data_ok and played.peak_allocated <= limit
    counts = played.planned_moves
    # Asked in every step after the first (replay.STEPS - 1 of them).
    assert counts["page_outs_asked"] == (replay.STEPS - 1) * sum(map(len, moves.outs.values()))
    assert counts["page_ins_asked"] == (replay.STEPS - 1) * sum(map(len, moves.ins.values()))
    assert counts["page_outs_started"] > 0 and counts["page_ins_started"] > 0
    # In the reported step, the planned page-ins were there when their operators came.
    assert played.stats["prefetched"] > 0
    assert played.stats["prefetch_hits"] == played.stats["prefetched"]
    assert played.stats["prefetch_misses"] < 5

    bad = tmp_path / "bad-moves.txt"
    bad.write_text("out 3 4\nsideways 2 1\n")
    proc = subprocess.run([str(program), "--script", str(script), "--out",
                           str(tmp_path / "o.json"), "--plan", str(bad)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "line 2: expected 'out OP STORAGE...' or 'in OP STORAGE...'" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
