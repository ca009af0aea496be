#include "train/checkpoint.hpp"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "backend/memory.hpp"
#include "backend/ops.hpp"
#include "core/error.hpp"
#include "io/files.hpp"
#include "train/run_dir.hpp"

namespace sinklab::train {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kManifestFormat = "sinklab-checkpoint";
constexpr int kManifestVersion = 1;

std::string join(const std::string& dir, const std::string& name) { return (fs::path(dir) / name).string(); }

// Parses "step_<digits>" (nothing else) into its step.
std::optional<int64_t> parse_step_dir(const std::string& name) {
  if (name.size() <= 5 || name.compare(0, 5, "step_") != 0) return std::nullopt;
  int64_t step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    if (step > (INT64_MAX - 9) / 10) return std::nullopt;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  SL_CHECK(in.good(), "cannot open %s: %s", path.c_str(), std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text(const std::string& path, const std::string& text) {
  io::AtomicFile f(path);
  f.write(text.data(), text.size());
  f.commit();
}

// Host copies of device tensors (write_safetensors needs contiguous CPU tensors).
std::vector<io::NamedTensor> to_host(const std::vector<io::NamedTensor>& in, std::vector<Buffer>& keep) {
  std::vector<io::NamedTensor> out;
  out.reserve(in.size());
  std::set<std::string> names;
  for (const auto& nt : in) {
    SL_CHECK(names.insert(nt.name).second, "checkpoint: tensor '%s' given twice", nt.name.c_str());
    SL_CHECK(nt.tensor.defined(), "checkpoint: tensor '%s' is undefined", nt.name.c_str());
    if (nt.tensor.device.is_cpu() && nt.tensor.is_contiguous()) {
      out.push_back(nt);
      continue;
    }
    keep.emplace_back(std::max<size_t>(nt.tensor.nbytes(), 1), Device::cpu());
    Tensor h = Tensor::contiguous_view(keep.back().data(), nt.tensor.dtype, nt.tensor.shape.data(), nt.tensor.ndim,
                                       Device::cpu());
    ops::copy(h, nt.tensor);
    out.push_back({nt.name, h});
  }
  return out;
}

std::string hex32(uint32_t v) { return strfmt("%08x", v); }

}  // namespace

std::string checkpoint_dir_name(int64_t step) {
  SL_CHECK(step >= 0, "checkpoint: negative step %lld", (long long)step);
  return strfmt("step_%08lld", (long long)step);
}

std::string optimizer_file_name(int rank) { return strfmt("optimizer-rank%d.safetensors", rank); }

uint32_t file_crc32(const std::string& path) {
  io::MappedFile file(path);
  uLong crc = ::crc32(0L, Z_NULL, 0);
  const unsigned char* p = file.data();
  size_t n = file.size();
  while (n > 0) {
    uInt piece = uInt(std::min<size_t>(n, size_t(1) << 30));
    crc = ::crc32(crc, p, piece);
    p += piece;
    n -= piece;
  }
  return uint32_t(crc);
}

// ---- writing -----------------------------------------------------------------------------------------

std::string begin_checkpoint(const std::string& dir, int64_t step) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  SL_CHECK(!ec, "cannot create checkpoint directory %s: %s", dir.c_str(), ec.message().c_str());
  const std::string tmp = join(dir, checkpoint_dir_name(step) + ".tmp");
  fs::remove_all(tmp, ec);  // a stale one from a killed save
  SL_CHECK(!ec, "cannot remove stale %s: %s", tmp.c_str(), ec.message().c_str());
  fs::create_directory(tmp, ec);
  SL_CHECK(!ec, "cannot create %s: %s", tmp.c_str(), ec.message().c_str());
  return tmp;
}

void write_rank_state(const std::string& tmp_dir, int rank, const RankState& state) {
  SL_CHECK(rank >= 0, "checkpoint: negative rank %d", rank);
  std::vector<Buffer> keep;
  auto meta = state.metadata;
  meta["rank"] = std::to_string(rank);
  io::write_safetensors(join(tmp_dir, optimizer_file_name(rank)), to_host(state.tensors, keep), meta);
}

void write_model(const std::string& tmp_dir, const std::vector<io::NamedTensor>& weights,
                 const std::string& hf_config_json, const std::map<std::string, std::string>& metadata) {
  const std::string config_path = join(tmp_dir, kCheckpointConfig);
  json cfg;
  try {
    cfg = json::parse(hf_config_json);
  } catch (const json::exception& e) {
    SL_FAIL("%s: the HF config to write is not valid JSON: %s", config_path.c_str(), e.what());
  }
  SL_CHECK(cfg.is_object(), "%s: the HF config to write is not a JSON object", config_path.c_str());
  SL_CHECK(!weights.empty(), "%s: no weights to write", join(tmp_dir, kCheckpointModel).c_str());
  std::vector<Buffer> keep;
  auto meta = metadata;
  meta["format"] = "pt";  // what transformers expects of a PyTorch safetensors file
  io::write_safetensors(join(tmp_dir, kCheckpointModel), to_host(weights, keep), meta);
  write_text(config_path, cfg.dump(2) + "\n");
}

std::string finish_checkpoint(const std::string& dir, int64_t step, int world, int keep_last) {
  SL_CHECK(world >= 1, "checkpoint: world size %d must be >= 1", world);
  const std::string name = checkpoint_dir_name(step);
  const std::string tmp = join(dir, name + ".tmp");
  const std::string final_dir = join(dir, name);
  SL_CHECK(fs::is_directory(tmp), "%s: no checkpoint in progress (begin_checkpoint not called?)", tmp.c_str());

  std::vector<std::string> required = {kCheckpointModel, kCheckpointConfig};
  for (int r = 0; r < world; ++r) required.push_back(optimizer_file_name(r));
  for (const auto& f : required)
    SL_CHECK(fs::is_regular_file(join(tmp, f)), "%s: missing before the checkpoint could be completed",
             join(tmp, f).c_str());
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(tmp)) {
    const std::string f = entry.path().filename().string();
    if (!entry.is_regular_file() || f == kCheckpointManifest || f.find(io::kWorkingCopyInfix) != std::string::npos) continue;
    files.push_back(f);
  }
  std::sort(files.begin(), files.end());

