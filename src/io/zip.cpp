#include "io/zip.hpp"

#include <algorithm>
#include <array>
#include <cstring>

#include "core/error.hpp"

namespace sinklab::io {

namespace {

constexpr uint32_t kLocalSig = 0x04034b50, kCentralSig = 0x02014b50, kEndSig = 0x06054b50;
constexpr uint32_t kZip64EndSig = 0x06064b50, kZip64LocatorSig = 0x07064b50;
constexpr uint64_t kEndBytes = 22, kZip64EndBytes = 56, kZip64LocatorBytes = 20, kCentralBytes = 46,
                   kLocalBytes = 30;

// Little-endian reads from a span whose bounds the caller has checked.
uint16_t u16(const unsigned char* p) { return uint16_t(p[0] | (p[1] << 8)); }
uint32_t u32(const unsigned char* p) { return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24); }
uint64_t u64(const unsigned char* p) { return uint64_t(u32(p)) | (uint64_t(u32(p + 4)) << 32); }

// [offset, offset + n) within a file of `size` bytes, without overflow.
bool within(uint64_t offset, uint64_t n, uint64_t size) { return offset <= size && n <= size - offset; }

}  // namespace

uint32_t crc32(const void* data, size_t n, uint32_t crc) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

ZipReader::ZipReader(const MappedFile& file, std::string path) : file_(file), path_(std::move(path)) {
  const unsigned char* base = file_.data();
  const uint64_t size = file_.size();
  const char* p = path_.c_str();

  // The end-of-central-directory record: the last signature within 22 + 65535 bytes of the end.
  SL_CHECK(size >= kEndBytes, "%s: not a zip archive (%llu bytes; truncated?)", p, (unsigned long long)size);
  uint64_t end = size - kEndBytes;
  const uint64_t lowest = size > kEndBytes + 0xFFFF ? size - kEndBytes - 0xFFFF : 0;
  while (u32(base + end) != kEndSig) {
    SL_CHECK(end > lowest, "%s: not a zip archive (no end-of-central-directory record; truncated?)", p);
    --end;
  }
  SL_CHECK(u16(base + end + 4) == 0 && u16(base + end + 6) == 0,
           "%s: a multi-disk (spanned) zip archive, which sinklab does not read", p);
  uint64_t count = u16(base + end + 10);
  uint64_t dir_size = u32(base + end + 12);
  uint64_t dir_offset = u32(base + end + 16);

  // ZIP64: a locator just before the record points at the ZIP64 end record with the 64-bit values.
  if (end >= kZip64LocatorBytes && u32(base + end - kZip64LocatorBytes) == kZip64LocatorSig) {
    const unsigned char* loc = base + end - kZip64LocatorBytes;
    const uint64_t rec = u64(loc + 8);
    SL_CHECK(within(rec, kZip64EndBytes, end - kZip64LocatorBytes) && u32(base + rec) == kZip64EndSig,
             "%s: corrupt zip archive (ZIP64 end record at byte %llu is outside the file or has no signature)", p,
             (unsigned long long)rec);
    count = u64(base + rec + 32);
    dir_size = u64(base + rec + 40);
    dir_offset = u64(base + rec + 48);
  }
  SL_CHECK(within(dir_offset, dir_size, end), "%s: corrupt zip archive (central directory [%llu, +%llu) outside "
           "the %llu bytes before its end record; truncated?)", p, (unsigned long long)dir_offset,
           (unsigned long long)dir_size, (unsigned long long)end);
  SL_CHECK(count <= dir_size / kCentralBytes, "%s: corrupt zip archive (%llu entries cannot fit %llu directory bytes)",
           p, (unsigned long long)count, (unsigned long long)dir_size);

  uint64_t at = dir_offset;
  const uint64_t dir_end = dir_offset + dir_size;
  entries_.reserve(size_t(count));
  for (uint64_t i = 0; i < count; ++i) {
    SL_CHECK(within(at, kCentralBytes, dir_end) && u32(base + at) == kCentralSig,
             "%s: corrupt zip archive (directory entry %llu at byte %llu)", p, (unsigned long long)i,
             (unsigned long long)at);
    const unsigned char* c = base + at;
    const uint16_t flags = u16(c + 8), method = u16(c + 10);
    const uint64_t name_len = u16(c + 28), extra_len = u16(c + 30), comment_len = u16(c + 32);
    SL_CHECK(within(at + kCentralBytes, name_len + extra_len + comment_len, dir_end),
             "%s: corrupt zip archive (directory entry %llu runs past the directory)", p, (unsigned long long)i);
    ZipEntry e;
    e.name.assign(reinterpret_cast<const char*>(c + kCentralBytes), name_len);
    e.crc32 = u32(c + 16);
    uint64_t compressed = u32(c + 20), uncompressed = u32(c + 24), local = u32(c + 42);
    // ZIP64 extra field (id 1): the 64-bit values of exactly the fields that read 0xFFFFFFFF, in order.
    const unsigned char* x = c + kCentralBytes + name_len;
    for (uint64_t k = 0; k + 4 <= extra_len;) {
      const uint16_t id = u16(x + k), len = u16(x + k + 2);
      SL_CHECK(k + 4 + len <= extra_len, "%s: corrupt zip archive (extra field of '%s')", p, e.name.c_str());
      if (id == 1) {
        uint64_t off = k + 4;
        for (uint64_t* v : {&uncompressed, &compressed, &local}) {
          if (*v != 0xFFFFFFFFu) continue;
          SL_CHECK(off + 8 <= k + 4 + len, "%s: corrupt zip archive (short ZIP64 field of '%s')", p, e.name.c_str());
          *v = u64(x + off);
          off += 8;
        }
      }
      k += 4 + len;
    }
    SL_CHECK((flags & 1) == 0, "%s: entry '%s' is encrypted", p, e.name.c_str());
    SL_CHECK(method == 0 && compressed == uncompressed,
             "%s: entry '%s' is compressed (method %u); sinklab reads stored entries, as torch.save writes them", p,
             e.name.c_str(), unsigned(method));
    // The data follows the local header, whose name and extra lengths may differ from the directory's.
    SL_CHECK(within(local, kLocalBytes, dir_offset) && u32(base + local) == kLocalSig,
             "%s: corrupt zip archive (local header of '%s' at byte %llu)", p, e.name.c_str(),
             (unsigned long long)local);
    e.offset = local + kLocalBytes + u16(base + local + 26) + u16(base + local + 28);
    e.size = uncompressed;
    SL_CHECK(within(e.offset, e.size, dir_offset), "%s: entry '%s' (bytes [%llu, +%llu)) runs past the data "
             "(truncated file?)", p, e.name.c_str(), (unsigned long long)e.offset, (unsigned long long)e.size);
    SL_CHECK(by_name_.emplace(e.name, entries_.size()).second, "%s: entry '%s' appears twice", p, e.name.c_str());
    entries_.push_back(std::move(e));
    at += kCentralBytes + name_len + extra_len + comment_len;
  }
}

const ZipEntry* ZipReader::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &entries_[it->second];
}

const ZipEntry& ZipReader::at(const std::string& name) const {
  const ZipEntry* e = find(name);
  SL_CHECK(e != nullptr, "%s: no entry '%s' in the zip archive", path_.c_str(), name.c_str());
  return *e;
}

std::string_view ZipReader::bytes(const ZipEntry& e) const {
  return {reinterpret_cast<const char*>(file_.data() + e.offset), size_t(e.size)};
}

void ZipReader::check_crc(const ZipEntry& e) const {
  const uint32_t got = crc32(file_.data() + e.offset, size_t(e.size));
  SL_CHECK(got == e.crc32, "%s: entry '%s' is corrupt (CRC-32 %08x, the directory says %08x)", path_.c_str(),
           e.name.c_str(), got, e.crc32);
}

}  // namespace sinklab::io
