// File primitives every writer and reader shares: atomic replacement (so a kill at any moment leaves
// either the old file or the new one, never a torn one) and read-only memory maps.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>

namespace sinklab::io {

// The working copy this process writes before renaming it over path: "<path>.tmp.<pid>" (AtomicFile,
// ResultsFile). Every such copy, whichever process made it, has kWorkingCopyInfix in its name.
inline constexpr const char* kWorkingCopyInfix = ".tmp.";
std::string working_copy_path(const std::string& path);

// Writes to working_copy_path(path) and, on commit(), flushes, fsyncs, renames over path and fsyncs the
// directory. Destroyed without commit(): the temporary is removed and path is untouched.
class AtomicFile {
 public:
  explicit AtomicFile(const std::string& path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* bytes, size_t n);
  void commit();
  const std::string& temp_path() const { return temp_; }

 private:
  std::string path_, temp_;
  std::FILE* file_ = nullptr;
};

// A whole file mapped read-only (MAP_PRIVATE). Throws sinklab::Error naming the file when it cannot
// be opened or mapped.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const unsigned char* data() const { return static_cast<const unsigned char*>(map_); }
  size_t size() const { return size_; }
  // Drops the resident pages of bytes [offset, offset + n) (widened to whole pages) from this process:
  // madvise(MADV_DONTNEED). The mapping is private and never written, so a later read faults the
  // bytes back in from the file. Layer streaming uses it to keep only the current layer resident.
  void release(size_t offset, size_t n) const;

 private:
  void* map_ = nullptr;
  size_t size_ = 0;
};

// fsync the directory holding path (makes a rename durable).
void sync_parent_dir(const std::string& path);

}  // namespace sinklab::io
