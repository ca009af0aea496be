// Training checkpoints.
//
// Layout: <dir>/step_<8 digits>/ holding
//   model.safetensors           the weights under HF Llama names (metadata "format"="pt" plus the
//                               caller's), so the directory loads as a Llama-family HF model
//   config.json                 the HF config (caller's JSON text, validated)
//   optimizer-rank<r>.safetensors  one per rank: optimizer state (m, v), its metadata ("step", ...) and
//                               whatever else the caller adds (data step, run fingerprint)
//   COMPLETE                    manifest written last: JSON {format, version, step, world, files:
//                               {name: {bytes, crc32}}} followed by a line "crc32 <hex>" of that JSON
//
// Atomicity: everything is written into <dir>/step_<N>.tmp/ and the directory is renamed to its final
// name only after COMPLETE is in it (and fsynced), so a job killed at any moment leaves the previous
// checkpoints intact and at worst a *.tmp directory that latest_checkpoint() ignores and the next save
// removes. The step number is the count of completed optimizer steps: resuming from step_N runs step N
// next.
//
// Data-parallel jobs split the save: rank 0 calls begin_checkpoint, [barrier], every rank calls
// write_rank_state, rank 0 calls write_model, [barrier], rank 0 calls finish_checkpoint (which checks
// that all `world` rank files are present). save_checkpoint() does all of it in one process.
//
// Loading validates before anything is read: the manifest's own CRC, every listed file's presence,
// size and CRC-32, and the safetensors structure; each failure throws sinklab::Error naming the file.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "io/safetensors.hpp"

namespace sinklab::train {

inline constexpr const char* kCheckpointManifest = "COMPLETE";
inline constexpr const char* kCheckpointModel = "model.safetensors";
inline constexpr const char* kCheckpointConfig = "config.json";

// What one rank saves besides the weights.
struct RankState {
  std::vector<io::NamedTensor> tensors;          // e.g. AdamW::state_tensors
  std::map<std::string, std::string> metadata;   // e.g. AdamW::state_metadata + data step
};

std::string checkpoint_dir_name(int64_t step);  // "step_00001234"
std::string optimizer_file_name(int rank);      // "optimizer-rank<r>.safetensors"

// ---- writing, step by step (data-parallel) ----------------------------------------------------------
// Creates (after removing any stale one) and returns <dir>/step_<N>.tmp. Creates dir if needed.
std::string begin_checkpoint(const std::string& dir, int64_t step);
// <tmp>/optimizer-rank<r>.safetensors. Device tensors are copied to the host first.
void write_rank_state(const std::string& tmp_dir, int rank, const RankState& state);
// <tmp>/model.safetensors and <tmp>/config.json.
void write_model(const std::string& tmp_dir, const std::vector<io::NamedTensor>& weights,
                 const std::string& hf_config_json, const std::map<std::string, std::string>& metadata = {});
// Checks the files, writes COMPLETE, renames the directory into place (replacing an older save of the
// same step), then keeps only the newest keep_last complete checkpoints (0 = keep all). Returns the
// final directory.
std::string finish_checkpoint(const std::string& dir, int64_t step, int world, int keep_last = 0);

// All of the above in one process (world = rank_states.size()).
std::string save_checkpoint(const std::string& dir, int64_t step, const std::vector<io::NamedTensor>& weights,
                            const std::string& hf_config_json, const std::vector<RankState>& rank_states,
                            int keep_last = 0, const std::map<std::string, std::string>& model_metadata = {});

// ---- finding and reading ---------------------------------------------------------------------------
struct CheckpointInfo {
  std::string path;  // the step_<N> directory
  int64_t step = 0;
  int world = 0;
  std::vector<std::string> files;  // listed in the manifest
};

// The newest <dir>/step_<N> holding a COMPLETE marker; nullopt when there is none (or no dir). Does
// not validate the files: open_checkpoint does, and refuses a damaged newest checkpoint rather than
// silently falling back to an older one.
std::optional<std::string> latest_checkpoint(const std::string& dir);
// A checkpoint named by a user: a step_<N> directory itself, or a directory (a run's --out-dir, or its
// checkpoints/) whose newest complete checkpoint is meant. Throws naming `flag` when there is none.
std::string resolve_checkpoint(const std::string& path, const char* flag);
// Steps of every complete checkpoint in dir, ascending.
std::vector<int64_t> list_checkpoints(const std::string& dir);

// Validates the checkpoint directory (manifest, sizes, CRCs unless verify_crc is false, safetensors
// headers) and returns its description. Throws naming the offending file.
CheckpointInfo open_checkpoint(const std::string& path, bool verify_crc = true);

// Fills each `into` tensor (any device; f32/f64/bf16/f16, converted when the stored dtype differs) from
// the tensor of the same name in model.safetensors; a missing name or a shape mismatch throws.
void load_weights(const CheckpointInfo& ckpt, const std::vector<io::NamedTensor>& into);
// The same from any safetensors file (sinklab-pretrain --init-weights FILE.safetensors).
void load_weights_file(const std::string& safetensors_path, const std::vector<io::NamedTensor>& into);
// --init-weights' argument: a .safetensors file as it is, else a checkpoint as resolve_checkpoint finds it.
std::string resolve_initial_weights(const std::string& path, const char* flag);
// The weights of a path resolve_initial_weights (or resolve_checkpoint) returned: the file's, or the
// checkpoint's model.safetensors.
void load_initial_weights(const std::string& resolved, const std::vector<io::NamedTensor>& into);
// The path of rank r's state file; throws when r >= ckpt.world.
std::string rank_state_path(const CheckpointInfo& ckpt, int rank);
// The HF config text stored beside the weights.
std::string read_config_json(const CheckpointInfo& ckpt);

// CRC-32 (zlib) of a whole file, used by the manifest.
uint32_t file_crc32(const std::string& path);

}  // namespace sinklab::train
