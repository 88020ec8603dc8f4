// BackendModel-based property test of the simulator: RapidCheck generates random sequences of
// reserve / commit / decommit / write / read / zero / unreserve calls, valid and invalid
// (misaligned, outside reservations, on released reservations, overlapping, too large),
// runs them on a small SimBackend and on an in-test model of the MemoryBackend contract, and
// requires that both agree after every call: which calls succeed (and with which code),
// reserved and committed bytes, device free bytes, and that a read returns the last bytes
// written while the memory stayed committed.
//
// Case count and seed: RapidCheck reads them from the RC_PARAMS environment variable, e.g.
//   RC_PARAMS="seed=12345 max_success=1000" ./sim_backend_model_property_test
// They are printed when the binary starts; on failure RapidCheck prints the seed and the
// shrunk sequence of operations, and RC_PARAMS="reproduce=..." (which it also prints) replays it.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "backends/sim/sim_backend.h"
#include "core/memory/host_address_space.h"
#include "tests/support/rapidcheck_params.h"

namespace siesta {
namespace {

enum class OpKind : uint8_t { kReserve, kCommit, kDecommit, kWrite, kRead, kZero, kUnreserve };

const char* op_name(OpKind kind) {
  switch (kind) {
    case OpKind::kReserve: return "reserve";
    case OpKind::kCommit: return "commit";
    case OpKind::kDecommit: return "decommit";
    case OpKind::kWrite: return "write";
    case OpKind::kRead: return "read";
    case OpKind::kZero: return "zero";
    case OpKind::kUnreserve: return "unreserve";
  }
  return "?";
}

// One call. `target` picks a reservation ever made (live or released) or, for a decommit
// whose `value` is odd and for most copies and zeroes, one of the live commits; `offset` and
// `length` are in granules for commit/decommit, in kByteOffsetStep / kByteLengthStep bytes for
// write/read/zero, and in units of kReserveStep granules for reserve. The ranges are sized so that
// valid calls, invalid ones and running out of device memory all come up often.
struct Op {
  OpKind kind = OpKind::kReserve;
  uint32_t target = 0;
  uint32_t offset = 0;
  uint32_t length = 0;
  bool misalign = false;
  uint8_t value = 0;
};

void showValue(const Op& op, std::ostream& os) {
  os << op_name(op.kind) << "(target " << op.target << ", offset " << op.offset << ", length "
     << op.length << (op.misalign ? ", misaligned" : "") << ", value " << int(op.value) << ")";
}

constexpr size_t kGranules = 6;           // device capacity, in granules
constexpr size_t kChunkGranules = 2;      // a commit of 3 granules is 2 chunks
constexpr size_t kReserveStep = 3;        // reservations of 0, 3, 6, 9, 12 granules
constexpr size_t kByteOffsetStep = 1000;  // copies and zero start at odd places...
constexpr size_t kByteLengthStep = 1700;  // ...and the longest is larger than a buffer

size_t granule() { return host_address_space::page_size(); }
size_t staging_bytes() { return granule() + granule() / 2; }

rc::Gen<Op> op_generator() {
  using rc::gen::inRange;
  return rc::gen::map(
      rc::gen::tuple(rc::gen::weightedElement<OpKind>({{1, OpKind::kReserve},
                                                       {3, OpKind::kCommit},
                                                       {2, OpKind::kDecommit},
                                                       {3, OpKind::kWrite},
                                                       {3, OpKind::kRead},
                                                       {1, OpKind::kZero},
                                                       {1, OpKind::kUnreserve}}),
                     inRange<uint32_t>(0, 4), inRange<uint32_t>(0, 6), inRange<uint32_t>(0, 5),
                     rc::gen::weightedElement<bool>({{1, true}, {9, false}}),
                     rc::gen::arbitrary<uint8_t>()),
      [](const std::tuple<OpKind, uint32_t, uint32_t, uint32_t, bool, uint8_t>& t) {
        Op op;
        std::tie(op.kind, op.target, op.offset, op.length, op.misalign, op.value) = t;
        return op;
      });
}

// The MemoryBackend contract, over plain maps.
class BackendModel {
 public:
  std::map<DeviceAddress, size_t> reservations;  // live: base -> size
  std::map<DeviceAddress, size_t> commits;       // one per successful commit: base -> size
  // Per live reservation (by base), each byte's last value written while committed, or -1
  // when unspecified (never written, or decommitted since).
  std::map<DeviceAddress, std::vector<int16_t>> contents;
  uint64_t committed_bytes = 0;

  uint64_t reserved_bytes() const {
    uint64_t total = 0;
    for (const auto& [base, size] : reservations) total += size;
    return total;
  }

