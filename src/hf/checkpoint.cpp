#include "hf/checkpoint.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "backend/ops.hpp"
#include "core/error.hpp"

namespace sinklab::hf {

namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

Json read_json_file(const std::string& path) {
  std::ifstream in(path);
  SL_CHECK(in.good(), "%s: cannot be read (missing?)", path.c_str());
  std::stringstream text;
  text << in.rdbuf();
  try {
    return Json::parse(text.str());
  } catch (const Json::exception& e) {
    // nlohmann's messages are one line; keep only that.
    SL_FAIL("%s: malformed JSON: %s", path.c_str(), e.what());
  }
}

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

std::string mib(int64_t bytes) { return strfmt("%.1f MiB", double(bytes) / (1024.0 * 1024.0)); }

// ---- HfConfig --------------------------------------------------------------------------------------

HfConfig HfConfig::read(const std::string& path) {
  Json j = read_json_file(path);
  SL_CHECK(j.is_object(), "%s: not a JSON object", path.c_str());
  return HfConfig(std::move(j), path);
}

const Json* HfConfig::find(const std::string& key) const {
  auto it = json_.find(key);
  if (it == json_.end() || it->is_null()) return nullptr;
  return &*it;
}

bool HfConfig::has(const std::string& key) const { return find(key) != nullptr; }

int64_t HfConfig::get_int(const std::string& key) const {
  const Json* v = find(key);
  SL_CHECK(v != nullptr, "%s: missing field '%s'", path_.c_str(), key.c_str());
  // 4.0 is accepted as 4 (some configs write integers as floats); 4.5 is not, nor anything outside int64
  // (the float is range-checked before it is converted: tests/fuzz/fuzz_hf_config found 4e104).
  bool ok = false;
  int64_t value = 0;
  if (v->is_number_unsigned()) {
    ok = v->get<uint64_t>() <= uint64_t(std::numeric_limits<int64_t>::max());
    value = ok ? int64_t(v->get<uint64_t>()) : 0;
  } else if (v->is_number_integer()) {
    ok = true;
    value = v->get<int64_t>();
  } else if (v->is_number_float()) {
    const double d = v->get<double>();
    ok = std::fabs(d) < 0x1p63 && d == std::trunc(d);  // false for NaN and infinities too
    value = ok ? int64_t(d) : 0;
  }
  SL_CHECK(ok, "%s: field '%s' must be an integer, got %s", path_.c_str(), key.c_str(), v->dump().c_str());
  return value;
}

double HfConfig::get_double(const std::string& key) const {
  const Json* v = find(key);
  SL_CHECK(v != nullptr, "%s: missing field '%s'", path_.c_str(), key.c_str());
  SL_CHECK(v->is_number(), "%s: field '%s' must be a number, got %s", path_.c_str(), key.c_str(), v->dump().c_str());
  return v->get<double>();
}

std::string HfConfig::get_string(const std::string& key) const {
  const Json* v = find(key);
  SL_CHECK(v != nullptr, "%s: missing field '%s'", path_.c_str(), key.c_str());
  SL_CHECK(v->is_string(), "%s: field '%s' must be a string, got %s", path_.c_str(), key.c_str(), v->dump().c_str());
  return v->get<std::string>();
}

int64_t HfConfig::get_int(const std::string& key, int64_t fallback) const {
  return has(key) ? get_int(key) : fallback;
}

double HfConfig::get_double(const std::string& key, double fallback) const {
  return has(key) ? get_double(key) : fallback;
}

bool HfConfig::get_bool(const std::string& key, bool fallback) const {
  const Json* v = find(key);
  if (v == nullptr) return fallback;
  SL_CHECK(v->is_boolean(), "%s: field '%s' must be true or false, got %s", path_.c_str(), key.c_str(),
           v->dump().c_str());
  return v->get<bool>();
}

std::string HfConfig::get_string(const std::string& key, const std::string& fallback) const {
  return has(key) ? get_string(key) : fallback;
}

int64_t HfConfig::get_int_any(std::initializer_list<const char*> keys) const {
  for (const char* k : keys)
    if (has(k)) return get_int(k);
  std::string names;
  for (const char* k : keys) names += std::string(names.empty() ? "'" : " or '") + k + "'";
  SL_FAIL("%s: missing field %s", path_.c_str(), names.c_str());
}

const Json& HfConfig::object(const std::string& key) const {
  static const Json null_value;
  const Json* v = find(key);
  if (v == nullptr) return null_value;
  SL_CHECK(v->is_object(), "%s: field '%s' must be an object, got %s", path_.c_str(), key.c_str(), v->dump().c_str());
  return *v;
}

void HfConfig::unsupported(const std::string& what) const { SL_FAIL("%s: unsupported %s", path_.c_str(), what.c_str()); }

// ---- Checkpoint ------------------------------------------------------------------------------------

Checkpoint::Checkpoint(const std::string& dir) : dir_(dir) {
  struct Layout {
    const char* file;
    bool index, torch;
  };
  constexpr Layout kLayouts[] = {{"model.safetensors", false, false},
                                 {"model.safetensors.index.json", true, false},
                                 {"pytorch_model.bin", false, true},
                                 {"pytorch_model.bin.index.json", true, true}};
  const Layout* layout = nullptr;
  std::error_code ec;  // a path the file system refuses counts as absent
  for (const Layout& l : kLayouts)
    if (fs::exists(fs::path(dir) / l.file, ec)) {
      layout = &l;
      break;
    }
  SL_CHECK(layout != nullptr, "%s: no model.safetensors, model.safetensors.index.json, pytorch_model.bin or "
           "pytorch_model.bin.index.json", dir.c_str());
  source_ = (fs::path(dir) / layout->file).string();
  auto open = [&](const std::string& path) -> std::unique_ptr<io::MappedTensorFile> {
    if (layout->torch) return std::make_unique<io::TorchFile>(path);
    return std::make_unique<io::SafetensorsFile>(path);
  };
  if (!layout->index) {
    files_.push_back(open(source_));
    for (const std::string& name : files_[0]->names()) where_[name] = 0;
    return;
  }
  const std::string& index = source_;
  Json j = read_json_file(index);
  SL_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(),
           "%s: no \"weight_map\" object", index.c_str());
  std::map<std::string, size_t> opened;  // shard file -> index into files_
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    SL_CHECK(it->is_string(), "%s: weight_map entry '%s' is not a file name", index.c_str(), it.key().c_str());
    const std::string shard = it->get<std::string>();
    SL_CHECK(!shard.empty() && shard.find('/') == std::string::npos && shard != "." && shard != "..",
             "%s: shard '%s' of tensor '%s' is not a file name in the model directory", index.c_str(), shard.c_str(),
             it.key().c_str());
    auto found = opened.find(shard);
    if (found == opened.end()) {
      const std::string path = (fs::path(dir) / shard).string();
      // The error_code form: a name the file system refuses (too long, say) is a missing shard, not an
      // uncaught filesystem_error (found by tests/fuzz/fuzz_safetensors_index).
      std::error_code ec;
      SL_CHECK(fs::is_regular_file(path, ec), "%s: shard %s (of tensor '%s') does not exist%s%s", index.c_str(),
               path.c_str(), it.key().c_str(), ec ? ": " : "", ec ? ec.message().c_str() : "");
      files_.push_back(open(path));
      found = opened.emplace(shard, files_.size() - 1).first;
    }
    SL_CHECK(files_[found->second]->contains(it.key()), "%s: missing tensor '%s' (listed in %s)",
             files_[found->second]->path().c_str(), it.key().c_str(), index.c_str());
    where_[it.key()] = found->second;
  }
}