  json manifest = {{"format", kManifestFormat}, {"version", kManifestVersion}, {"step", step}, {"world", world}};
  json listed = json::object();
  for (const auto& f : files) {
    const std::string p = join(tmp, f);
    listed[f] = {{"bytes", uint64_t(fs::file_size(p))}, {"crc32", hex32(file_crc32(p))}};
  }
  manifest["files"] = listed;
  std::string text = manifest.dump(1) + "\n";
  text += "crc32 " + hex32(uint32_t(::crc32(0L, reinterpret_cast<const Bytef*>(text.data()), uInt(text.size())))) +
          "\n";
  write_text(join(tmp, kCheckpointManifest), text);

  // Into place. An older save of the same step is moved aside first so that some complete copy exists
  // at every moment.
  std::error_code ec;
  std::string aside;
  if (fs::exists(final_dir)) {
    aside = final_dir + ".old";
    fs::remove_all(aside, ec);
    fs::rename(final_dir, aside, ec);
    SL_CHECK(!ec, "cannot move %s aside: %s", final_dir.c_str(), ec.message().c_str());
  }
  fs::rename(tmp, final_dir, ec);
  SL_CHECK(!ec, "cannot rename %s to %s: %s", tmp.c_str(), final_dir.c_str(), ec.message().c_str());
  io::sync_parent_dir(final_dir);
  if (!aside.empty()) fs::remove_all(aside, ec);

  if (keep_last > 0) {
    std::vector<int64_t> steps = list_checkpoints(dir);
    for (size_t i = 0; i + size_t(keep_last) < steps.size(); ++i) {
      if (steps[i] == step) continue;
      fs::remove_all(join(dir, checkpoint_dir_name(steps[i])), ec);
      // A leftover we cannot remove costs disk space but never correctness: no error.
    }
  }
  return final_dir;
}

