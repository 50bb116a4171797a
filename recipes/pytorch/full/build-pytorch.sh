#!/bin/bash
# Builds the Python package against the staged libtorch, once per Python version.
set -euo pipefail
export USE_CUDA=0 BUILD_TEST=0 MAX_JOBS="${CPU_COUNT:-2}"
if [ "${LMS_CUDA_VERSION}" != "None" ]; then
  export USE_CUDA=1 CUDA_HOME="${PREFIX}"
fi
export USE_SYSTEM_LIBTORCH=1 CMAKE_PREFIX_PATH="${PREFIX}"
python -m pip install . --no-deps --no-build-isolation -vv
