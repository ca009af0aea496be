// Loading code every HF family shares: config.json access, the weights of a model directory (safetensors
// or PyTorch checkpoints, single or sharded, memory-mapped), and the WeightStore that
// turns a family's tensor-name table into f32 tensors, either all at once or one layer at a time
// (layer streaming under --max-memory).
//
// Errors a user can cause (missing file, malformed JSON, missing field, missing tensor, wrong shape,
// truncated or refused weights file) throw sinklab::Error with one line naming the file.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/memory.hpp"
#include "hf/hf_model.hpp"
#include "io/safetensors.hpp"
#include "io/torch_file.hpp"

namespace sinklab::hf {

// ---------------------------------------------------------------------------------------------------
// config.json. A key whose value is null counts as absent (HF writes "sliding_window": null).
class HfConfig {
 public:
  static HfConfig read(const std::string& path);
  HfConfig(nlohmann::json json, std::string path) : json_(std::move(json)), path_(std::move(path)) {}

  const std::string& path() const { return path_; }
  const nlohmann::json& json() const { return json_; }
  bool has(const std::string& key) const;
  // Required values: "<path>: missing field 'key'" / "<path>: field 'key' must be ...".
  int64_t get_int(const std::string& key) const;
  double get_double(const std::string& key) const;
  std::string get_string(const std::string& key) const;
  // Optional values.
  int64_t get_int(const std::string& key, int64_t fallback) const;
  double get_double(const std::string& key, double fallback) const;
  bool get_bool(const std::string& key, bool fallback) const;
  std::string get_string(const std::string& key, const std::string& fallback) const;
  // The first of several spellings of one field that is present (GPT-2's n_embd / hidden_size).
  int64_t get_int_any(std::initializer_list<const char*> keys) const;
  // A nested object (e.g. rope_scaling), or null when absent.
  const nlohmann::json& object(const std::string& key) const;
  // "<path>: unsupported <what>" — a config switch sinklab does not implement.
  [[noreturn]] void unsupported(const std::string& what) const;

 private:
  const nlohmann::json* find(const std::string& key) const;
  nlohmann::json json_;
  std::string path_;
};

// ---------------------------------------------------------------------------------------------------
// The weights of a model directory, from the first of these that exists:
//   model.safetensors, model.safetensors.index.json, pytorch_model.bin, pytorch_model.bin.index.json
// (an index: {"weight_map": {tensor: shard file}}, shards in the index's format). Every file is validated
// when opened (io::SafetensorsFile, io::TorchFile) and stays mapped.
class Checkpoint {
 public:
  explicit Checkpoint(const std::string& dir);
  Checkpoint(const Checkpoint&) = delete;
  Checkpoint& operator=(const Checkpoint&) = delete;

  const std::string& dir() const { return dir_; }
  // The file that describes the weights (one of the four above), for messages; its name is recorded in
  // the survey's results ("weights").
  const std::string& source() const { return source_; }
  bool has(const std::string& name) const { return where_.count(name) != 0; }
  // The file holding a tensor; a missing one throws "<source>: missing tensor 'name'".
  const io::MappedTensorFile& file(const std::string& name) const;
  const io::TensorEntry& entry(const std::string& name) const { return file(name).entry(name); }
  Tensor view(const std::string& name) const { return file(name).view(name); }
  // "<file>: tensor 'name' has shape [..], expected [..]".
  void check_shape(const std::string& name, const std::vector<int64_t>& shape) const;
  // Drops the tensor's mapped pages (all, or the bytes of rows [row0, row0 + rows) along dim 0: a
  // strided tensor's rows interleave, so all of them), or every mapped page of every file.
  void release(const std::string& name) const { file(name).release(name); }
  void release_rows(const std::string& name, int64_t row0, int64_t rows) const;
  void release_all() const;
  std::vector<std::string> names() const;