std::string save_checkpoint(const std::string& dir, int64_t step, const std::vector<io::NamedTensor>& weights,
                            const std::string& hf_config_json, const std::vector<RankState>& rank_states,
                            int keep_last, const std::map<std::string, std::string>& model_metadata) {
  SL_CHECK(!rank_states.empty(), "checkpoint %s: no rank state given", join(dir, checkpoint_dir_name(step)).c_str());
  const std::string tmp = begin_checkpoint(dir, step);
  try {
    for (size_t r = 0; r < rank_states.size(); ++r) write_rank_state(tmp, int(r), rank_states[r]);
    write_model(tmp, weights, hf_config_json, model_metadata);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
  return finish_checkpoint(dir, step, int(rank_states.size()), keep_last);
}

// ---- reading -----------------------------------------------------------------------------------------

std::vector<int64_t> list_checkpoints(const std::string& dir) {
  std::vector<int64_t> steps;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return steps;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    auto step = parse_step_dir(entry.path().filename().string());
    if (!step || !entry.is_directory()) continue;
    if (!fs::is_regular_file(entry.path() / kCheckpointManifest, ec)) continue;
    steps.push_back(*step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::optional<std::string> latest_checkpoint(const std::string& dir) {
  std::vector<int64_t> steps = list_checkpoints(dir);
  if (steps.empty()) return std::nullopt;
  return join(dir, checkpoint_dir_name(steps.back()));
}

CheckpointInfo open_checkpoint(const std::string& path, bool verify_crc) {
  SL_CHECK(fs::is_directory(path), "checkpoint %s: no such directory", path.c_str());
  const std::string manifest_path = join(path, kCheckpointManifest);
  SL_CHECK(fs::is_regular_file(manifest_path),
           "%s: missing: checkpoint %s is incomplete (its save was interrupted)", manifest_path.c_str(), path.c_str());
  const std::string text = read_text(manifest_path);
  // The manifest checks itself: JSON, then "crc32 <hex>" of the JSON bytes.
  const size_t tag = text.rfind("crc32 ");
  SL_CHECK(tag != std::string::npos && tag > 0 && text[tag - 1] == '\n',
           "%s: corrupted checkpoint manifest (no checksum line)", manifest_path.c_str());
  const std::string body = text.substr(0, tag);
  std::string stored = text.substr(tag + 6);
  while (!stored.empty() && (stored.back() == '\n' || stored.back() == '\r')) stored.pop_back();
  const std::string actual = hex32(uint32_t(::crc32(0L, reinterpret_cast<const Bytef*>(body.data()), uInt(body.size()))));
  SL_CHECK(stored == actual, "%s: corrupted checkpoint manifest (CRC-32 %s, recorded %s)", manifest_path.c_str(),
           actual.c_str(), stored.c_str());

  CheckpointInfo info;
  info.path = path;
  json manifest;
  try {
    manifest = json::parse(body);
    SL_CHECK(manifest.at("format").get<std::string>() == kManifestFormat, "%s: not a sinklab checkpoint manifest",
             manifest_path.c_str());
    const int version = manifest.at("version").get<int>();
    SL_CHECK(version == kManifestVersion, "%s: checkpoint format version %d, this build reads %d",
             manifest_path.c_str(), version, kManifestVersion);
    info.step = manifest.at("step").get<int64_t>();
    info.world = manifest.at("world").get<int>();
    for (auto it = manifest.at("files").begin(); it != manifest.at("files").end(); ++it) {
      const std::string file = join(path, it.key());
      info.files.push_back(it.key());
      SL_CHECK(fs::is_regular_file(file), "%s: missing (listed in %s)", file.c_str(), manifest_path.c_str());
      const uint64_t bytes = it->at("bytes").get<uint64_t>();
      const uint64_t size = fs::file_size(file);
      SL_CHECK(size == bytes, "%s: %llu bytes, the manifest recorded %llu: truncated or modified", file.c_str(),
               (unsigned long long)size, (unsigned long long)bytes);
      if (verify_crc) {
        const std::string crc = hex32(file_crc32(file));
        const std::string want = it->at("crc32").get<std::string>();
        SL_CHECK(crc == want, "%s: corrupted (CRC-32 %s, the manifest recorded %s)", file.c_str(), crc.c_str(),
                 want.c_str());
      }
    }
  } catch (const json::exception& e) {
    SL_FAIL("%s: malformed checkpoint manifest: %s", manifest_path.c_str(), e.what());
  }
  SL_CHECK(info.world >= 1, "%s: world size %d", manifest_path.c_str(), info.world);
  std::vector<std::string> required = {kCheckpointModel, kCheckpointConfig};
  for (int r = 0; r < info.world; ++r) required.push_back(optimizer_file_name(r));
  for (const auto& f : required)
    SL_CHECK(std::find(info.files.begin(), info.files.end(), f) != info.files.end(), "%s: missing (%s does not list it)",
             join(path, f).c_str(), manifest_path.c_str());
  auto dir_step = parse_step_dir(fs::path(path).filename().string());
  SL_CHECK(!dir_step || *dir_step == info.step, "%s: records step %lld but the directory is %s",
           manifest_path.c_str(), (long long)info.step, fs::path(path).filename().string().c_str());
  // Structure of the weights (header JSON, spans) checked now rather than at the first read.
  io::SafetensorsFile model(join(path, kCheckpointModel));
  (void)model;
  return info;
}

void load_weights(const CheckpointInfo& ckpt, const std::vector<io::NamedTensor>& into) {
  load_weights_file(join(ckpt.path, kCheckpointModel), into);
}

void load_weights_file(const std::string& safetensors_path, const std::vector<io::NamedTensor>& into) {
  io::SafetensorsFile file(safetensors_path);
  for (const auto& nt : into) {
    SL_CHECK(file.contains(nt.name), "%s: missing tensor '%s'", file.path().c_str(), nt.name.c_str());
    Tensor src = file.view(nt.name);
    bool same = src.ndim == nt.tensor.ndim;
    for (int d = 0; same && d < src.ndim; ++d) same = src.shape[d] == nt.tensor.shape[d];
    SL_CHECK(same, "%s: tensor '%s' is %s, the model expects %s", file.path().c_str(), nt.name.c_str(),
             src.shape_str().c_str(), nt.tensor.shape_str().c_str());
    ops::copy(nt.tensor, src);
  }
}

std::string rank_state_path(const CheckpointInfo& ckpt, int rank) {
  SL_CHECK(rank >= 0 && rank < ckpt.world, "%s: written by %d rank(s), no state for rank %d", ckpt.path.c_str(),
           ckpt.world, rank);
  return join(ckpt.path, optimizer_file_name(rank));
}

std::string read_config_json(const CheckpointInfo& ckpt) { return read_text(join(ckpt.path, kCheckpointConfig)); }

namespace {
// --init-weights names a weights file (rather than a checkpoint) by its extension.
bool is_weights_file(const std::string& path) { return path.ends_with(".safetensors"); }
}  // namespace

void load_initial_weights(const std::string& resolved, const std::vector<io::NamedTensor>& into) {
  if (is_weights_file(resolved)) load_weights_file(resolved, into);
  else load_weights(open_checkpoint(resolved), into);
}

std::string resolve_initial_weights(const std::string& path, const char* flag) {
  std::error_code ec;
  SL_CHECK(is_weights_file(path) || !fs::is_regular_file(path, ec),
           "%s: %s is a file without the .safetensors name of a weights file: expected a .safetensors file, a "
           "step_<N> checkpoint directory, or a run's --out-dir (its newest checkpoint)", flag, path.c_str());
  if (!is_weights_file(path)) return resolve_checkpoint(path, flag);
  SL_CHECK(fs::is_regular_file(path), "%s: %s: no such file", flag, path.c_str());
  io::SafetensorsFile check(path);  // its header and spans, now rather than after the data is opened
  (void)check;
  return path;
}

std::string resolve_checkpoint(const std::string& path, const char* flag) {
  std::error_code ec;
  SL_CHECK(!fs::is_regular_file(path, ec), "%s: %s is a file, not a checkpoint: expected a step_<N> checkpoint "
           "directory or a run's --out-dir (its newest checkpoint)", flag, path.c_str());
  if (std::filesystem::exists(path + "/" + kCheckpointManifest, ec)) return path;
  std::optional<std::string> latest = latest_checkpoint(path);
  if (!latest) latest = latest_checkpoint(checkpoints_dir(path));
  SL_CHECK(latest.has_value(), "%s: no complete checkpoint in %s", flag, path.c_str());
  return *latest;
}

}  // namespace sinklab::train