const io::MappedTensorFile& Checkpoint::file(const std::string& name) const {
  auto it = where_.find(name);
  SL_CHECK(it != where_.end(), "%s: missing tensor '%s'", source_.c_str(), name.c_str());
  return *files_[it->second];
}

void Checkpoint::check_shape(const std::string& name, const std::vector<int64_t>& shape) const {
  const io::TensorEntry& e = entry(name);
  SL_CHECK(e.shape == shape, "%s: tensor '%s' has shape %s, expected %s", file(name).path().c_str(), name.c_str(),
           shape_text(e.shape).c_str(), shape_text(shape).c_str());
}

void Checkpoint::release_rows(const std::string& name, int64_t row0, int64_t rows) const {
  const io::TensorEntry& e = entry(name);
  const int64_t R = e.shape.empty() ? 1 : e.shape[0];
  SL_CHECK(row0 >= 0 && rows >= 0 && row0 + rows <= R, "%s: rows [%lld, %lld) of tensor '%s' %s",
           file(name).path().c_str(), (long long)row0, (long long)(row0 + rows), name.c_str(),
           shape_text(e.shape).c_str());
  if (!e.contiguous()) {
    file(name).release(name);
    return;
  }
  const uint64_t row_bytes = R > 0 ? (e.end - e.begin) / uint64_t(R) : 0;
  file(name).release(name, uint64_t(row0) * row_bytes, uint64_t(row0 + rows) * row_bytes);
}

