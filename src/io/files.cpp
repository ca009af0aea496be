#include "io/files.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "core/error.hpp"

namespace sinklab::io {

std::string working_copy_path(const std::string& path) { return path + kWorkingCopyInfix + std::to_string(::getpid()); }

AtomicFile::AtomicFile(const std::string& path) : path_(path) {
  temp_ = working_copy_path(path);
  file_ = std::fopen(temp_.c_str(), "wb");
  SL_CHECK(file_ != nullptr, "cannot write %s: %s", temp_.c_str(), std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (file_) {
    std::fclose(file_);
    std::remove(temp_.c_str());
  }
}

void AtomicFile::write(const void* bytes, size_t n) {
  SL_CHECK(file_ != nullptr, "write to %s after commit", path_.c_str());
  if (n == 0) return;
  SL_CHECK(std::fwrite(bytes, 1, n, file_) == n, "writing %s failed: %s", temp_.c_str(), std::strerror(errno));
}

void AtomicFile::commit() {
  SL_CHECK(file_ != nullptr, "commit of %s twice", path_.c_str());
  bool ok = std::fflush(file_) == 0 && ::fsync(::fileno(file_)) == 0;
  ok = (std::fclose(file_) == 0) && ok;
  file_ = nullptr;
  if (!ok) {
    std::remove(temp_.c_str());
    SL_FAIL("writing %s failed: %s", temp_.c_str(), std::strerror(errno));
  }
  if (std::rename(temp_.c_str(), path_.c_str()) != 0) {
    int err = errno;
    std::remove(temp_.c_str());
    SL_FAIL("cannot rename %s to %s: %s", temp_.c_str(), path_.c_str(), std::strerror(err));
  }
  sync_parent_dir(path_);
}

void sync_parent_dir(const std::string& path) {
  std::string dir = ".";
  size_t slash = path.find_last_of('/');
  if (slash != std::string::npos) dir = slash == 0 ? "/" : path.substr(0, slash);
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

MappedFile::MappedFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  SL_CHECK(fd >= 0, "cannot open %s: %s", path.c_str(), std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    SL_FAIL("cannot stat %s: %s", path.c_str(), std::strerror(err));
  }
  size_ = size_t(st.st_size);
  if (size_ > 0) {
    map_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map_ == MAP_FAILED) {
      int err = errno;
      map_ = nullptr;
      ::close(fd);
      SL_FAIL("cannot map %s: %s", path.c_str(), std::strerror(err));
    }
  }
  ::close(fd);
}

void MappedFile::release(size_t offset, size_t n) const {
  if (map_ == nullptr || n == 0 || offset >= size_) return;
  n = std::min(n, size_ - offset);
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  const uintptr_t base = reinterpret_cast<uintptr_t>(map_);
  const uintptr_t begin = (base + offset) / page * page;
  const uintptr_t end = (base + offset + n + page - 1) / page * page;
  // Pages past the end of the file are not part of the mapping's last page range: clamp to it.
  const uintptr_t map_end = (base + size_ + page - 1) / page * page;
  if (::madvise(reinterpret_cast<void*>(begin), std::min(end, map_end) - begin, MADV_DONTNEED) != 0)
    SL_FAIL("madvise(MADV_DONTNEED) on %zu mapped bytes failed: %s", n, std::strerror(errno));
}

MappedFile::~MappedFile() {
  if (map_) ::munmap(map_, size_);
}

}  // namespace sinklab::io
