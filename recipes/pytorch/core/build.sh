#!/bin/bash
# Builds c10 (+ c10_cuda) and the LMS test programs with lmsforge's standalone CMake description
# (lmsforge/verify/pytorch_c10), using the toolchain lmsforge prepared: see recipe.yaml.
set -euo pipefail

cuda=OFF
extra=()
if [ "${target_platform}" != "${build_platform}" ]; then
  # A cross build: the compilers and target libraries come from lmsforge's toolchain file.
  toolchain=${LMS_CMAKE_TOOLCHAIN:?a cross build for ${target_platform} needs LMS_CMAKE_TOOLCHAIN}
  extra+=("-DCMAKE_TOOLCHAIN_FILE=${toolchain}")
fi
if [ "${LMS_CUDA_VERSION}" != "None" ]; then
  cuda=ON
  extra+=("-DCUDAToolkit_ROOT=${LMS_CUDA_HOME:?the CUDA variant needs LMS_CUDA_HOME}")
  extra+=("-DNVML_INCLUDE_DIR=${LMS_NVML_INCLUDE_DIR:?the CUDA variant needs LMS_NVML_INCLUDE_DIR}")
fi

if [ -n "${LMS_CXX_CACHE_LAUNCHER:-}" ]; then
  # lmsforge's object cache (lmsforge/verify/object_cache.py), keyed on the compiler, the command
  # and the preprocessed source with these two folders named by role: the units verify compiled
  # in its c10 build, and a CUDA variant's c10 (the CPU variant's), come from it instead of being
  # compiled again. Every compile gets -ffile-prefix-map, so __FILE__ reads /lmsforge/tree/...
  # rather than this work folder. lmsforge leaves it unset under LMSFORGE_OBJECT_CACHE=off.
  extra+=("-DCMAKE_CXX_COMPILER_LAUNCHER=${LMS_CXX_CACHE_LAUNCHER};--root;tree=${SRC_DIR};--root;build=${SRC_DIR}/build;--")
fi

# LMS_CUDA_SIM=OFF: the simulated CUDA runtime is a verification tool (core-sim), never packaged,
# and its sources are not in the recipe.
cmake -G Ninja -S "${SRC_DIR}/lmsforge-c10" -B build \
  -DTORCH_SRC="${SRC_DIR}" -DLMS_BUILD_CUDA="${cuda}" -DLMS_CUDA_SIM=OFF \
  -DCMAKE_BUILD_TYPE=Release "${extra[@]}"
cmake --build build -j "${CPU_COUNT:-2}"

mkdir -p "${PREFIX}/lib" "${PREFIX}/bin" "${PREFIX}/share/lmsforge"
cp -P build/libc10*.so* "${PREFIX}/lib/"
for program in lms_core_tests lms_cuda_tests; do
  if [ -x "build/${program}" ]; then
    cp "build/${program}" "${PREFIX}/bin/"
  fi
done
# The libcpuinfo c10 linked against (the host's, or the sysroot's for a cross build) travels with
# the package under its soname: it is not in any channel we can reach.
cpuinfo=$(sed -n 's/^CPUINFO_LIBRARY:FILEPATH=//p' build/CMakeCache.txt)
soname=$(readelf -d "${cpuinfo}" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
cp -L "${cpuinfo}" "${PREFIX}/lib/${soname:?no soname in ${cpuinfo}}"
# So does the CUDA runtime c10_cuda loads (its licence is among the recipe's license files): a
# user's channel may have no cuda-cudart, and the driver (__cuda) does not bring it.
if [ "${cuda}" = ON ]; then
  cudart=$(readelf -d build/libc10_cuda.so | sed -n 's/.*(NEEDED).*\[\(libcudart[^]]*\)\].*/\1/p')
  found=$(find -L "${LMS_CUDA_HOME}" -name "${cudart:?libc10_cuda.so needs no libcudart}" \
            -path "*lib*" | head -n 1)
  cp -L "${found:?no ${cudart} in ${LMS_CUDA_HOME}}" "${PREFIX}/lib/${cudart}"
fi
# The identity lmsforge rendered, plus this variant's CUDA version.
printf '%s\n' "${LMS_IDENTITY_JSON%\}}, \"cuda_version\": \"${LMS_CUDA_VERSION}\"}" \
  > "${PREFIX}/share/lmsforge/${PKG_NAME}.json"