void Checkpoint::release_all() const {
  for (const auto& f : files_) f->release_all();
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  for (const auto& kv : where_) out.push_back(kv.first);
  return out;
}

// ---- WeightSpec ------------------------------------------------------------------------------------

WeightSpec WeightSpec::one(std::string name, std::vector<int64_t> shape, bool optional) {
  WeightSpec s;
  s.parts.push_back({std::move(name), std::move(shape)});
  s.optional = optional;
  return s;
}

WeightSpec WeightSpec::stacked(std::vector<WeightPart> parts, bool optional) {
  WeightSpec s;
  s.parts = std::move(parts);
  s.optional = optional;
  return s;
}

WeightSpec WeightSpec::stacked_qkv(const std::string& attn, const std::string& what, int64_t q_rows, int64_t kv_rows,
                                   int64_t d_in) {
  const bool matrix = what == "weight";
  auto shape = [&](int64_t rows) { return matrix ? std::vector<int64_t>{rows, d_in} : std::vector<int64_t>{rows}; };
  return stacked({{attn + "q_proj." + what, shape(q_rows)},
                  {attn + "k_proj." + what, shape(kv_rows)},
                  {attn + "v_proj." + what, shape(kv_rows)}});
}

WeightSpec WeightSpec::conv1d(std::string name, int64_t in, int64_t out) {
  WeightSpec s = one(std::move(name), {in, out});
  s.transposed = true;
  return s;
}

WeightSpec WeightSpec::plus_one(std::string name, std::vector<int64_t> shape) {
  WeightSpec s = one(std::move(name), std::move(shape));
  s.offset = 1.0f;
  return s;
}

WeightSpec WeightSpec::absent() {
  WeightSpec s;
  s.optional = true;
  return s;
}

std::vector<int64_t> WeightSpec::shape() const {
  std::vector<int64_t> shape = parts.at(0).shape;
  if (transposed) return {shape.at(1), shape.at(0)};
  for (size_t i = 1; i < parts.size(); ++i) shape[0] += parts[i].shape.at(0);
  return shape;
}

// ---- WeightStore -----------------------------------------------------------------------------------

namespace {

// Stored bytes converted between two releases of mapped pages: what "the tensor being converted"
// costs in resident mapped memory, whatever the tensor's size.
constexpr int64_t kStageBytes = int64_t(1) << 20;

// Source rows [r0, r1) of a stored [R, C] tensor into f32: dst[r, c] (dst [R, C]) or, transposed,
// dst[c, r] (dst [C, R]; tiles of 32 columns keep the strided writes within a few cache lines).
template <class Load>
void convert_block(float* dst, int64_t R, int64_t C, int64_t r0, int64_t r1, bool transposed, Load load) {
  const int64_t work = (r1 - r0) * C;
  if (!transposed) {
#pragma omp parallel for schedule(static) if (work > (1 << 16))
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < C; ++c) dst[r * C + c] = load(r * C + c);
    return;
  }
  constexpr int64_t kTile = 32;
#pragma omp parallel for schedule(static) if (work > (1 << 16))
  for (int64_t c0 = 0; c0 < C; c0 += kTile)
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = c0; c < std::min(C, c0 + kTile); ++c) dst[c * R + r] = load(r * C + c);
}

