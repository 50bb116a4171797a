#pragma once

// The c10 calls of the benchmarks that PyTorch 1.x and 2.x spell differently, so that one bench/
// builds against every series (a v1.13.1 bundle failed to build its benchmarks on an H200 host,
// 2026-11-30). c10 has no version macros: chosen by overload resolution and by which headers
// exist.

#include <c10/core/StorageImpl.h>
#if __has_include(<c10/core/CachingDeviceAllocator.h>)
#include <c10/core/CachingDeviceAllocator.h>
#else
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <cstddef>
#include <cstdint>

namespace lms_bench {
namespace compat_detail {

// 2.x (from 2.1): mutable_data() is the accessor for a pointer that will be written.
template <typename Storage>
auto writable_data(Storage& storage, int) -> decltype(storage.mutable_data()) {
  return storage.mutable_data();
}

// 1.x: data() is the only accessor, and LMS treats every access as a write.
template <typename Storage>
void* writable_data(Storage& storage, long) {
  return storage.data();
}

} // namespace compat_detail

// The storage's data pointer for a kernel that writes it (LMS pages it in first).
inline void* writable_data(c10::StorageImpl& storage) {
  return compat_detail::writable_data(storage, 0);
}

// The allocator's statistics types: 2.x declares them in c10::CachingDeviceAllocator, 1.x in
// c10::cuda::CUDACachingAllocator.
#if __has_include(<c10/core/CachingDeviceAllocator.h>)
namespace device_stats = c10::CachingDeviceAllocator;
#else
namespace device_stats = c10::cuda::CUDACachingAllocator;
#endif

// The all-pools peak and current value of one of the allocator's statistics.
inline int64_t aggregate_peak(const device_stats::StatArray& stat) {
  return stat[static_cast<size_t>(device_stats::StatType::AGGREGATE)].peak;
}

inline int64_t aggregate_current(const device_stats::StatArray& stat) {
  return stat[static_cast<size_t>(device_stats::StatType::AGGREGATE)].current;
}

} // namespace lms_bench
