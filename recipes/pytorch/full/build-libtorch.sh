#!/bin/bash
# Builds libtorch once per (platform, CUDA) with the conda toolchain; the pytorch outputs reuse it.
set -euo pipefail
export USE_CUDA=0
if [ "${LMS_CUDA_VERSION}" != "None" ]; then
  export USE_CUDA=1 CUDA_HOME="${PREFIX}" TORCH_CUDA_ARCH_LIST="${LMS_CUDA_ARCH_LIST:-7.0;8.0;9.0}"
fi
export BUILD_TEST=0 USE_DISTRIBUTED=1 USE_MKLDNN=0 MAX_JOBS="${CPU_COUNT:-2}"
export CMAKE_PREFIX_PATH="${PREFIX}"
python -m tools.build_libtorch
cmake --install build --prefix "${PREFIX}"
mkdir -p "${PREFIX}/share/lmsforge"
printf '%s\n' "${LMS_IDENTITY_JSON}" > "${PREFIX}/share/lmsforge/pytorch.json"