// Element offset of flat index i (row i / C, column i % C of the [R, C] reading) in a strided tensor.
int64_t strided_offset(const Tensor& t, int64_t C, int64_t i) {
  if (t.ndim == 0) return 0;
  int64_t c = i % C, off = (i / C) * t.stride[0];
  for (int d = t.ndim - 1; d >= 1; --d) {
    off += (c % t.shape[d]) * t.stride[d];
    c /= t.shape[d];
  }
  return off;
}

// Elements of storage type T decoded to f32, read in place (strided: a PyTorch checkpoint's view).
template <class T, class Decode>
void convert_as(float* dst, const Tensor& src, int64_t R, int64_t C, int64_t r0, int64_t r1, bool transposed,
                Decode decode) {
  const T* p = src.ptr<T>();
  if (src.is_contiguous()) {
    convert_block(dst, R, C, r0, r1, transposed, [p, decode](int64_t i) { return decode(p[i]); });
    return;
  }
  convert_block(dst, R, C, r0, r1, transposed,
                [p, decode, &src, C](int64_t i) { return decode(p[strided_offset(src, C, i)]); });
}

// Source rows [r0, r1) of src (any float storage dtype, contiguous or strided, read as [R, C]).
void convert_rows(float* dst, const Tensor& src, int64_t R, int64_t C, int64_t r0, int64_t r1, bool transposed) {
  switch (src.dtype) {
    case DType::f32: return convert_as<float>(dst, src, R, C, r0, r1, transposed, [](float v) { return v; });
    case DType::bf16:
      return convert_as<uint16_t>(dst, src, R, C, r0, r1, transposed, [](uint16_t v) { return bf16_to_f32(v); });
    case DType::f16:
      return convert_as<uint16_t>(dst, src, R, C, r0, r1, transposed, [](uint16_t v) { return f16_to_f32(v); });
    case DType::f64: return convert_as<double>(dst, src, R, C, r0, r1, transposed, [](double v) { return float(v); });
    case DType::i32: SL_FAIL("integer tensor where a float weight was expected");
  }
}

}  // namespace

