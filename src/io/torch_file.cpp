#include "io/torch_file.hpp"

#include <algorithm>
#include <map>

#include "core/error.hpp"
#include "io/torch_pickle.hpp"
#include "io/zip.hpp"

namespace sinklab::io {

namespace {

// torch dtype -> the DType sinklab reads, or false.
bool readable_dtype(const std::string& torch_dtype, DType* out) {
  static const std::map<std::string, DType> kDtypes = {{"float32", DType::f32}, {"float64", DType::f64},
                                                       {"float16", DType::f16}, {"bfloat16", DType::bf16},
                                                       {"int32", DType::i32}};
  auto it = kDtypes.find(torch_dtype);
  if (it == kDtypes.end()) return false;
  *out = it->second;
  return true;
}

}  // namespace

TorchFile::TorchFile(const std::string& path) : MappedTensorFile(path) {
  const char* p = path.c_str();
  // torch.save before 1.6 wrote a bare pickle stream (magic number first): not a zip archive.
  SL_CHECK(!(file_.size() >= 2 && file_.data()[0] == 0x80 && file_.data()[1] == 0x02),
           "%s: a legacy (pre-1.6, non-zip) torch.save file, which sinklab does not read (re-save it with torch >= 1.6)", p);
  ZipReader zip(file_, path);

  // The archive's one top-level folder ("archive/", "pytorch_model/", ...) holds data.pkl.
  std::string prefix;
  for (const ZipEntry& e : zip.entries()) {
    const size_t slash = e.name.find('/');
    if (slash == std::string::npos || e.name.compare(slash, std::string::npos, "/data.pkl") != 0) continue;
    SL_CHECK(prefix.empty(), "%s: two data.pkl in the zip archive ('%s/' and '%s')", p, prefix.c_str(), e.name.c_str());
    prefix = e.name.substr(0, slash + 1);
  }
  SL_CHECK(!prefix.empty(), "%s: no <archive>/data.pkl in the zip archive (not a torch.save file?)", p);
  if (const ZipEntry* order = zip.find(prefix + "byteorder")) {
    SL_CHECK(zip.bytes(*order) == "little", "%s: byte order '%.*s' (sinklab reads little-endian checkpoints)", p,
             int(std::min<uint64_t>(order->size, 16)), zip.bytes(*order).data());
  }
  const ZipEntry& pkl = zip.at(prefix + "data.pkl");
  zip.check_crc(pkl);
  const std::vector<PickledTensor> tensors = read_torch_state_dict(zip.bytes(pkl), path + ": " + pkl.name);

  std::map<std::string, std::string> storage_dtype;  // key -> dtype: one storage, one dtype
  for (const PickledTensor& t : tensors) {
    const std::string context = path + ": tensor '" + t.name + "'";
    auto [it, fresh] = storage_dtype.emplace(t.storage_key, t.dtype);
    SL_CHECK(fresh || it->second == t.dtype, "%s: storage '%s' is %s here and %s elsewhere", context.c_str(),
             t.storage_key.c_str(), t.dtype.c_str(), it->second.c_str());
    const ZipEntry& record = zip.at(prefix + "data/" + t.storage_key);
    const uint64_t esize = uint64_t(torch_dtype_size(t.dtype));
    SL_CHECK(t.storage_numel <= record.size / esize && t.storage_numel * esize == record.size,
             "%s: storage record '%s' holds %llu bytes, its %llu %s elements need %llu", context.c_str(),
             record.name.c_str(), (unsigned long long)record.size, (unsigned long long)t.storage_numel,
             t.dtype.c_str(), (unsigned long long)(t.storage_numel * esize));
    DType dtype;
    if (!readable_dtype(t.dtype, &dtype)) {
      add_unreadable(t.name, t.dtype);
      continue;
    }
    TensorEntry e;
    e.name = t.name;
    e.dtype = dtype;
    e.shape = t.shape;
    e.strides = t.strides;
    SL_CHECK(t.storage_offset >= 0 && uint64_t(t.storage_offset) <= t.storage_numel,
             "%s: offset %lld outside its storage of %llu elements", context.c_str(), (long long)t.storage_offset,
             (unsigned long long)t.storage_numel);
    // The view must lie within its storage (MappedTensorFile::add checks the span against the file; here
    // against the record).
    const std::optional<uint64_t> extent = strided_extent(t.shape, t.strides);
    SL_CHECK(int(t.shape.size()) <= kMaxDims && extent, "%s: %zu dimensions with sizes or strides out of range",
             context.c_str(), t.shape.size());
    SL_CHECK(*extent <= t.storage_numel - uint64_t(t.storage_offset),
             "%s: view [offset %lld, +%llu elements) outside its storage '%s' of %llu elements", context.c_str(),
             (long long)t.storage_offset, (unsigned long long)*extent, t.storage_key.c_str(),
             (unsigned long long)t.storage_numel);
    e.begin = record.offset + uint64_t(t.storage_offset) * esize;
    e.end = e.begin + *extent * esize;
    add(std::move(e));
  }
  metadata_["format"] = "pt";
}

}  // namespace sinklab::io
