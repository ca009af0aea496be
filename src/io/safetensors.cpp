#include "io/safetensors.hpp"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace sinklab::io {

using nlohmann::json;

DType safetensors_dtype(const std::string& s, const std::string& context) {
  if (s == "F32") return DType::f32;
  if (s == "F64") return DType::f64;
  if (s == "BF16") return DType::bf16;
  if (s == "F16") return DType::f16;
  if (s == "I32") return DType::i32;
  SL_FAIL("%s: unsupported dtype \"%s\" (sinklab reads F32, F64, BF16, F16, I32)", context.c_str(), s.c_str());
}

const char* safetensors_dtype_name(DType dt) {
  switch (dt) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
    case DType::i32: return "I32";
  }
  return "?";
}

SafetensorsFile::SafetensorsFile(const std::string& path) : MappedTensorFile(path) {
  const unsigned char* p = file_.data();
  const size_t size = file_.size();
  SL_CHECK(size >= 8, "%s: not a safetensors file (%zu bytes)", path.c_str(), size);
  uint64_t header_len;
  std::memcpy(&header_len, p, 8);
  SL_CHECK(header_len <= size - 8 && header_len <= (100u << 20),
           "%s: safetensors header length %llu exceeds the file (%zu bytes): truncated or not safetensors",
           path.c_str(), (unsigned long long)header_len, size);
  json header;
  try {
    header = json::parse(p + 8, p + 8 + header_len);
  } catch (const json::exception& e) {
    SL_FAIL("%s: malformed safetensors header JSON: %s", path.c_str(), e.what());
  }
  SL_CHECK(header.is_object(), "%s: safetensors header is not a JSON object", path.c_str());
  const uint64_t data_begin = 8 + header_len;
  const uint64_t data_bytes = size - 8 - header_len;

  std::vector<TensorEntry> spans;  // begin/end within the data section
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      SL_CHECK(it->is_object(), "%s: __metadata__ is not an object", path.c_str());
      for (auto m = it->begin(); m != it->end(); ++m)
        metadata_[m.key()] = m->is_string() ? m->get<std::string>() : m->dump();
      continue;
    }
    const std::string context = path + ": tensor '" + it.key() + "'";
    TensorEntry e;
    e.name = it.key();
    try {
      e.dtype = safetensors_dtype(it->at("dtype").get<std::string>(), context);
      e.shape = it->at("shape").get<std::vector<int64_t>>();
      auto offsets = it->at("data_offsets").get<std::vector<uint64_t>>();
      SL_CHECK(offsets.size() == 2, "%s: data_offsets must have two entries", context.c_str());
      e.begin = offsets[0];
      e.end = offsets[1];
    } catch (const json::exception& ex) {
      SL_FAIL("%s: malformed entry: %s", context.c_str(), ex.what());
    }
    uint64_t numel = 1;
    for (int64_t d : e.shape) {
      SL_CHECK(d >= 0, "%s: negative dimension", context.c_str());
      numel *= uint64_t(d);
    }
    SL_CHECK(e.begin <= e.end && e.end <= data_bytes,
             "%s: byte span [%llu, %llu) outside the %llu data bytes (truncated file?)",
             context.c_str(), (unsigned long long)e.begin, (unsigned long long)e.end,
             (unsigned long long)data_bytes);
    SL_CHECK(numel * dtype_size(e.dtype) == e.end - e.begin, "%s: shape x dtype is %llu bytes, span is %llu",
             context.c_str(), (unsigned long long)(numel * dtype_size(e.dtype)),
             (unsigned long long)(e.end - e.begin));
    SL_CHECK(int(e.shape.size()) <= kMaxDims, "%s: rank %zu exceeds %d", context.c_str(), e.shape.size(), kMaxDims);
    e.strides = row_major_strides(e.shape);
    spans.push_back(e);
  }
  // The spans must tile the data section: sorted, contiguous, no gaps or overlaps.
  std::sort(spans.begin(), spans.end(), [](const auto& a, const auto& b) { return a.begin < b.begin; });
  uint64_t cursor = 0;
  for (const auto& e : spans) {
    SL_CHECK(e.begin == cursor, "%s: tensor '%s' starts at byte %llu, expected %llu (gap or overlap)",
             path.c_str(), e.name.c_str(), (unsigned long long)e.begin, (unsigned long long)cursor);
    cursor = e.end;
  }
  SL_CHECK(cursor == data_bytes, "%s: %llu data bytes but the tensors cover %llu (truncated or padded)",
           path.c_str(), (unsigned long long)data_bytes, (unsigned long long)cursor);
  for (TensorEntry& e : spans) {
    e.begin += data_begin;
    e.end += data_begin;
    add(std::move(e));
  }
}

void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& nt : tensors) {
    SL_CHECK(nt.tensor.device.is_cpu() && nt.tensor.is_contiguous(),
             "%s: tensor '%s' must be a contiguous CPU tensor to be written", path.c_str(), nt.name.c_str());
    std::vector<int64_t> shape(nt.tensor.shape.begin(), nt.tensor.shape.begin() + nt.tensor.ndim);
    header[nt.name] = {{"dtype", safetensors_dtype_name(nt.tensor.dtype)},
                       {"shape", shape},
                       {"data_offsets", {offset, offset + nt.tensor.nbytes()}}};
    offset += nt.tensor.nbytes();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keep the data section 8-byte aligned
  uint64_t header_len = text.size();
  AtomicFile file(path);
  file.write(&header_len, 8);
  file.write(text.data(), text.size());
  for (const auto& nt : tensors) file.write(nt.tensor.data, nt.tensor.nbytes());
  file.commit();
}

}  // namespace sinklab::io
