// What the kernel says is mapped at a host address (/proc/self/maps), asked without the code
// under test: the simulator's "driver view" of its device memory in the conformance suite.
#pragma once

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

namespace siesta::test_util {

// True when `address` lies in a mapping of this process that is readable and writable (a
// committed simulator chunk); false for PROT_NONE reservations, holes, or an unreadable maps.
inline bool host_address_backed(uintptr_t address) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    unsigned long long start = 0, end = 0;
    char perms[5] = {};
    if (std::sscanf(line.c_str(), "%llx-%llx %4s", &start, &end, perms) != 3) continue;
    if (address >= start && address < end) return perms[0] == 'r' && perms[1] == 'w';
  }
  return false;
}

}  // namespace siesta::test_util
