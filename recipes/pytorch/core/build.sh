#!/bin/bash
# Builds c10 (+ c10_cuda) and the LMS test programs with lmsforge's standalone CMake description
# (lmsforge/verify/pytorch_c10), using the host toolchain: see the comment in recipe.yaml.
set -euo pipefail

cuda=OFF
extra=()
if [ "${LMS_CUDA_VERSION}" != "None" ]; then
  cuda=ON
  extra+=("-DNVML_INCLUDE_DIR=${LMS_NVML_INCLUDE_DIR:?the CUDA variant needs LMS_NVML_INCLUDE_DIR}")
fi

cmake -G Ninja -S "${SRC_DIR}/lmsforge-c10" -B build \
  -DTORCH_SRC="${SRC_DIR}" -DLMS_BUILD_CUDA="${cuda}" -DCMAKE_BUILD_TYPE=Release \
  "${extra[@]}"
cmake --build build -j "${CPU_COUNT:-2}"

mkdir -p "${PREFIX}/lib" "${PREFIX}/bin" "${PREFIX}/share/lmsforge"
cp -P build/libc10*.so* "${PREFIX}/lib/"
for program in lms_core_tests lms_cuda_tests; do
  if [ -x "build/${program}" ]; then
    cp "build/${program}" "${PREFIX}/bin/"
  fi
done
# The host's libcpuinfo travels with the package (it is not in any channel we can reach).
cpuinfo=$(ldd build/libc10.so | awk '/libcpuinfo/ {print $3}')
if [ -n "${cpuinfo}" ]; then
  cp -L "${cpuinfo}" "${PREFIX}/lib/"
fi
printf '%s\n' "${LMS_IDENTITY_JSON}" > "${PREFIX}/share/lmsforge/${PKG_NAME}.json"
