#pragma once

// Lookups in maps of address ranges keyed by their start offset (memory.cpp,
// virtual_memory.cpp).

#include <cstddef>
#include <iterator>

namespace lms_sim {

// The entry of RANGES (keyed by start offset) whose [start, start + LENGTH(entry))
// holds OFFSET, or end().
template <typename Ranges, typename Length>
typename Ranges::const_iterator holding(const Ranges& ranges, size_t offset, Length length) {
  auto next = ranges.upper_bound(offset);
  if (next == ranges.begin()) {
    return ranges.end();
  }
  auto holder = std::prev(next);
  return offset < holder->first + length(holder->second) ? holder : ranges.end();
}

} // namespace lms_sim
