// Host address-space primitives shared by HostVmm and the simulated device (SimBackend):
// reserving a range with no memory behind it, and dropping the pages of part of a range
// while keeping the addresses. One place holds the mmap flags that make both behave like
// the CUDA VMM calls they stand in for.
#pragma once

#include <cstddef>

#include "core/base/status.h"

namespace siesta::host_address_space {

size_t page_size();

// mmap(PROT_NONE, MAP_PRIVATE|MAP_ANONYMOUS|MAP_NORESERVE) of `bytes` aligned to `alignment`
// (a power of two, multiple of page_size()). Touching the range faults.
// Failure: OutOfMemory when the address space is exhausted.
Result<std::byte*> reserve(size_t bytes, size_t alignment);

// Maps PROT_NONE over [base, base+bytes) with MAP_FIXED, dropping whatever was mapped there
// (its pages go back to the kernel once no other mapping holds them); the addresses stay
// reserved. REQUIRES: the range lies inside a reservation, page-aligned.
Status drop(std::byte* base, size_t bytes);

// Unmaps a whole reservation. REQUIRES: exactly a range returned by reserve().
void unreserve(std::byte* base, size_t bytes);

// Resident set size of this process in bytes, from /proc/self/statm (for tests and stats).
Result<size_t> resident_bytes();

}  // namespace siesta::host_address_space
