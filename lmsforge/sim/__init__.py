"""lmsforge's simulated CUDA: engine/ (the device) under runtime/ (the cudart API front end), in C++.

Must not depend on lmsforge's Python code or on a framework: programs (c10, benchmarks) link it.
"""

from pathlib import Path

# Where the simulator's CMake project lives, for build descriptions that include it.
SOURCE_DIR = Path(__file__).resolve().parent
