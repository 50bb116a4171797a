#include "memory.h"

#include "errors.h"
#include "ranges.h"
#include "settings.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <string>

namespace lms_sim {

namespace {

size_t round_up(size_t bytes, size_t to) {
  return (bytes + to - 1) / to * to;
}

void* map_or_die(size_t bytes, int protection, const char* what) {
  void* address = mmap(nullptr, bytes, protection, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                       -1, 0);
  if (address == MAP_FAILED) {
    report(std::string("cannot reserve ") + std::to_string(bytes >> 20) + " MiB for " + what);
    std::abort();
  }
  return address;
}

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

} // namespace

uint64_t poison_word(uint64_t salt) {
  // Distinct bytes within the word, so no memset value and no small integer
  // ever matches it by accident; the seed varies it between runs.
  uint64_t word = mix64(salt ^ settings().seed) | 0x0101010101010101ULL;
  return word ^ 0x8040201008040201ULL;
}

bool sparse_data() {
  return settings().sparse_data;
}

void fill_poison(uint8_t* bytes, size_t count, uint64_t salt) {
  uint64_t word = poison_word(salt);
  for_each_window(count, [&](size_t offset, size_t length) {
    uint8_t* to = bytes + offset;
    size_t words = length / sizeof(word);
    for (size_t i = 0; i < words; ++i) {
      std::memcpy(to + i * sizeof(word), &word, sizeof(word));
    }
    std::memcpy(to + words * sizeof(word), &word, length % sizeof(word));
  });
}

DeviceArena::DeviceArena(int device, size_t capacity)
    : device_(device),
      capacity_(round_up(capacity, kGranule)),
      // Four times the capacity of addresses: next-fit takes long to wrap.
      reserve_(4 * round_up(capacity, kGranule)),
      // PyTorch reserves 1.125 times the device's memory for each expandable
      // segment, one per stream and pool, and keeps them: room for about 50
      // streams (a GPU's virtual address space is larger still).
      vmm_reserve_(std::max(size_t(1) << 40, 128 * round_up(capacity, kGranule))) {
  device_base_ = static_cast<uint8_t*>(map_or_die(reserve_, PROT_NONE, "device addresses"));
  shadow_base_ = static_cast<uint8_t*>(
      map_or_die(reserve_, PROT_READ | PROT_WRITE, "device memory"));
  vmm_base_ = static_cast<uint8_t*>(
      map_or_die(vmm_reserve_, PROT_NONE, "virtual device addresses"));
  vmm_shadow_ = static_cast<uint8_t*>(
      map_or_die(vmm_reserve_, PROT_READ | PROT_WRITE, "mapped device memory"));
}

bool DeviceArena::place_locked(size_t bytes, size_t* offset) {
  // Next fit from the cursor to the end, then from the start.
  for (int pass = 0; pass < 2; ++pass) {
    size_t position = pass == 0 ? cursor_ : 0;
    size_t limit = reserve_;
    auto next = live_.upper_bound(position);
    if (next != live_.begin()) {
      auto before = std::prev(next);
      position = std::max(position, before->first + before->second.reserved);
    }
    for (;;) {
      size_t gap_end = next == live_.end() ? limit : std::min(next->first, limit);
      if (position + bytes <= gap_end) {
        *offset = position;
        return true;
      }
      if (next == live_.end()) {
        break;
      }
      position = std::max(position, next->first + next->second.reserved);
      ++next;
    }
  }
  return false;
}

Status DeviceArena::allocate(size_t bytes, void** out) {
  if (bytes == 0) {
    *out = nullptr;
    return kSuccess;
  }
  size_t rounded = round_up(bytes, kGranule);
  size_t offset = 0;
  uint64_t salt = 0;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (used_ + rounded > capacity_ || !place_locked(rounded, &offset)) {
      return kErrorMemoryAllocation;
    }
    live_[offset] = Allocation{rounded, bytes};
    used_ += rounded;
    cursor_ = offset + rounded;
    salt = (static_cast<uint64_t>(device_) << 48) ^ ++allocations_;
  }
  // What a fresh allocation holds is undefined: make it visibly wrong.
  fill_poison(shadow_base_ + offset, rounded, salt);
  *out = device_base_ + offset;
  return kSuccess;
}

