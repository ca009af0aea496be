#include "core/node_memory.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

#include "core/error.hpp"

namespace sinklab {

namespace {

namespace fs = std::filesystem;

// A limit file's value: bytes, or -1 for "max", an unlimited v1 value (>= 2^60) or an unreadable file.
int64_t read_limit(const fs::path& file) {
  std::ifstream in(file);
  std::string text;
  if (!(in >> text) || text == "max") return -1;
  try {
    size_t used = 0;
    const unsigned long long v = std::stoull(text, &used);
    if (used != text.size() || v >= (1ull << 60)) return -1;
    return int64_t(v);
  } catch (const std::exception&) {
    return -1;
  }
}

// The smallest limit in `file_name` from <mount>/<cgroup path> up to <mount> itself.
void walk_up(const fs::path& mount, std::string path, const char* file_name, const char* kind, NodeMemory& best) {
  for (;;) {
    const fs::path file = mount / fs::path(path).relative_path() / file_name;
    const int64_t limit = read_limit(file);
    if (limit >= 0 && limit < best.bytes) best = {limit, std::string(kind) + " " + file.lexically_normal().string()};
    if (path.empty() || path == "/") return;
    const size_t slash = path.find_last_of('/');
    path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
  }
}

}  // namespace

NodeMemory node_memory(const std::string& root) {
  const fs::path base = root.empty() ? fs::path("/") : fs::path(root);
  const fs::path meminfo = base / "proc/meminfo";
  NodeMemory best;
  {
    std::ifstream in(meminfo);
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("MemTotal:", 0) == 0) {
        std::istringstream fields(line.substr(9));
        long long kib = 0;
        std::string unit;
        if (fields >> kib >> unit && unit == "kB" && kib > 0) best = {int64_t(kib) * 1024, "MemTotal"};
      }
  }
  SL_CHECK(best.bytes > 0, "%s: no MemTotal line (cannot size the default --max-memory; pass one)",
           meminfo.string().c_str());
  // /proc/self/cgroup: "0::<path>" (v2), "<id>:memory:<path>" or "<id>:...,memory,...:<path>" (v1).
  std::ifstream in(base / "proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string_view controllers = std::string_view(line).substr(a + 1, b - a - 1);
    const std::string path = line.substr(b + 1);
    bool memory = false;  // "memory" among the comma-separated v1 controllers
    for (size_t at = 0; at <= controllers.size();) {
      const size_t comma = std::min(controllers.find(',', at), controllers.size());
      memory = memory || controllers.substr(at, comma - at) == "memory";
      at = comma + 1;
    }
    if (a == 1 && line[0] == '0' && controllers.empty())
      walk_up(base / "sys/fs/cgroup", path, "memory.max", "cgroup v2", best);
    else if (memory)
      walk_up(base / "sys/fs/cgroup/memory", path, "memory.limit_in_bytes", "cgroup v1", best);
  }
  return best;
}

}  // namespace sinklab
