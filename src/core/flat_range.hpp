// A range [begin, end) of elements of a flat buffer: the model's parameters and gradients live in one
// such buffer each (model/transformer.hpp), which ZeRO-1 shards (train/optimizer.hpp) and data-parallel
// training reduces in parts (train/grad_sync.hpp).
#pragma once

#include <cstdint>

namespace sinklab {

struct FlatRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const FlatRange&) const = default;
};

}  // namespace sinklab
