#pragma once

// Simulated device memory and page-locked host memory.
//
// Each device owns a reserved range of addresses that the host can never
// touch (PROT_NONE), exactly as host code cannot dereference a real device
// pointer; the bytes live in a second, private "shadow" mapping that only the
// simulated copy engines and kernels reach, through view(). Allocations are
// 2 MiB granules handed out next-fit, so a freed range is not handed out
// again soon and a stale pointer faults instead of reading someone else's
// data. New allocations are filled with poison; freed ones are released.
//
// The driver's virtual memory API (cuMemAddressReserve, cuMemCreate, cuMemMap,
// cuMemSetAccess, cuMemUnmap, cuMemRelease, cuMemAddressFree: what PyTorch's
// expandable segments use) lives in a second range of addresses of the same
// kind. Reserving addresses costs no capacity; physical memory does, from its
// creation until it is both released and unmapped. Bytes are reachable only
// where physical memory is mapped and access was set; a range may span
// adjacent mappings, as a block of an expandable segment does. The bytes
// belong to the physical memory, as on a GPU: new physical memory is
// poisoned at its first mapping, keeps its bytes while unmapped, and a handle
// may be mapped at several addresses at once (the CUDA programming guide's
// "virtual aliasing"), each showing the same bytes. Physical memory lives in
// one memory file per device, mapped into the shadow where it is mapped.

#include "status.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

namespace lms_sim {

constexpr size_t kGranule = size_t(2) << 20;

class DeviceArena {
 public:
  DeviceArena(int device, size_t capacity);
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  // kErrorMemoryAllocation beyond the capacity, like cudaMalloc.
  Status allocate(size_t bytes, void** out);
  // False when `ptr` is not the start of a live allocation.
  bool free(void* ptr);
  // Where the simulator reads and writes [ptr, ptr + bytes), or nullptr when
  // that range is not inside one live allocation (a fault).
  uint8_t* view(const void* ptr, size_t bytes) const;
  // Whether `ptr` lies in this device's address range, allocated or not.
  bool owns_address(const void* ptr) const;
  // The live allocation holding `ptr`, if any, and its requested size.
  bool find(const void* ptr, void** base, size_t* size) const;

  size_t capacity() const { return capacity_; }
  size_t used() const;

  // The virtual memory API. kErrorInvalidValue for a range or handle that is
  // not what the call needs; kErrorMemoryAllocation beyond the capacity (or,
  // for addresses, beyond the range kept for them).
  Status reserve_addresses(size_t bytes, void** out);
  Status free_addresses(void* ptr, size_t bytes);
  Status create_physical(size_t bytes, uint64_t* handle);
  Status release_physical(uint64_t handle);
  Status map(void* ptr, size_t bytes, uint64_t handle);
  Status set_access(void* ptr, size_t bytes);
  Status unmap(void* ptr, size_t bytes);

 private:
  bool place_locked(size_t bytes, size_t* offset);
  // Whether `ptr` lies in the virtual memory range, and its offset there.
  bool vmm_offset(const void* ptr, size_t* offset) const;
  uint8_t* view_mapped(size_t offset, size_t bytes) const;
  // Whether [ptr, ptr + bytes) is a non-empty range of the virtual memory
  // range tiled exactly by whole mappings; its offset there.
  bool tiled_locked(const void* ptr, size_t bytes, size_t* offset) const;

  const int device_;
  const size_t capacity_;
  const size_t reserve_;
  uint8_t* device_base_ = nullptr;  // addresses handed to the program
  uint8_t* shadow_base_ = nullptr;  // where the bytes are
  mutable std::mutex mutex_;
  struct Allocation {
    size_t reserved;   // granule-rounded: what the capacity is charged
    size_t requested;  // what the program may touch
  };
  std::map<size_t, Allocation> live_;  // by offset
  size_t cursor_ = 0;              // next-fit position
  size_t used_ = 0;
  uint64_t allocations_ = 0;

  // Virtual memory: offsets count from vmm_base_ (and vmm_shadow_).
  const size_t vmm_reserve_;
  uint8_t* vmm_base_ = nullptr;
  uint8_t* vmm_shadow_ = nullptr;
  std::map<size_t, size_t> reservations_;  // offset -> bytes
  size_t vmm_cursor_ = 0;
  struct Mapping {
    size_t bytes;
    uint64_t handle;
    bool accessible;
  };
  std::map<size_t, Mapping> mappings_;  // by offset
  struct Physical {
    size_t bytes;
    size_t file_offset;  // where its bytes are in physical_file_
    unsigned mappings;   // addresses it is mapped at now
    bool released;
    bool poisoned;       // filled with poison at its first mapping
  };
  std::map<uint64_t, Physical> physical_;
  uint64_t next_handle_ = 1;
  // The memory file (memfd) that holds physical memory's bytes, twice the
  // capacity long and sparse; its free ranges, offset -> bytes.
  int physical_file_ = -1;
  std::map<size_t, size_t> file_free_;
  bool take_file_range_locked(size_t bytes, size_t* offset);
  void give_back_file_range_locked(size_t offset, size_t bytes);
  // Forgets physical memory released and mapped nowhere.
  void drop_if_unused_locked(std::map<uint64_t, Physical>::iterator physical);
};

// cudaHostAlloc memory: real host memory the program may touch, counted
// against the page-locked capacity, known by address for
// cudaPointerGetAttributes and for the copy rules.
class PinnedHost {
 public:
  explicit PinnedHost(size_t capacity) : capacity_(capacity) {}
  Status allocate(size_t bytes, int device, void** out);
  bool free(void* ptr);
  bool find(const void* ptr, void** base, size_t* size, int* device) const;
  size_t used() const;

 private:
  struct Block {
    size_t size;
    int device;
  };
  const size_t capacity_;
  mutable std::mutex mutex_;
  std::map<uintptr_t, Block> blocks_;
  size_t used_ = 0;
};

// 64-bit patterns that never equal a memset byte pattern or small counters.
uint64_t poison_word(uint64_t salt);
void fill_poison(uint8_t* bytes, size_t count, uint64_t salt);

// Sparse data (LMS_SIM_SPARSE_DATA=1), for replaying a model at a GPU's full size on a host
// with far less memory (lmsforge plan): copies, memsets and poison touch only the first
// kSparseWindow bytes of every kSparseStride bytes of their range, counted from the range's
// start, so a host page in 256 is ever touched. A program that writes and checks the same
// windows of each buffer, and copies buffers from their start (as LMS pages storages), still
// sees every missing or misordered copy; any other byte it reads is undefined. Virtual time is
// unchanged: operations are timed by their full size.
constexpr size_t kSparseStride = size_t(1) << 20;
constexpr size_t kSparseWindow = 64;

bool sparse_data();

// Calls visit(offset, length) for each byte range of [0, bytes) that a data operation moves:
// all of it, or its sample windows under sparse data.
template <typename Visit>
void for_each_window(size_t bytes, Visit visit) {
  if (!sparse_data()) {
    visit(size_t(0), bytes);
    return;
  }
  for (size_t offset = 0; offset < bytes; offset += kSparseStride) {
    visit(offset, bytes - offset < kSparseWindow ? bytes - offset : kSparseWindow);
  }
}

} // namespace lms_sim