bool DeviceArena::free(void* ptr) {
  auto* p = static_cast<uint8_t*>(ptr);
  if (p < device_base_ || p >= device_base_ + reserve_) {
    return false;
  }
  size_t offset = static_cast<size_t>(p - device_base_);
  size_t size = 0;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    auto found = live_.find(offset);
    if (found == live_.end()) {
      return false;
    }
    size = found->second.reserved;
    live_.erase(found);
    used_ -= size;
  }
  // Give the pages back; the range is unmapped for the program from now on
  // (view() faults), so nothing can read what was left there.
  madvise(shadow_base_ + offset, size, MADV_DONTNEED);
  return true;
}

uint8_t* DeviceArena::view(const void* ptr, size_t bytes) const {
  size_t mapped = 0;
  if (vmm_offset(ptr, &mapped)) {
    return view_mapped(mapped, bytes);
  }
  void* base = nullptr;
  size_t size = 0;
  if (!find(ptr, &base, &size)) {
    return nullptr;
  }
  size_t offset = static_cast<size_t>(static_cast<const uint8_t*>(ptr) -
                                      static_cast<const uint8_t*>(base));
  if (bytes > size - offset) {
    return nullptr;
  }
  return shadow_base_ + (static_cast<const uint8_t*>(ptr) - device_base_);
}

bool DeviceArena::owns_address(const void* ptr) const {
  auto* p = static_cast<const uint8_t*>(ptr);
  size_t mapped = 0;
  return (p >= device_base_ && p < device_base_ + reserve_) || vmm_offset(ptr, &mapped);
}

bool DeviceArena::find(const void* ptr, void** base, size_t* size) const {
  auto* p = static_cast<const uint8_t*>(ptr);
  size_t mapped = 0;
  std::lock_guard<std::mutex> guard(mutex_);
  if (vmm_offset(ptr, &mapped)) {
    // The mapping that holds it (cuMemGetAddressRange's answer).
    auto holder = holding(mappings_, mapped,
                          [](const Mapping& mapping) { return mapping.bytes; });
    if (holder == mappings_.end()) {
      return false;
    }
    *base = vmm_base_ + holder->first;
    *size = holder->second.bytes;
    return true;
  }
  if (p < device_base_ || p >= device_base_ + reserve_) {
    return false;
  }
  auto holder = holding(live_, static_cast<size_t>(p - device_base_),
                        [](const Allocation& allocation) { return allocation.requested; });
  if (holder == live_.end()) {
    return false;
  }
  *base = device_base_ + holder->first;
  *size = holder->second.requested;
  return true;
}

size_t DeviceArena::used() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return used_;
}

Status PinnedHost::allocate(size_t bytes, int device, void** out) {
  if (bytes == 0) {
    *out = nullptr;
    return kSuccess;
  }
  size_t rounded = round_up(bytes, 4096);
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (used_ + rounded > capacity_) {
      return kErrorMemoryAllocation;
    }
    used_ += rounded;
  }
  // Under sparse data most of it is never touched: reserve no swap for it.
  int flags = MAP_PRIVATE | MAP_ANONYMOUS | (sparse_data() ? MAP_NORESERVE : 0);
  void* address = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, flags, -1, 0);
  std::lock_guard<std::mutex> guard(mutex_);
  if (address == MAP_FAILED) {
    used_ -= rounded;
    return kErrorMemoryAllocation;
  }
  blocks_[reinterpret_cast<uintptr_t>(address)] = Block{rounded, device};
  *out = address;
  return kSuccess;
}

bool PinnedHost::free(void* ptr) {
  size_t size = 0;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    auto found = blocks_.find(reinterpret_cast<uintptr_t>(ptr));
    if (found == blocks_.end()) {
      return false;
    }
    size = found->second.size;
    blocks_.erase(found);
    used_ -= size;
  }
  munmap(ptr, size);
  return true;
}

bool PinnedHost::find(const void* ptr, void** base, size_t* size, int* device) const {
  auto address = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> guard(mutex_);
  auto next = blocks_.upper_bound(address);
  if (next == blocks_.begin()) {
    return false;
  }
  auto holder = std::prev(next);
  if (address >= holder->first + holder->second.size) {
    return false;
  }
  *base = reinterpret_cast<void*>(holder->first);
  *size = holder->second.size;
  *device = holder->second.device;
  return true;
}

size_t PinnedHost::used() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return used_;
}

} // namespace lms_sim
