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
#include "io/tensor_file.hpp"

namespace sinklab::io {

// A memory-mapped safetensors file. Opening validates the header length, the JSON, every dtype,
// that shape x dtype size == byte span, and that the spans are in bounds, contiguous and
// non-overlapping; any violation throws sinklab::Error naming the file and the tensor. The tensors'
// spans (TensorEntry::begin/end) are offsets into the whole file, every tensor row-major.
class SafetensorsFile : public MappedTensorFile {
 public:
  explicit SafetensorsFile(const std::string& path);
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