WeightStore::WeightStore(std::shared_ptr<const Checkpoint> ckpt, WeightPlan plan, const LoadOptions& options)
    : ckpt_(std::move(ckpt)), plan_(std::move(plan)), device_(options.device), max_memory_(options.max_memory_bytes) {
  const bool resident_if_fits = options.resident_if_fits;
  const Checkpoint& ck = *ckpt_;
  SL_CHECK(max_memory_ >= 0, "--max-memory must be >= 0 (0 = unbounded), got %lld", (long long)max_memory_);

  // Validate the whole table first; a spec is present when all its parts are (optional: none).
  int64_t largest_stored = 0;  // the largest block staged at once (kStageBytes, or less, or one row)
  int64_t params_in_specs = 0;  // elements of every present spec (the parameter count, with the embeddings)
  auto validate = [&](WeightSpec& spec) {
    size_t present = 0;
    for (const WeightPart& p : spec.parts) present += ck.has(p.name) ? 1 : 0;
    if (spec.optional && present == 0) {
      spec.parts.clear();  // marks "absent"
      return int64_t(0);
    }
    for (const WeightPart& p : spec.parts) {
      ck.check_shape(p.name, p.shape);  // missing tensor or wrong shape: one line naming the file
      const io::TensorEntry& e = ck.entry(p.name);
      SL_CHECK(e.dtype != DType::i32, "%s: tensor '%s' is %s, expected a float type", ck.file(p.name).path().c_str(),
               p.name.c_str(), dtype_name(e.dtype));
      const int64_t stored = int64_t(e.end - e.begin), rows = e.shape.empty() ? 1 : std::max<int64_t>(e.shape[0], 1);
      // A strided tensor's rows interleave in its span: all of it may be mapped while it is converted.
      largest_stored = std::max(largest_stored,
                                e.contiguous() ? std::min(stored, std::max(kStageBytes, stored / rows)) : stored);
    }
    params_in_specs += numel_of(spec.shape());
    return aligned_f32_bytes(numel_of(spec.shape()));
  };
  int64_t resident_bytes = 0;
  for (WeightSpec& s : plan_.resident) resident_bytes += validate(s);
  std::vector<int64_t> per_layer;
  for (auto& layer : plan_.layers) {
    int64_t bytes = 0;
    for (WeightSpec& s : layer) bytes += validate(s);
    per_layer.push_back(bytes);
    layer_bytes_ = std::max(layer_bytes_, bytes);
  }
  const io::TensorEntry& emb = ck.entry(plan_.embedding);
  SL_CHECK(emb.shape.size() == 2, "%s: tensor '%s' must be 2-D [vocab, dim], has %zu dimensions",
           ck.file(plan_.embedding).path().c_str(), plan_.embedding.c_str(), emb.shape.size());
  vocab_ = emb.shape[0];
  d_embed_ = emb.shape[1];
  const io::TensorEntry& hd = ck.entry(plan_.head);
  SL_CHECK(hd.shape.size() == 2 && hd.shape[0] == vocab_, "%s: tensor '%s' has shape %s, expected [%lld, dim]",
           ck.file(plan_.head).path().c_str(), plan_.head.c_str(), shape_text(hd.shape).c_str(), (long long)vocab_);
  d_head_ = hd.shape[1];
  for (const std::string* t : {&plan_.embedding, &plan_.head}) {
    SL_CHECK(ck.entry(*t).dtype != DType::i32, "%s: tensor '%s' is i32, expected a float type",
             ck.file(*t).path().c_str(), t->c_str());
  }
  const bool tied = plan_.head == plan_.embedding;
  // The head is applied in chunks of head_chunk_rows_ rows in both modes (streaming: one chunk fills the
  // layer buffer), so the resident and the streamed logits come from the same GEMM calls: OpenBLAS's
  // kernels for a matrix edge may accumulate in another order than its full tiles (AVX2 sgemm does), so
  // one [N, V] GEMM and three [N, V/3] GEMMs need not agree in the last bit. The layer buffer holds at
  // least 64 head rows (or the whole vocabulary), and always a layer.
  const int64_t min_head_chunk = std::min<int64_t>(vocab_, 64) * aligned_f32_bytes(d_head_);
  layer_bytes_ = std::max({layer_bytes_, min_head_chunk, int64_t(64)});
  head_chunk_rows_ = std::max<int64_t>(1, layer_bytes_ / aligned_f32_bytes(d_head_));
  const int64_t emb_bytes = aligned_f32_bytes(vocab_ * d_embed_);
  const int64_t head_bytes = tied ? 0 : aligned_f32_bytes(vocab_ * d_head_);
  weight_bytes_ = resident_bytes + emb_bytes + head_bytes;
  n_params_ = params_in_specs + vocab_ * d_embed_ + (tied ? 0 : vocab_ * d_head_);
  n_params_embedding_ = vocab_ * d_embed_ + (tied ? 0 : vocab_ * d_head_);
  for (int64_t b : per_layer) weight_bytes_ += b;
  // A GPU store fills the logits in blocks of a layer's size on the device, each copied down to the host.
  logits_stage_bytes_ = device_.is_cpu() ? 0 : layer_bytes_;
  streaming_ = max_memory_ > 0 && !(resident_if_fits && weight_bytes_ + logits_stage_bytes_ <= max_memory_ / 4 * 3);

  if (!streaming()) {
    // Everything as f32 in one buffer; each tensor's mapped pages go once it is converted.
    held_bytes_ = weight_bytes_ + logits_stage_bytes_;
    resident_buffer_ = Buffer(size_t(std::max<int64_t>(weight_bytes_, 64)), device_);
    char* cursor = static_cast<char*>(resident_buffer_.data());
    for (const WeightSpec& s : plan_.resident) resident_.push_back(convert_into(s, cursor, true));
    for (const auto& layer : plan_.layers) {
      layers_.emplace_back();
      for (const WeightSpec& s : layer) layers_.back().push_back(convert_into(s, cursor, true));
    }
    embedding_ = convert_into(WeightSpec::one(plan_.embedding, emb.shape), cursor, true);
    head_ = tied ? embedding_ : convert_into(WeightSpec::one(plan_.head, hd.shape), cursor, true);
    ck.release_all();  // what fault-around mapped after the per-block releases
    return;
  }

  // Streaming: resident tensors once, then one layer buffer (which also takes the head's row chunks).
  // On the CPU: the mapped pages of the block being converted (plus a page either side); on a GPU that
  // block is host memory, and the device holds the logits block instead.
  staging_bytes_ = device_.is_cpu() ? largest_stored + 2 * int64_t(::sysconf(_SC_PAGESIZE)) : logits_stage_bytes_;
  held_bytes_ = resident_bytes + layer_bytes_ + staging_bytes_;
  SL_CHECK(held_bytes_ <= max_memory_,
           "--max-memory %s is too small for %s: the resident weights (%s), one layer (%s) and %s (%s) need %s "
           "before any activations",
           mib(max_memory_).c_str(), ck.dir().c_str(), mib(resident_bytes).c_str(), mib(layer_bytes_).c_str(),
           device_.is_cpu() ? "the mapped block being converted" : "a block of logits", mib(staging_bytes_).c_str(),
           mib(held_bytes_).c_str());
  resident_buffer_ = Buffer(size_t(std::max<int64_t>(resident_bytes, 64)), device_);
  char* cursor = static_cast<char*>(resident_buffer_.data());
  for (const WeightSpec& s : plan_.resident) resident_.push_back(convert_into(s, cursor, true));
  layer_buffer_ = Buffer(size_t(layer_bytes_), device_);
  layers_.resize(1);
}

