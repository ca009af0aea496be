// The memory a process's node lets it use, for the survey's default per-rank budget (--max-memory auto):
// the smallest cgroup limit from this process's cgroup up to the hierarchy's root (cgroup v2
// memory.max, v1 memory.limit_in_bytes; "max" or a v1 "unlimited" value of ~2^63 is no limit), and
// /proc/meminfo's MemTotal, whichever is smaller.
#pragma once

#include <cstdint>
#include <string>

namespace sinklab {

struct NodeMemory {
  int64_t bytes = 0;
  std::string source;  // e.g. "MemTotal", "cgroup v2 /sys/fs/cgroup/a/memory.max"
};

// `root` prefixes /proc and /sys (tests build a fake tree). Throws naming the file when MemTotal cannot
// be read.
NodeMemory node_memory(const std::string& root = "");

}  // namespace sinklab
