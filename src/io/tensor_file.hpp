// What every memory-mapped weights file shares once its own header is parsed: named tensors (dtype,
// shape, strides) whose bytes lie in the mapping, views of them, and the release of their pages. The
// formats differ only in how the table of tensors is read: SafetensorsFile (a JSON header) and
// TorchFile (a zip archive with a pickled state dict).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.hpp"
#include "io/files.hpp"

namespace sinklab::io {

struct TensorEntry {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // in elements; row-major for every safetensors tensor
  // Bytes [begin, end) of the mapped file that hold the tensor's elements: element [0, .., 0] is at
  // begin; a strided tensor's span includes the gaps between its elements.
  uint64_t begin = 0, end = 0;
  int64_t numel() const;
  bool contiguous() const;  // row-major, no gaps: the span is exactly numel x dtype size
};

// The elements a tensor's span must hold: 1 + sum (shape[d] - 1) x strides[d] (0 when empty); nullopt
// when a dimension or stride is negative, the lengths differ, or the numbers overflow 64 bits (whatever
// a file claims).
std::optional<uint64_t> strided_extent(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides);
// Row-major strides of a shape.
std::vector<int64_t> row_major_strides(const std::vector<int64_t>& shape);

class MappedTensorFile {
 public:
  virtual ~MappedTensorFile() = default;
  MappedTensorFile(const MappedTensorFile&) = delete;
  MappedTensorFile& operator=(const MappedTensorFile&) = delete;

  const std::string& path() const { return path_; }
  bool contains(const std::string& name) const { return index_.count(name) != 0 || unreadable_.count(name) != 0; }
  // A missing tensor: "<path>: missing tensor 'name'"; one of a dtype sinklab does not read: a line
  // naming the dtype.
  const TensorEntry& entry(const std::string& name) const;
  std::vector<std::string> names() const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // A CPU view of the mapped bytes (strided where the file stores a strided tensor; read-only in
  // spirit: the mapping is private copy-on-write).
  Tensor view(const std::string& name) const;
  // Drops the resident pages of a tensor's bytes, or of bytes [begin, end) within its span
  // (MappedFile::release; the view stays valid and faults back in from the file when read again).
  void release(const std::string& name) const;
  void release(const std::string& name, uint64_t begin, uint64_t end) const;
  void release_all() const { file_.release(0, file_.size()); }

 protected:
  explicit MappedTensorFile(const std::string& path) : path_(path), file_(path) {}
  // Registers a tensor after checking what every format must hold: rank, dims >= 0, strides >= 0,
  // span in bounds and consistent with shape x strides x dtype.
  void add(TensorEntry e);
  // A tensor whose dtype sinklab does not read (an int64 buffer beside the weights): listed, but
  // entry() fails naming the dtype.
  void add_unreadable(const std::string& name, const std::string& dtype) { unreadable_[name] = dtype; }

  std::string path_;
  MappedFile file_;
  std::map<std::string, std::string> metadata_;

 private:
  std::map<std::string, TensorEntry> index_;
  std::map<std::string, std::string> unreadable_;  // name -> dtype as the file spells it
};

}  // namespace sinklab::io