 private:
  std::string dir_, source_;
  std::vector<std::unique_ptr<io::MappedTensorFile>> files_;
  std::map<std::string, size_t> where_;  // tensor -> index into files_
};

// ---------------------------------------------------------------------------------------------------
// A family's tensor-name table. One WeightSpec is one f32 tensor the forward uses; it is read from one
// checkpoint tensor, or from several stacked along dim 0 (q|k|v, gate|up: one GEMM instead of three).
struct WeightPart {
  std::string name;
  std::vector<int64_t> shape;  // as stored in the checkpoint
};
struct WeightSpec {
  std::vector<WeightPart> parts;
  // GPT-2's Conv1D stores [in, out]; the op API's linear wants [out, in]: the 2-D tensor is transposed
  // while it is converted (one part only).
  bool transposed = false;
  // Absent from the checkpoint (all parts) -> an undefined Tensor (an optional bias). Present in part
  // -> the missing part's error.
  bool optional = false;
  // Added to every converted element, in f32: Gemma's RMSNorm scales by (1 + w), which is the weight
  // w + 1 of an ordinary RMSNorm (HF computes 1.0 + w in float32 too).
  float offset = 0.0f;

  static WeightSpec one(std::string name, std::vector<int64_t> shape, bool optional = false);
  static WeightSpec stacked(std::vector<WeightPart> parts, bool optional = false);
  static WeightSpec conv1d(std::string name, int64_t in, int64_t out);  // stored [in,out], used [out,in]
  static WeightSpec plus_one(std::string name, std::vector<int64_t> shape);  // 1 + w (Gemma's norms)
  // The attention's q, k and v projections as one stacked tensor (one GEMM), from the checkpoint's
  // <attn>q_proj.<what>, k_proj.<what>, v_proj.<what> (LLaMA, Qwen2, Gemma 3, OPT): what = "weight" gives
  // [q_rows + 2 kv_rows, d_in] from [rows, d_in] parts, "bias" [q_rows + 2 kv_rows] from [rows] parts.
  static WeightSpec stacked_qkv(const std::string& attn, const std::string& what, int64_t q_rows, int64_t kv_rows,
                                int64_t d_in);
  // A tensor the configuration says the model does not have (attention_bias false): always undefined,
  // whatever the checkpoint holds (transformers ignores such extra tensors too).
  static WeightSpec absent();
  std::vector<int64_t> shape() const;  // the f32 tensor's shape
};

struct WeightPlan {
  std::vector<WeightSpec> resident;             // kept for the whole run: norms, positions, projections
  std::vector<std::vector<WeightSpec>> layers;  // one list per layer, in the family's index order
  // The token table [V, d_embed] (rows are gathered, never converted whole when streaming) and the
  // output projection [V, d_head] (streamed in row chunks). head == embedding: tied.
  std::string embedding, head;
};

// The f32 weights a forward reads. Construction checks every tensor of the plan (present, shape) so a
// broken checkpoint fails at load, not halfway through a forward.
//
// The tensors live on options.device (LoadOptions): on a GPU each tensor is converted on the host in
// blocks of about a MiB (a transposed part whole) and copied up, so the host holds one block, not the model;
// max_memory_bytes then bounds the GPU's memory (weights, activations and a logits staging block of a
// layer's size that head() fills before copying each block of logits down to the host).
//
// max_memory_bytes == 0: everything is converted to f32 once, then the mapped pages are released.
// Otherwise layer streaming: the resident tensors are converted once; each layer is converted into one
// reusable buffer when layer(l) is called, releasing the mapped pages of every block of about a MiB as
// soon as it is converted; embedding rows are gathered straight from the mapping; the head is applied
// in row chunks through the same buffer. Peak memory is then resident + one layer + one staged block
// (its mapped pages while it is converted) + activations, which check_budget() holds to
// max_memory_bytes.
class WeightStore {
 public:
  // resident_if_fits (the survey's default budget): a bound that holds the f32 weights with a quarter to
  // spare for activations keeps them resident, as with no bound; check_budget applies either way.
  // options: max_memory_bytes, resident_if_fits, device.
  WeightStore(std::shared_ptr<const Checkpoint> ckpt, WeightPlan plan, const LoadOptions& options);

