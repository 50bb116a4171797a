// The driver's virtual memory API over a device arena (memory.h): reserved
// address ranges, physical memory counted against the device, mappings with
// their access, and what a stream operation may reach through them.

#include "memory.h"

#include "ranges.h"

#include "errors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>

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

bool DeviceArena::take_file_range_locked(size_t bytes, size_t* offset) {
  if (physical_file_ < 0) {
    // Twice the capacity: first fit over ranges of mixed sizes never runs out
    // while the capacity holds. Sparse: only bytes written take host memory.
    size_t length = 2 * capacity_;
    physical_file_ = memfd_create("lms_cuda_sim physical memory", MFD_CLOEXEC);
    if (physical_file_ < 0 || ftruncate(physical_file_, static_cast<off_t>(length)) != 0) {
      report("cannot make a memory file of " + std::to_string(length >> 20) +
             " MiB for the device's physical memory");
      std::abort();
    }
    file_free_[0] = length;
  }
  for (auto it = file_free_.begin(); it != file_free_.end(); ++it) {
    if (it->second >= bytes) {
      *offset = it->first;
      if (it->second > bytes) {
        file_free_[it->first + bytes] = it->second - bytes;
      }
      file_free_.erase(it);
      return true;
    }
  }
  return false;
}

void DeviceArena::give_back_file_range_locked(size_t offset, size_t bytes) {
  // Its bytes go: the host memory behind them is freed.
  fallocate(physical_file_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
            static_cast<off_t>(offset), static_cast<off_t>(bytes));
  auto next = file_free_.lower_bound(offset);
  if (next != file_free_.end() && next->first == offset + bytes) {
    bytes += next->second;
    next = file_free_.erase(next);
  }
  if (next != file_free_.begin()) {
    auto before = std::prev(next);
    if (before->first + before->second == offset) {
      before->second += bytes;
      return;
    }
  }
  file_free_[offset] = bytes;
}

void DeviceArena::drop_if_unused_locked(std::map<uint64_t, Physical>::iterator physical) {
  if (physical->second.released && physical->second.mappings == 0) {
    used_ -= physical->second.bytes;
    give_back_file_range_locked(physical->second.file_offset, physical->second.bytes);
    physical_.erase(physical);
  }
}

Status DeviceArena::create_physical(size_t bytes, uint64_t* handle) {
  if (bytes == 0 || bytes % kGranule != 0 || handle == nullptr) {
    return kErrorInvalidValue;
  }
  std::lock_guard<std::mutex> guard(mutex_);
  size_t file_offset = 0;
  if (used_ + bytes > capacity_ || !take_file_range_locked(bytes, &file_offset)) {
    return kErrorMemoryAllocation;
  }
  used_ += bytes;
  *handle = next_handle_++;
  physical_[*handle] = Physical{bytes, file_offset, 0, false, false};
  return kSuccess;
}

Status DeviceArena::release_physical(uint64_t handle) {
  std::lock_guard<std::mutex> guard(mutex_);
  auto found = physical_.find(handle);
  if (found == physical_.end() || found->second.released) {
    return kErrorInvalidValue;
  }
  found->second.released = true;
  // Still mapped: the memory goes back at its last unmapping, as in CUDA.
  drop_if_unused_locked(found);
  return kSuccess;
}

Status DeviceArena::map(void* ptr, size_t bytes, uint64_t handle) {
  size_t offset = 0;
  if (!vmm_offset(ptr, &offset)) {
    return kErrorInvalidValue;
  }
  std::lock_guard<std::mutex> guard(mutex_);
  {
    auto physical = physical_.find(handle);
    if (physical == physical_.end() || physical->second.released ||
        physical->second.bytes != bytes || offset % kGranule != 0) {
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
    // The shadow shows the physical memory's own bytes here, as it does at
    // any other address the handle is mapped at.
    if (mmap(vmm_shadow_ + offset, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
             physical_file_, static_cast<off_t>(physical->second.file_offset)) == MAP_FAILED) {
      report("cannot map " + std::to_string(bytes >> 20) + " MiB of physical memory");
      std::abort();
    }
    physical->second.mappings += 1;
    mappings_[offset] = Mapping{bytes, handle, false};
    if (!physical->second.poisoned) {
      // New physical memory holds nothing defined.
      physical->second.poisoned = true;
      fill_poison(vmm_shadow_ + offset, bytes,
                  (static_cast<uint64_t>(device_) << 48) ^ (uint64_t(1) << 47) ^ handle);
    }
  }
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
  std::lock_guard<std::mutex> guard(mutex_);
  if (!tiled_locked(ptr, bytes, &offset)) {
    return kErrorInvalidValue;
  }
  // Unmapped, the range faults (view_mapped); the shadow there is private
  // and empty again, and the physical memory keeps its bytes.
  if (mmap(vmm_shadow_ + offset, bytes, PROT_READ | PROT_WRITE,
           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) == MAP_FAILED) {
    report("cannot unmap " + std::to_string(bytes >> 20) + " MiB of physical memory");
    std::abort();
  }
  auto it = mappings_.find(offset);
  while (it != mappings_.end() && it->first < offset + bytes) {
    auto physical = physical_.find(it->second.handle);
    physical->second.mappings -= 1;
    drop_if_unused_locked(physical);
    it = mappings_.erase(it);
  }
  return kSuccess;
}

} // namespace lms_sim
