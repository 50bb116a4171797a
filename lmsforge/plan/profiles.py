"""GPU profiles and the roofline that times one operator on each.

Host link figures are from shared/reference/anchors-2026-11-26.md §4 (the table's rows: line 390
PCIe Gen4, 391 PCIe Gen5, 392 POWER9 NVLink 2.0, 393 NVLink-C2C GH200), measured where the
table measured. Peak FLOP/s and HBM bandwidth are vendor datasheet figures (dense, no sparsity),
not measured by us. A figure we could not source is None, never a guess.
"""

from __future__ import annotations

from dataclasses import dataclass

from lmsforge.errors import UsageError

# A kernel launch and its tail cost about this much even when it moves nothing; an estimate, the
# replay's timing model is what is calibrated.
LAUNCH_OVERHEAD_S = 4e-6


@dataclass(frozen=True)
class Profile:
    name: str
    flops_per_s: dict[str, float]  # by dtype: "float32" (CUDA cores; PyTorch's default, TF32
    # off for matmuls), "tf32", "bfloat16", "float16"
    hbm_bytes_per_s: float
    h2d_bytes_per_s: float  # host link, one direction at a time
    d2h_bytes_per_s: float
    # Each direction's rate while both move (the simulator's duplex rate, one figure).
    duplex_bytes_per_s: float
    memory_bytes: int  # device memory as cudaMemGetInfo's total reports it
    source: str

    def op_seconds(self, flops: int, bytes_moved: int, dtype: str) -> float:
        """Roofline: the slower of compute and HBM traffic, plus the launch overhead."""
        peak = self.flops_per_s.get(dtype)
        if peak is None:
            raise UsageError(f"GPU profile {self.name} has no {dtype} peak; "
                             f"known: {', '.join(sorted(self.flops_per_s))}")
        return max(flops / peak, bytes_moved / self.hbm_bytes_per_s) + LAUNCH_OVERHEAD_S


T = 1e12
G = 1e9

PROFILES: dict[str, Profile] = {p.name: p for p in (
    Profile("h100-pcie", {"float32": 51 * T, "tf32": 378 * T, "bfloat16": 756 * T,
                          "float16": 756 * T},
            hbm_bytes_per_s=2000 * G, h2d_bytes_per_s=55 * G, d2h_bytes_per_s=55 * G,
            duplex_bytes_per_s=46.87 * G, memory_bytes=85_017_493_504,
            source="NVIDIA H100 PCIe datasheet; link: anchors §4 line 391, 53.2-55.1 GB/s one "
                   "way measured on our H100 (45-49 each way concurrently; 46.87 is the "
                   "simulator's calibrated duplex rate); memory: the total our H100 80GB "
                   "reported (bench/reference/h100-2026-11-22/copy-engine.json)"),
    Profile("a100-pcie", {"float32": 19.5 * T, "tf32": 156 * T, "bfloat16": 312 * T,
                          "float16": 312 * T},
            hbm_bytes_per_s=1935 * G, h2d_bytes_per_s=24.8 * G, d2h_bytes_per_s=24 * G,
            duplex_bytes_per_s=11 * G, memory_bytes=80 << 30,
            source="NVIDIA A100 80GB PCIe datasheet; link: anchors §4 line 390, PCIe Gen4 "
                   "24.8 GB/s H2D and about 24 GB/s D2H measured (H2D drops to 11 under "
                   "bidirectional load: the duplex figure, pessimistic for D2H); memory: 80 GiB "
                   "nominal"),
    Profile("v100-power9", {"float32": 15.7 * T, "float16": 125 * T},
            hbm_bytes_per_s=900 * G, h2d_bytes_per_s=68 * G, d2h_bytes_per_s=68 * G,
            duplex_bytes_per_s=68 * G, memory_bytes=32 << 30,
            source="NVIDIA V100 SXM2 32GB datasheet (no bf16, no tf32); link: anchors §4 line "
                   "392, POWER9 NVLink 2.0 about 68 GB/s measured on a 4-GPU AC922 (Satori); "
                   "duplex: NVLink has lanes per direction, so the one-way figure (not "
                   "measured both ways at once); memory: 32 GiB nominal"),
    Profile("gh200", {"float32": 67 * T, "tf32": 494 * T, "bfloat16": 990 * T,
                      "float16": 990 * T},
            hbm_bytes_per_s=4000 * G, h2d_bytes_per_s=375 * G, d2h_bytes_per_s=297 * G,
            duplex_bytes_per_s=297 * G, memory_bytes=96 << 30,
            source="NVIDIA GH200 datasheet (96 GB HBM3); link: anchors §4 line 393, "
                   "NVLink-C2C 375 GB/s H2D and 297 GB/s D2H measured (672 GB/s both ways "
                   "together: duplex is the slower direction's); memory: 96 GiB nominal"),
)}


def profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise UsageError(f"unknown GPU profile '{name}'; known: "
                         f"{', '.join(PROFILES)}") from None