  bool streaming() const { return streaming_; }
  Device device() const { return device_; }
  int n_layers() const { return int(plan_.layers.size()); }
  const std::vector<Tensor>& resident() const { return resident_; }
  // The tensors of layer l in plan order (undefined: an absent optional). Streaming: converted now;
  // the views stay valid until the next layer() or head() call.
  const std::vector<Tensor>& layer(int l);
  // out f32 [N, d_embed] = embedding[ids]; ids i32 [N] on the host (out-of-range ids throw naming the
  // model); out on device().
  void embed(Tensor out, Tensor ids);
  // logits [N, V] on the host (rows may be strided) = x [N, d_head] . head^T, x on device().
  void head(Tensor logits, Tensor x);
  int64_t vocab_size() const { return vocab_; }

  int64_t weight_bytes() const { return weight_bytes_; }  // every weight as f32 (tied head counted once)
  // Parameters (elements of every weight, a tied head once), and those of the token embedding and the head.
  int64_t n_params() const { return n_params_; }
  int64_t n_params_embedding() const { return n_params_embedding_; }
  // Bytes held for weights in this mode (all of them, or resident + layer buffer + staging).
  int64_t held_bytes() const { return held_bytes_; }
  // Throws "--max-memory ...: ..." when the weights held plus `activation_bytes` exceed the bound (any
  // bound > 0, streaming or not).
  void check_budget(int64_t activation_bytes, const std::string& what) const;

 private:
  void convert(const WeightSpec& spec, float* dst, bool release_after) const;
  // convert() onto the device: each part in row blocks through host_stage_, each block copied up.
  void upload(const WeightSpec& spec, float* device_dst, bool release_after);
  // Rows [row0, row0 + rows) of a stored tensor (transposed: all of it), converted and copied up.
  void upload_part(const std::string& name, int64_t row0, int64_t rows, bool transposed, float offset,
                   float* device_dst, bool release_after);
  // A host f32 block of n elements (host_stage_, grown on demand).
  float* host_stage(int64_t n);
  // Rows [row0, row0 + rows) of a stored tensor into f32 dst (transposed: the whole tensor), in blocks
  // of about a MiB, each block's mapped pages released once converted.
  void convert_part(const std::string& name, int64_t row0, int64_t rows, float* dst, bool transposed,
                    bool release_after) const;
  Tensor convert_into(const WeightSpec& spec, char*& cursor, bool release_after);

  std::shared_ptr<const Checkpoint> ckpt_;
  WeightPlan plan_;
  Device device_;
  int64_t max_memory_ = 0;
  bool streaming_ = false;
  int64_t vocab_ = 0, d_embed_ = 0, d_head_ = 0;
  int64_t weight_bytes_ = 0, held_bytes_ = 0, layer_bytes_ = 0, staging_bytes_ = 0;
  int64_t n_params_ = 0, n_params_embedding_ = 0;
  int64_t head_chunk_rows_ = 1;  // rows of the head per GEMM, in both modes (see the constructor)
  Buffer resident_buffer_, layer_buffer_;
  // A GPU store's host side: the conversion block, the token ids, and the device block of logits.
  Buffer host_stage_, ids_buffer_, logits_buffer_;
  int64_t logits_stage_bytes_ = 0;
  std::vector<Tensor> resident_;
  std::vector<std::vector<Tensor>> layers_;  // all layers (unbounded) or slot 0 reused (streaming)
  Tensor embedding_, head_;                  // converted tables (unbounded only)
  int current_layer_ = -1;
};

// Bytes of an f32 tensor carved out of a buffer (64-byte aligned, as Arena does).
inline int64_t aligned_f32_bytes(int64_t numel) { return (numel * 4 + 63) / 64 * 64; }

// "12.5 MiB" for messages.
std::string mib(int64_t bytes);

}  // namespace sinklab::hf