  bool inside_one_reservation(DeviceRange r) const {
    auto it = reservations.upper_bound(r.base);
    if (it == reservations.begin()) return false;
    --it;
    return DeviceRange{it->first, it->second}.contains(r);
  }
  bool overlaps_commit(DeviceRange r) const {
    for (const auto& [base, size] : commits) {
      if (DeviceRange{base, size}.overlaps(r)) return true;
    }
    return false;
  }
  // The commit holding `address`, if any.
  std::optional<DeviceRange> commit_at(DeviceAddress address) const {
    for (const auto& [base, size] : commits) {
      if (address >= base && address < base + size) return DeviceRange{base, size};
    }
    return std::nullopt;
  }
  bool fully_committed(DeviceAddress base, size_t bytes) const {
    for (DeviceAddress cursor = base; cursor < base + bytes;) {
      const std::optional<DeviceRange> commit = commit_at(cursor);
      if (!commit) return false;
      cursor = commit->end();
    }
    return true;
  }
  // The byte at `address`. REQUIRES: inside a live reservation.
  int16_t& byte(DeviceAddress address) {
    auto it = std::prev(contents.upper_bound(address));
    return it->second[address - it->first];
  }
  void forget_bytes(DeviceRange r) {
    for (DeviceAddress a = r.base; a < r.end(); ++a) byte(a) = -1;
  }
};

template <class T>
StatusCode code_of(const Result<T>& r) {
  return r.status().code();
}

std::string name_of(StatusCode code) { return std::string(status_code_name(code)); }

// Runs `ops` on a fresh SimBackend and the model, asserting agreement after each.
void run_against_model(const std::vector<Op>& ops) {
  const size_t g = granule();
  SimBackendOptions options;
  options.capacity_bytes = kGranules * g;
  options.granularity = g;
  options.max_chunk_bytes = kChunkGranules * g;
  options.staging_buffer_bytes = staging_bytes();
  options.staging_buffer_count = 2;
  Result<std::unique_ptr<SimBackend>> created = SimBackend::create(options);
  RC_ASSERT(created.ok());
  SimBackend& sim = **created;
  BackendModel model;
  std::vector<DeviceRange> handles;  // every reservation ever made, released ones included
  // What the sequence exercised, so the printed distribution shows the generator reaches the
  // interesting cases (a property that only ever sees rejected calls proves little).
  int commits_ok = 0;
  int out_of_memory = 0;
  int bytes_checked = 0;

  for (const Op& op : ops) {
    RC_LOG() << op_name(op.kind) << " target=" << op.target << " offset=" << op.offset
             << " length=" << op.length << " misalign=" << op.misalign << "\n";
    if (handles.empty() && op.kind != OpKind::kReserve) continue;  // nothing to aim at yet
    if (op.kind == OpKind::kReserve) {
      const size_t whole = op.length * kReserveStep * g;
      const size_t bytes = whole - (op.misalign && whole > 0 ? g / 2 : 0);
      Result<DeviceRange> got = sim.reserve(bytes);
      if (bytes == 0) {
        RC_ASSERT(name_of(code_of(got)) == name_of(StatusCode::kInvalidArgument));
      } else {
        RC_ASSERT(got.ok());
        RC_ASSERT(got->size == whole);
        RC_ASSERT(got->base % g == 0);
        RC_ASSERT(!model.inside_one_reservation({got->base, 1}));
        model.reservations[got->base] = got->size;
        model.contents[got->base].assign(got->size, -1);
        handles.push_back(*got);
      }
      continue;
    }
    const DeviceRange handle = handles[op.target % handles.size()];
    const size_t shift = op.misalign ? g / 2 : 0;
    DeviceRange granule_range{handle.base + op.offset * g + shift, op.length * g};
    if (op.kind == OpKind::kDecommit && op.value % 2 == 1 && !model.commits.empty()) {
      auto commit = model.commits.begin();
      std::advance(commit, op.target % model.commits.size());
      granule_range = {commit->first, commit->second};
    }
    // Copies and zero mostly start in a live commit, so that reads meet earlier writes.
    DeviceAddress byte_anchor = handle.base;
    if (op.value % 4 != 0 && !model.commits.empty()) {
      auto commit = model.commits.begin();
      std::advance(commit, op.target % model.commits.size());
      byte_anchor = commit->first;
    }
    const DeviceRange byte_range{byte_anchor + op.offset * kByteOffsetStep + op.value % 8,
                                 op.length * kByteLengthStep};

    switch (op.kind) {
      case OpKind::kReserve: break;
      case OpKind::kCommit: {
        const DeviceRange r = granule_range;
        StatusCode want = StatusCode::kOk;
        if (r.empty() || r.base % g != 0 || r.size % g != 0) {
          want = StatusCode::kInvalidArgument;
        } else if (!model.inside_one_reservation(r) || model.overlaps_commit(r)) {
          want = StatusCode::kFailedPrecondition;
        } else if (model.committed_bytes + r.size > options.capacity_bytes) {
          want = StatusCode::kOutOfMemory;
        }
        RC_ASSERT(name_of(sim.commit(r).code()) == name_of(want));
        if (want == StatusCode::kOutOfMemory) ++out_of_memory;
        if (want == StatusCode::kOk) {
          ++commits_ok;
          model.commits[r.base] = r.size;
          model.committed_bytes += r.size;
          model.forget_bytes(r);  // fresh memory: contents unspecified
        }
        break;
      }
      case OpKind::kDecommit: {
        const DeviceRange r = granule_range;
        StatusCode want = StatusCode::kOk;
        if (r.empty() || r.base % g != 0 || r.size % g != 0) {
          want = StatusCode::kInvalidArgument;
        } else if (!model.inside_one_reservation(r) || !model.fully_committed(r.base, r.size) ||
                   model.commit_at(r.base)->base != r.base ||
                   model.commit_at(r.end() - 1)->end() != r.end()) {
          want = StatusCode::kFailedPrecondition;
        }
        RC_ASSERT(name_of(sim.decommit(r).code()) == name_of(want));
        if (want == StatusCode::kOk) {
          for (auto it = model.commits.lower_bound(r.base);
               it != model.commits.end() && it->first < r.end();) {
            model.committed_bytes -= it->second;
            it = model.commits.erase(it);
          }
          model.forget_bytes(r);
        }
        break;
      }
      case OpKind::kWrite:
      case OpKind::kRead: {
        const DeviceRange r = byte_range;
        StatusCode want = StatusCode::kOk;
        if (r.size > staging_bytes()) {
          want = StatusCode::kInvalidArgument;
        } else if (!model.fully_committed(r.base, r.size)) {
          want = StatusCode::kFailedPrecondition;
        }
        Result<StagingBuffer> buffer = sim.acquire_staging();
        RC_ASSERT(buffer.ok());
        if (op.kind == OpKind::kWrite) {
          for (size_t i = 0; i < buffer->bytes().size(); ++i) {
            buffer->bytes()[i] = static_cast<std::byte>(op.value + i * 31);
          }
          Result<CopyTicket> ticket = sim.copy_from_staging(*buffer, r.size, r.base);
          RC_ASSERT(name_of(code_of(ticket)) == name_of(want));
          if (ticket.ok()) {
            RC_ASSERT(sim.wait(*ticket).ok());
            for (size_t i = 0; i < r.size; ++i) {
              model.byte(r.base + i) = static_cast<uint8_t>(op.value + i * 31);
            }
          }
        } else {
          Result<CopyTicket> ticket = sim.copy_to_staging(r.base, r.size, *buffer);
          RC_ASSERT(name_of(code_of(ticket)) == name_of(want));
          if (ticket.ok()) {
            RC_ASSERT(sim.wait(*ticket).ok());
            for (size_t i = 0; i < r.size; ++i) {
              const int16_t known = model.byte(r.base + i);
              if (known < 0) continue;
              ++bytes_checked;
              RC_ASSERT(static_cast<int>(buffer->bytes()[i]) == known);
            }
          }
        }
        break;
      }
      case OpKind::kZero: {
        const DeviceRange r = byte_range;
        const StatusCode want = model.fully_committed(r.base, r.size)
                                    ? StatusCode::kOk
                                    : StatusCode::kFailedPrecondition;
        RC_ASSERT(name_of(sim.zero(r).code()) == name_of(want));
        if (want == StatusCode::kOk) {
          for (size_t i = 0; i < r.size; ++i) model.byte(r.base + i) = 0;
        }
        break;
      }
      case OpKind::kUnreserve: {
        sim.unreserve(handle);  // a released or reused handle is not an error
        auto it = model.reservations.find(handle.base);
        if (it != model.reservations.end() && it->second == handle.size) {
          model.reservations.erase(it);
          for (auto c = model.commits.lower_bound(handle.base);
               c != model.commits.end() && c->first < handle.end();) {
            model.committed_bytes -= c->second;
            c = model.commits.erase(c);
          }
          model.contents.erase(handle.base);
        }
        break;
      }
    }
    const MemoryStats stats = sim.stats();
    RC_ASSERT(stats.committed_bytes == model.committed_bytes);
    RC_ASSERT(stats.reserved_bytes == model.reserved_bytes());
    RC_ASSERT(stats.device_free_bytes == options.capacity_bytes - model.committed_bytes);
  }
  RC_ASSERT(sim.synchronize().ok());
  RC_CLASSIFY(commits_ok == 0, "no commit succeeded");
  RC_CLASSIFY(commits_ok >= 3, "3+ commits succeeded");
  RC_CLASSIFY(out_of_memory > 0, "a commit ran out of memory");
  RC_CLASSIFY(bytes_checked > 0, "a read checked written bytes");
}

RC_GTEST_PROP(SimBackendModelProperty, AgreesWithTheModelOnEverySequence, ()) {
  // Up to about 200 calls at the largest size: enough for reservations to be released and
  // their addresses reused, and for the device to fill up.
  // The first call reserves something, so the rest have a target.
  Op first;
  first.kind = OpKind::kReserve;
  first.length = *rc::gen::inRange<uint32_t>(1, 5);
  std::vector<Op> ops{first};
  const std::vector<Op> rest =
      *rc::gen::scale(2.0, rc::gen::container<std::vector<Op>>(op_generator()));
  ops.insert(ops.end(), rest.begin(), rest.end());
  run_against_model(ops);
}

}  // namespace
}  // namespace siesta
