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

// Maps the whole pages inside [data, data+bytes) now, writable (madvise MADV_POPULATE_WRITE),
// so that the writes that follow take no page fault: a hint, for memory about to be written
// whole. Fresh pages cost a fault each at their first touch, 0.3-0.9 ms a MiB on the virtual
// machines measured (2026-12-05), where a read from the page cache moves a MiB in 0.1-0.3 ms.
// Success also when the kernel lacks the call (before Linux 5.14: nothing is done) and for a
// range with no whole page. Failure: the kernel's error (ENOMEM where the range is not all
// mapped writable, for one); nothing is harmed, the writes fault as they would have.
// Thread rule: any thread, also while others write into the range (each page is made present
// once, whichever comes first); not while the range is being mapped or dropped.
Status prefault_for_write(std::byte* data, size_t bytes);

// Unmaps a whole reservation. REQUIRES: exactly a range returned by reserve().
void unreserve(std::byte* base, size_t bytes);

// Resident set size of this process in bytes, from /proc/self/statm (for tests and stats).
Result<size_t> resident_bytes();

}  // namespace siesta::host_address_space
