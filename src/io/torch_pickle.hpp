// A restricted unpickler for the data.pkl of a torch.save'd state dict. It is a data-only interpreter:
// it builds values (numbers, strings, tuples, lists, dicts) and knows the meaning of exactly the
// globals a state dict needs, without ever calling anything:
//
//   collections.OrderedDict                       -> an (ordered) dict
//   torch._utils._rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad,
//                                   backward_hooks[, metadata])   -> a tensor record
//   torch._utils._rebuild_parameter(tensor, requires_grad, backward_hooks) -> the same record
//   torch.FloatStorage, HalfStorage, BFloat16Storage, DoubleStorage, IntStorage, LongStorage, ... -> a
//                                                    storage dtype, inside a persistent id
//   persistent ids ('storage', torch.<T>Storage, key, location, numel) -> the storage record
//                                                    "<archive>/data/<key>"
//
// Any other global (os.system, builtins.eval, a model class, ...) is refused when its GLOBAL opcode is
// read, with one line naming the file and the global; so is any opcode outside the protocol 2-4
// subset torch.save emits (NEWOBJ, INST, OBJ, PERSID, EXT*, ...). Every read is bounds-checked.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sinklab::io {

struct PickledTensor {
  std::string name;           // the state dict key
  std::string storage_key;    // the record "<archive>/data/<storage_key>"
  std::string dtype;          // torch's spelling: float32, float16, bfloat16, float64, int32, int64, ...
  uint64_t storage_numel = 0; // elements of the whole storage (as its persistent id says)
  int64_t storage_offset = 0; // in elements
  std::vector<int64_t> shape, strides;
};

// The tensors of a state dict pickle ({name: tensor}, a dict or OrderedDict at the top), in the file's
// order. `where` names the pickle in messages ("<file>: data.pkl").
std::vector<PickledTensor> read_torch_state_dict(std::string_view pickle, const std::string& where);

// Element size of a torch dtype name, 0 for an unknown one.
int torch_dtype_size(const std::string& dtype);

}  // namespace sinklab::io
