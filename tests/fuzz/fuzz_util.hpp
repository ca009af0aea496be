// What the libFuzzer targets share. Every parser of untrusted input reads a path (most memory-map it), so
// a target writes its input to a scratch file first; and every target checks the one rule: malformed
// input is a sinklab::Error (one line naming the file), never a crash, a hang, a leak or another exception
// (libFuzzer reports an uncaught exception as a crash).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.hpp"

namespace sinklab::fuzz {

// A scratch directory of this process, in memory where /dev/shm exists (libFuzzer runs thousands of
// inputs a second): under $SINKLAB_FUZZ_SCRATCH, which tests/fuzz/run.sh creates and removes per run.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    namespace fs = std::filesystem;
    const char* root = std::getenv("SINKLAB_FUZZ_SCRATCH");
    const fs::path base = root && *root                    ? fs::path(root)
                          : fs::is_directory("/dev/shm") ? fs::path("/dev/shm")
                                                         : fs::temp_directory_path();
    const fs::path d = base / ("sinklab-fuzz-" + std::to_string(getpid()));
    fs::create_directories(d);
    return d.string();
  }();
  return dir;
}

// Writes `size` bytes to <scratch>/<name>, replacing the file, and returns its path.
inline std::string write_file(const std::string& name, const void* data, size_t size) {
  const std::string path = scratch_dir() + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), std::streamsize(size));
  out.close();
  if (!out) {
    std::fprintf(stderr, "fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
  return path;
}

inline std::string write_file(const std::string& name, const std::string& text) {
  return write_file(name, text.data(), text.size());
}

// Runs f; a sinklab::Error is the expected outcome of a malformed input, anything else escapes.
template <class F>
void expect_clean(F&& f) {
  try {
    f();
  } catch (const sinklab::Error&) {
  }
}

}  // namespace sinklab::fuzz