float* WeightStore::host_stage(int64_t n) {
  host_stage_.ensure(size_t(n) * sizeof(float), Device::cpu());
  return static_cast<float*>(host_stage_.data());
}

void WeightStore::upload(const WeightSpec& spec, float* device_dst, bool release_after) {
  for (const WeightPart& p : spec.parts) {
    const int64_t rows = p.shape.empty() ? 1 : p.shape[0];
    upload_part(p.name, 0, rows, spec.transposed, spec.offset, device_dst, release_after);
    device_dst += numel_of(p.shape);
  }
}

void WeightStore::upload_part(const std::string& name, int64_t row0, int64_t rows, bool transposed, float offset,
                              float* device_dst, bool release_after) {
  const Tensor src = ckpt_->view(name);
  const int64_t stored_rows = src.ndim == 0 ? 1 : src.shape[0];
  const int64_t cols = stored_rows > 0 ? src.numel() / stored_rows : 0;
  // Row blocks of about kStageBytes of f32 (a transposed part is converted whole).
  const int64_t block = transposed ? rows : std::max<int64_t>(1, kStageBytes / std::max<int64_t>(1, cols * 4));
  for (int64_t r0 = 0; r0 < rows; r0 += block) {
    const int64_t r = std::min(block, rows - r0), count = r * cols;
    float* host = host_stage(count);
    convert_part(name, row0 + r0, r, host, transposed, release_after);
    if (offset != 0.0f)
      for (int64_t i = 0; i < count; ++i) host[i] += offset;
    ops::copy(Tensor(device_dst + r0 * cols, DType::f32, {count}, device_), Tensor(host, DType::f32, {count}));
  }
}

