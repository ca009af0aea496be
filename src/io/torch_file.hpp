// A PyTorch checkpoint (torch.save since 1.6, what transformers writes as pytorch_model*.bin) as named
// tensors memory-mapped in place, like a safetensors file: the zip archive (io/zip.hpp) holds
// "<archive>/data.pkl", a pickled {name: tensor} read by the restricted unpickler (io/torch_pickle.hpp:
// nothing from the file is ever run), and one stored record "<archive>/data/<key>" per storage.
//
// A tensor is a view of a storage: dtype, shape, strides and an element offset. Views on one storage
// (tied weights: OPT's lm_head.weight and decoder.embed_tokens.weight) are entries over the same bytes;
// a strided (non-contiguous) tensor is an entry with its strides, read in place. Checked when opened:
// the archive's directory and offsets, the byte order, each storage record's size against its element
// count, and each view within its storage. Tensors of a dtype sinklab does not read (int64 buffers) are
// listed but fail when used, naming the dtype.
#pragma once

#include <string>

#include "io/tensor_file.hpp"

namespace sinklab::io {

class TorchFile : public MappedTensorFile {
 public:
  explicit TorchFile(const std::string& path);
};

}  // namespace sinklab::io
