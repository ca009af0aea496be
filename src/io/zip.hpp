// A read-only zip archive over a memory map: the container of torch.save's files (PyTorch writes every
// entry "stored", uncompressed, its data 64-byte aligned, so tensors can be viewed in place). Reads the
// central directory (ZIP64 too: archives over 4 GiB or with more than 65535 entries), and checks every
// offset and length against the file before anything is used. Compressed or encrypted entries, spanned
// archives and entries that overlap the directory are refused. Any problem: one sinklab::Error line
// naming the file.
//
// Layout read (all little-endian; APPNOTE 6.3):
//   [local header 30 B + name + extra][data] ... [central directory entries] [ZIP64 end record +
//   locator (optional)] [end of central directory 22 B + comment <= 64 KiB]
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "io/files.hpp"

namespace sinklab::io {

struct ZipEntry {
  std::string name;
  uint64_t offset = 0;  // first data byte within the file
  uint64_t size = 0;    // data bytes (stored: compressed size == uncompressed size)
  uint32_t crc32 = 0;   // as the directory records it
};

class ZipReader {
 public:
  // `file` must outlive the reader; `path` names it in messages.
  ZipReader(const MappedFile& file, std::string path);

  const std::string& path() const { return path_; }
  const std::vector<ZipEntry>& entries() const { return entries_; }
  // nullptr when absent.
  const ZipEntry* find(const std::string& name) const;
  // "<path>: no entry 'name' in the zip archive".
  const ZipEntry& at(const std::string& name) const;
  std::string_view bytes(const ZipEntry& e) const;
  // Compares the entry's CRC-32 with the directory's ("<path>: entry 'name' is corrupt (CRC-32 ...)").
  // Reads every byte: meant for small entries (the pickle), not gigabytes of weights.
  void check_crc(const ZipEntry& e) const;

 private:
  const MappedFile& file_;
  std::string path_;
  std::vector<ZipEntry> entries_;
  std::map<std::string, size_t> by_name_;
};

// CRC-32 (ISO-HDLC, the one zip and zlib use) of n bytes.
uint32_t crc32(const void* data, size_t n, uint32_t crc = 0);

}  // namespace sinklab::io