void WeightStore::convert(const WeightSpec& spec, float* dst, bool release_after) const {
  float* begin = dst;
  for (const WeightPart& p : spec.parts) {
    const int64_t n = numel_of(p.shape);
    const int64_t rows = p.shape.empty() ? 1 : p.shape[0];
    convert_part(p.name, 0, rows, dst, spec.transposed, release_after);
    dst += n;
  }
  if (spec.offset != 0.0f)
    for (float* v = begin; v < dst; ++v) *v += spec.offset;
}

void WeightStore::convert_part(const std::string& name, int64_t row0, int64_t rows, float* dst, bool transposed,
                               bool release_after) const {
  Tensor src = ckpt_->view(name);
  const int64_t R = src.ndim == 0 ? 1 : src.shape[0];
  const int64_t C = R > 0 ? src.numel() / R : 0;
  // Transposed parts are always whole tensors ([R, C] stored -> [C, R]).
  const int64_t out_rows = transposed ? R : rows;
  const int64_t block = std::max<int64_t>(1, kStageBytes / std::max<int64_t>(1, C * dtype_size(src.dtype)));
  // dst holds rows [row0, row0 + rows) only: the source from row0 on lands on dst row 0.
  Tensor from = src.ndim == 0 ? src : src.slice(0, row0, rows);
  for (int64_t r0 = 0; r0 < rows; r0 += block) {
    const int64_t r1 = std::min(rows, r0 + block);
    convert_rows(dst, from, out_rows, C, r0, r1, transposed);
    if (release_after) ckpt_->release_rows(name, row0 + r0, r1 - r0);
  }
}

Tensor WeightStore::convert_into(const WeightSpec& spec, char*& cursor, bool release_after) {
  if (spec.parts.empty()) return Tensor{};  // absent optional
  const std::vector<int64_t> shape = spec.shape();
  float* dst = reinterpret_cast<float*>(cursor);
  if (device_.is_cpu()) convert(spec, dst, release_after);
  else upload(spec, dst, release_after);
  cursor += aligned_f32_bytes(numel_of(shape));
  return Tensor::contiguous_view(dst, DType::f32, shape.data(), int(shape.size()), device_);
}

const std::vector<Tensor>& WeightStore::layer(int l) {
  SL_CHECK(l >= 0 && l < n_layers(), "%s: layer %d out of range [0, %d)", ckpt_->dir().c_str(), l, n_layers());
  if (!streaming()) return layers_[size_t(l)];
  if (current_layer_ != l) {
    char* cursor = static_cast<char*>(layer_buffer_.data());
    layers_[0].clear();
    for (const WeightSpec& s : plan_.layers[size_t(l)]) layers_[0].push_back(convert_into(s, cursor, true));
    // The kernel's fault-around maps up to 64 KiB of already cached neighbouring pages with every page
    // fault, pages the per-block releases above had dropped already: one sweep of the whole mapping
    // keeps them from piling up layer after layer.
    ckpt_->release_all();
    current_layer_ = l;
  }
  return layers_[0];
}

void WeightStore::embed(Tensor out, Tensor ids) {
  SL_CHECK(ids.dtype == DType::i32 && ids.ndim == 1 && ids.is_contiguous(), "embed: ids must be contiguous i32 [N]");
  check_shape(out, {ids.shape[0], d_embed_}, "embed", "out");
  const int32_t* id = ids.ptr<int32_t>();
  for (int64_t n = 0; n < ids.shape[0]; ++n)
    SL_CHECK(id[n] >= 0 && id[n] < vocab_, "%s: token id %d at position %lld is outside the vocabulary [0, %lld)",
             ckpt_->dir().c_str(), id[n], (long long)n, (long long)vocab_);
  if (!streaming()) {
    ops::embedding_forward(out, staged_copy(ids_buffer_, ids, device_), embedding_);
    return;
  }
  // Rows straight from the mapping, each released once copied: at most one row's pages resident. A GPU
  // store gathers them on the host first and copies them up at once.
  Tensor rows = device_.is_cpu() ? out : Tensor(host_stage(ids.shape[0] * d_embed_), DType::f32, {ids.shape[0], d_embed_});
  Tensor table = ckpt_->view(plan_.embedding);
  const bool strided = !ckpt_->entry(plan_.embedding).contiguous();  // a transposed view in a .bin
  SL_CHECK(!strided || rows.is_contiguous(), "embed: out must be contiguous for a strided embedding table");
  for (int64_t n = 0; n < ids.shape[0]; ++n) {
    if (strided)
      convert_part(plan_.embedding, id[n], 1, rows.ptr<float>() + n * d_embed_, false, true);
    else
      ops::copy(rows.slice(0, n, 1), table.slice(0, id[n], 1));
    ckpt_->release_rows(plan_.embedding, id[n], 1);
  }
  ckpt_->release_all();
  if (!device_.is_cpu()) ops::copy(out, rows);
}

