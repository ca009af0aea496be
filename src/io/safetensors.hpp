// safetensors: 8-byte little-endian header length N, N bytes of JSON ({"name": {"dtype", "shape",
// "data_offsets": [begin, end]}, "__metadata__": {str: str}}), then the data. Used for checkpoints,
// Hugging Face weights and the test golden files.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.hpp"
#include "io/files.hpp"

namespace sinklab::io {

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte span within the data section
};

// A memory-mapped safetensors file. Opening validates the header length, the JSON, every dtype,
// that shape x dtype size == byte span, and that the spans are in bounds, contiguous and
// non-overlapping; any violation throws sinklab::Error naming the file and the tensor.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  const SafetensorsEntry& entry(const std::string& name) const;
  std::vector<std::string> names() const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // A CPU view of the mapped bytes (read-only in spirit; the mapping is private copy-on-write).
  Tensor view(const std::string& name) const;
  // Drops the resident pages of a tensor's bytes, or of bytes [begin, end) within its span
  // (MappedFile::release; the view stays valid and faults back in from the file when read again).
  void release(const std::string& name) const;
  void release(const std::string& name, uint64_t begin, uint64_t end) const;
  void release_all() const { file_.release(0, file_.size()); }

 private:
  std::string path_;
  MappedFile file_;
  const unsigned char* data_ = nullptr;
  std::map<std::string, SafetensorsEntry> index_;
  std::map<std::string, std::string> metadata_;
};

// Writes tensors (CPU, contiguous) atomically: a temporary file beside `path`, fsync, rename.
struct NamedTensor {
  std::string name;
  Tensor tensor;
};
void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// safetensors dtype strings ("F32", "BF16", ...) <-> DType.
DType safetensors_dtype(const std::string& s, const std::string& context);
const char* safetensors_dtype_name(DType dt);

}  // namespace sinklab::io
