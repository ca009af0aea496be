#include "io/tensor_file.hpp"

#include "core/error.hpp"

namespace sinklab::io {

int64_t TensorEntry::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

bool TensorEntry::contiguous() const { return strides == row_major_strides(shape); }

std::vector<int64_t> row_major_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size());
  int64_t step = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = step;
    step *= shape[i];
  }
  return s;
}

std::optional<uint64_t> strided_extent(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides) {
  if (shape.size() != strides.size()) return std::nullopt;
  uint64_t last = 0;
  bool empty = false;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0 || strides[d] < 0) return std::nullopt;
    uint64_t reach = 0;
    if (shape[d] == 0) empty = true;
    else if (__builtin_mul_overflow(uint64_t(shape[d] - 1), uint64_t(strides[d]), &reach) ||
             __builtin_add_overflow(last, reach, &last))
      return std::nullopt;
  }
  if (empty) return uint64_t(0);
  if (last == UINT64_MAX) return std::nullopt;
  return last + 1;
}

void MappedTensorFile::add(TensorEntry e) {
  const std::string context = path_ + ": tensor '" + e.name + "'";
  SL_CHECK(int(e.shape.size()) <= kMaxDims, "%s: rank %zu exceeds %d", context.c_str(), e.shape.size(), kMaxDims);
  const std::optional<uint64_t> extent = strided_extent(e.shape, e.strides);
  SL_CHECK(extent && *extent < (uint64_t(1) << 60), "%s: negative or overflowing shape or strides", context.c_str());
  const uint64_t esize = uint64_t(dtype_size(e.dtype));
  SL_CHECK(e.begin <= e.end && e.end <= file_.size(),
           "%s: byte span [%llu, %llu) outside the file's %zu bytes (truncated file?)", context.c_str(),
           (unsigned long long)e.begin, (unsigned long long)e.end, file_.size());
  SL_CHECK(*extent * esize == e.end - e.begin, "%s: shape and strides cover %llu bytes, the span is %llu",
           context.c_str(), (unsigned long long)(*extent * esize), (unsigned long long)(e.end - e.begin));
  const std::string name = e.name;
  index_[name] = std::move(e);
}

const TensorEntry& MappedTensorFile::entry(const std::string& name) const {
  auto it = index_.find(name);
  if (it != index_.end()) return it->second;
  auto bad = unreadable_.find(name);
  SL_CHECK(bad == unreadable_.end(), "%s: tensor '%s' has dtype %s (sinklab reads float32, float64, bfloat16, "
           "float16, int32)", path_.c_str(), name.c_str(), bad->second.c_str());
  SL_FAIL("%s: missing tensor '%s'", path_.c_str(), name.c_str());
}

std::vector<std::string> MappedTensorFile::names() const {
  std::vector<std::string> out;
  for (const auto& kv : index_) out.push_back(kv.first);
  for (const auto& kv : unreadable_) out.push_back(kv.first);
  return out;
}

Tensor MappedTensorFile::view(const std::string& name) const {
  const TensorEntry& e = entry(name);
  Tensor t = Tensor::contiguous_view(const_cast<unsigned char*>(file_.data() + e.begin), e.dtype, e.shape.data(),
                                     int(e.shape.size()), Device::cpu());
  for (size_t d = 0; d < e.strides.size(); ++d) t.stride[d] = e.strides[d];
  return t;
}

void MappedTensorFile::release(const std::string& name) const {
  const TensorEntry& e = entry(name);
  release(name, 0, e.end - e.begin);
}

void MappedTensorFile::release(const std::string& name, uint64_t begin, uint64_t end) const {
  const TensorEntry& e = entry(name);
  SL_CHECK(begin <= end && end <= e.end - e.begin, "%s: release of bytes [%llu, %llu) outside tensor '%s'",
           path_.c_str(), (unsigned long long)begin, (unsigned long long)end, name.c_str());
  file_.release(e.begin + begin, end - begin);
}

}  // namespace sinklab::io