void WeightStore::head(Tensor logits, Tensor x) {
  SL_CHECK(x.ndim == 2 && x.shape[1] == d_head_, "head: x %s must be [N, %lld]", x.shape_str().c_str(),
           (long long)d_head_);
  SL_CHECK(logits.ndim == 2 && logits.shape[0] == x.shape[0] && logits.shape[1] == vocab_,
           "head: logits %s must be [%lld, %lld]", logits.shape_str().c_str(), (long long)x.shape[0], (long long)vocab_);
  // Row chunks of the head: logits[:, v0:v1] = x . head[v0:v1]^T, the same calls in both modes
  // (streaming: each chunk converted into the layer buffer first).
  // A GPU store computes each chunk in blocks of `cols` logits columns on the device (logits_stage_bytes_,
  // the same blocks resident or streamed) and copies each block down into the host logits.
  const int64_t chunk = head_chunk_rows_, N = x.shape[0];
  const int64_t cols = device_.is_cpu() ? chunk
                                        : std::clamp<int64_t>(logits_stage_bytes_ / std::max<int64_t>(1, 4 * N), 1, chunk);
  if (!device_.is_cpu()) logits_buffer_.ensure(size_t(N * cols * 4), device_);
  if (streaming()) current_layer_ = -1;  // the buffer no longer holds a layer
  float* buf = static_cast<float*>(layer_buffer_.data());
  for (int64_t v0 = 0; v0 < vocab_; v0 += chunk) {
    const int64_t n = std::min(chunk, vocab_ - v0);
    Tensor rows = head_.defined() ? head_.slice(0, v0, n) : Tensor(buf, DType::f32, {n, d_head_}, device_);
    if (streaming()) {
      if (device_.is_cpu()) convert_part(plan_.head, v0, n, buf, false, true);
      else upload_part(plan_.head, v0, n, false, 0.0f, buf, true);
    }
    if (device_.is_cpu()) {
      ops::linear_forward(logits.slice(1, v0, n), x, rows, Tensor{});
      continue;
    }
    for (int64_t c0 = 0; c0 < n; c0 += cols) {
      const int64_t c = std::min(cols, n - c0);
      Tensor block = logits_buffer_.view(DType::f32, {N, c});
      ops::linear_forward(block, x, rows.slice(0, c0, c), Tensor{});
      ops::copy(logits.slice(1, v0 + c0, c), block);
    }
  }
  if (streaming()) ckpt_->release_all();
}

void WeightStore::check_budget(int64_t activation_bytes, const std::string& what) const {
  if (max_memory_ == 0) return;
  SL_CHECK(held_bytes_ + activation_bytes <= max_memory_,
           "--max-memory %s is too small for %s of %s: activations need %s on top of %s of %s weights (use "
           "fewer sequences per batch or a larger --max-memory)",
           mib(max_memory_).c_str(), what.c_str(), ckpt_->dir().c_str(), mib(activation_bytes).c_str(),
           mib(held_bytes_).c_str(), streaming() ? "streamed" : "resident");
}

}  // namespace sinklab::hf
