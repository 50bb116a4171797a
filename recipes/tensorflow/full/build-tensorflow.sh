#!/bin/bash
# Builds the TensorFlow wheel with Bazel and installs it; one Python and CUDA per build.
set -euo pipefail
export TF_NEED_CUDA=0 PYTHON_BIN_PATH="${PYTHON}" USE_DEFAULT_PYTHON_LIB_PATH=1
if [ "${LMS_CUDA_VERSION}" != "None" ]; then
  export TF_NEED_CUDA=1 TF_CUDA_VERSION="${LMS_CUDA_VERSION}" TF_CUDNN_VERSION="${LMS_CUDNN_VERSION}"
  export TF_CUDA_PATHS="${PREFIX}" TF_CUDA_COMPUTE_CAPABILITIES="${LMS_CUDA_ARCH_LIST:-7.0,8.0,9.0}"
fi
yes "" | ./configure
bazel build --config=opt --local_cpu_resources="${CPU_COUNT:-2}" \
  //tensorflow/tools/pip_package:build_pip_package
bazel-bin/tensorflow/tools/pip_package/build_pip_package "${SRC_DIR}/wheel"
python -m pip install "${SRC_DIR}"/wheel/tensorflow-*.whl --no-deps --no-build-isolation
mkdir -p "${PREFIX}/share/lmsforge"
printf '%s\n' "${LMS_IDENTITY_JSON}" > "${PREFIX}/share/lmsforge/tensorflow.json"
