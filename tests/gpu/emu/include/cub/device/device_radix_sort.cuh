// Shadow of CUB's device radix sort for the CPU emulation: SortPairs as CUB documents it (a stable sort of
// (key, value) pairs by the key bits [begin_bit, end_bit); bits outside the range do not order; keys and
// values move whole), done on the host with std::stable_sort. Its temporary storage is the stand-in's own
// size (CUB's differs); the buffers are checked to be device memory of the sizes the call implies.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

#include "cuda_emu.hpp"

namespace cub {

struct DeviceRadixSort {
  template <class K, class V, class NumItemsT>
  static cudaError_t SortPairs(void* d_temp_storage, size_t& temp_storage_bytes, const K* d_keys_in, K* d_keys_out,
                               const V* d_values_in, V* d_values_out, NumItemsT num_items, int begin_bit = 0,
                               int end_bit = int(sizeof(K) * 8), cudaStream_t = nullptr) {
    static_assert(std::is_unsigned_v<K>, "the stand-in sorts unsigned keys only");
    if (num_items < 0 || begin_bit < 0 || end_bit > int(sizeof(K) * 8) || begin_bit > end_bit) return cudaErrorInvalidValue;
    const size_t n = size_t(num_items);
    const size_t need = 2 * n * (sizeof(K) + sizeof(V)) + 1024;
    if (!d_temp_storage) {
      temp_storage_bytes = need;
      return cudaSuccess;
    }
    if (temp_storage_bytes < need) return cudaErrorInvalidValue;
    emu::require_device_range(d_temp_storage, temp_storage_bytes, "cub::DeviceRadixSort::SortPairs temp storage");
    emu::require_device_range(d_keys_in, n * sizeof(K), "cub::DeviceRadixSort::SortPairs keys in");
    emu::require_device_range(d_keys_out, n * sizeof(K), "cub::DeviceRadixSort::SortPairs keys out");
    emu::require_device_range(d_values_in, n * sizeof(V), "cub::DeviceRadixSort::SortPairs values in");
    emu::require_device_range(d_values_out, n * sizeof(V), "cub::DeviceRadixSort::SortPairs values out");
    emu::count_library_call();  // the step ledger's count (cuda_emu.hpp)
    if (emu::count_only()) return cudaSuccess;
    const int bits = end_bit - begin_bit;
    const K mask = bits >= int(sizeof(K) * 8) ? K(~K(0)) : K((K(1) << bits) - 1);
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), size_t(0));
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return K((d_keys_in[a] >> begin_bit) & mask) < K((d_keys_in[b] >> begin_bit) & mask);
    });
    std::vector<K> keys(n);
    std::vector<V> values(n);
    for (size_t i = 0; i < n; ++i) {
      keys[i] = d_keys_in[order[i]];
      values[i] = d_values_in[order[i]];
    }
    std::copy(keys.begin(), keys.end(), d_keys_out);
    std::copy(values.begin(), values.end(), d_values_out);
    return cudaSuccess;
  }
};

}  // namespace cub
