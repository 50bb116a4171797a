// The driver's virtual memory API over a device arena (memory.h): reserved
// address ranges, physical memory counted against the device, mappings with
// their access, and what a stream operation may reach through them.

#include "memory.h"

#include "ranges.h"

#include <sys/mman.h>

#include <algorithm>

namespace lms_sim {

bool DeviceArena::vmm_offset(const void* ptr, size_t* offset) const {
  auto* p = static_cast<const uint8_t*>(ptr);
  if (p < vmm_base_ || p >= vmm_base_ + vmm_reserve_) {
    return false;
  }
  *offset = static_cast<size_t>(p - vmm_base_);
  return true;
}

uint8_t* DeviceArena::view_mapped(size_t offset, size_t bytes) const {
  std::lock_guard<std::mutex> guard(mutex_);
  // From the mapping that holds `offset`, adjacent accessible mappings until
  // the range is covered.
  auto it = holding(mappings_, offset, [](const Mapping& mapping) { return mapping.bytes; });
  if (it == mappings_.end()) {
    return nullptr;
  }
  size_t covered = it->first;
  size_t end = offset + std::max<size_t>(bytes, 1);
  while (covered < end) {
    if (it == mappings_.end() || it->first != covered || !it->second.accessible) {
      return nullptr;
    }
    covered += it->second.bytes;
    ++it;
  }
  return vmm_shadow_ + offset;
}

bool DeviceArena::tiled_locked(const void* ptr, size_t bytes, size_t* offset) const {
  if (!vmm_offset(ptr, offset) || bytes == 0) {
    return false;
  }
  auto it = mappings_.find(*offset);
  size_t covered = *offset;
  while (covered < *offset + bytes) {
    if (it == mappings_.end() || it->first != covered) {
      return false;
    }
    covered += it->second.bytes;
    ++it;
  }
  return covered == *offset + bytes;
}

Status DeviceArena::reserve_addresses(size_t bytes, void** out) {
  if (bytes == 0 || bytes % kGranule != 0 || out == nullptr) {
    return kErrorInvalidValue;
  }
  std::lock_guard<std::mutex> guard(mutex_);
  // Next fit, as for allocations: a freed range is not handed out again soon.
  for (int pass = 0; pass < 2; ++pass) {
    size_t position = pass == 0 ? vmm_cursor_ : 0;
    auto next = reservations_.upper_bound(position);
    if (next != reservations_.begin()) {
      auto before = std::prev(next);
      position = std::max(position, before->first + before->second);
    }
    for (;;) {
      size_t gap_end = next == reservations_.end() ? vmm_reserve_ : next->first;
      if (position + bytes <= gap_end) {
        reservations_[position] = bytes;
        vmm_cursor_ = position + bytes;
        *out = vmm_base_ + position;
        return kSuccess;
      }
      if (next == reservations_.end()) {
        break;
      }
      position = std::max(position, next->first + next->second);
      ++next;
    }
  }
  return kErrorMemoryAllocation;
}

Status DeviceArena::free_addresses(void* ptr, size_t bytes) {
  size_t offset = 0;
  if (!vmm_offset(ptr, &offset)) {
    return kErrorInvalidValue;
  }
  std::lock_guard<std::mutex> guard(mutex_);
  auto found = reservations_.find(offset);
  if (found == reservations_.end() || found->second != bytes) {
    return kErrorInvalidValue;
  }
  // CUDA requires every mapping in the range gone first.
  auto mapped = mappings_.lower_bound(offset);
  if (mapped != mappings_.end() && mapped->first < offset + bytes) {
    return kErrorInvalidValue;
  }
  reservations_.erase(found);
  return kSuccess;
}

Status DeviceArena::create_physical(size_t bytes, uint64_t* handle) {
  if (bytes == 0 || bytes % kGranule != 0 || handle == nullptr) {
    return kErrorInvalidValue;
  }
  std::lock_guard<std::mutex> guard(mutex_);
  if (used_ + bytes > capacity_) {
    return kErrorMemoryAllocation;
  }
  used_ += bytes;
  *handle = next_handle_++;
  physical_[*handle] = Physical{bytes, false, false, false};
  return kSuccess;
}

Status DeviceArena::release_physical(uint64_t handle) {
  std::lock_guard<std::mutex> guard(mutex_);
  auto found = physical_.find(handle);
  if (found == physical_.end() || found->second.released) {
    return kErrorInvalidValue;
  }
  found->second.released = true;
  // Still mapped: the memory goes back at its unmapping, as in CUDA.
  if (!found->second.mapped) {
    used_ -= found->second.bytes;
    physical_.erase(found);
  }
  return kSuccess;
}

bool DeviceArena::was_mapped(uint64_t handle) const {
  std::lock_guard<std::mutex> guard(mutex_);
  auto found = physical_.find(handle);
  return found != physical_.end() && found->second.was_mapped && !found->second.mapped;
}

Status DeviceArena::map(void* ptr, size_t bytes, uint64_t handle) {
  size_t offset = 0;
  if (!vmm_offset(ptr, &offset)) {
    return kErrorInvalidValue;
  }
  uint64_t salt = 0;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    auto physical = physical_.find(handle);
    if (physical == physical_.end() || physical->second.released ||
        physical->second.mapped || physical->second.bytes != bytes || offset % kGranule != 0) {
      return kErrorInvalidValue;
    }
    // Inside one reservation, over no other mapping.
    auto holder = reservations_.upper_bound(offset);
    if (holder == reservations_.begin()) {
      return kErrorInvalidValue;
    }
    holder = std::prev(holder);
    if (offset + bytes > holder->first + holder->second) {
      return kErrorInvalidValue;
    }
    auto after = mappings_.lower_bound(offset);
    if (after != mappings_.end() && after->first < offset + bytes) {
      return kErrorInvalidValue;
    }
    if (after != mappings_.begin()) {
      auto before = std::prev(after);
      if (before->first + before->second.bytes > offset) {
        return kErrorInvalidValue;
      }
    }
    physical->second.mapped = true;
    physical->second.was_mapped = true;
    mappings_[offset] = Mapping{bytes, handle, false};
    salt = (static_cast<uint64_t>(device_) << 48) ^ (uint64_t(1) << 47) ^ handle;
  }
  // New physical memory holds nothing defined.
  fill_poison(vmm_shadow_ + offset, bytes, salt);
  return kSuccess;
}

Status DeviceArena::set_access(void* ptr, size_t bytes) {
  std::lock_guard<std::mutex> guard(mutex_);
  size_t offset = 0;
  if (!tiled_locked(ptr, bytes, &offset)) {
    return kErrorInvalidValue;
  }
  for (auto it = mappings_.find(offset); it != mappings_.end() && it->first < offset + bytes;
       ++it) {
    it->second.accessible = true;
  }
  return kSuccess;
}

Status DeviceArena::unmap(void* ptr, size_t bytes) {
  size_t offset = 0;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (!tiled_locked(ptr, bytes, &offset)) {
      return kErrorInvalidValue;
    }
    auto it = mappings_.find(offset);
    while (it != mappings_.end() && it->first < offset + bytes) {
      auto physical = physical_.find(it->second.handle);
      physical->second.mapped = false;
      if (physical->second.released) {
        used_ -= physical->second.bytes;
        physical_.erase(physical);
      }
      it = mappings_.erase(it);
    }
  }
  // Unmapped, the range faults (view_mapped); its bytes go.
  madvise(vmm_shadow_ + offset, bytes, MADV_DONTNEED);
  return kSuccess;
}

} // namespace lms_sim
