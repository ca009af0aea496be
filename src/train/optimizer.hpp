// AdamW over a plain list of named parameters (no dependency on the model's internals), with ZeRO-1
// sharding of its state.
//
// Weight decay split (decided here, one predicate): decay applies to every parameter of rank >= 2 —
// all weight matrices, including the token embedding and the LM head — and not to rank-0/1 tensors
// (RMSNorm/LayerNorm gains, biases, learned scalars). This is the split of the paper's released
// (lit-gpt/TinyLlama-style) code and of nanoGPT. A caller may pass its own predicate, or an explicit
// per-parameter `decay` flag (model::ParamSpec::decay), which then wins.
//
// ZeRO-1. Parameters live in one flat buffer (the model's "parameter layout in one buffer"), each at an
// element offset. zero1_partition() splits the flat index space [0, n) into `world` contiguous
// ranges of equal size S (the last ones shorter or empty), S a multiple of `align`: the shape that
// reduce-scatter / all-gather over a flat buffer padded to S * world elements need. A rank's optimizer
// keeps m and v only for the part of each parameter inside its range and updates only that part; the
// communication layer (train/grad_sync.hpp) reduce-scatters the gradients into that range during
// backward and all-gathers the parameters after step().
//
// State file (safetensors): for each owned piece "exp_avg/<name>" and "exp_avg_sq/<name>" (1-D, the
// piece's length), metadata "optimizer"="adamw", "step", "owned_begin", "owned_end", and per piece
// "piece/<name>" = "<first element within the parameter>,<length>". Loading checks all of it against
// this optimizer (so resuming with a different world size or model is refused with a clear error).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "backend/memory.hpp"
#include "backend/ops.hpp"
#include "core/flat_range.hpp"
#include "io/safetensors.hpp"

namespace sinklab::train {

using sinklab::FlatRange;

// Equal-size shard length: ceil(ceil(n / align) / world) * align.
int64_t zero1_shard_size(int64_t n, int world, int64_t align = 1);
// Rank r's range [min(n, r*S), min(n, (r+1)*S)). The ranges of ranks 0..world-1 partition [0, n).
FlatRange zero1_partition(int64_t n, int world, int rank, int64_t align = 1);

// One trainable tensor: contiguous param and grad of the same shape, dtype (f32 or f64) and device.
struct ParamRef {
  std::string name;
  Tensor param;
  Tensor grad;
  // Element offset of param within the flat parameter buffer (needed with ZeRO-1). -1: the parameters
  // are taken as laid end to end in list order.
  int64_t flat_offset = -1;
  // -1: ask the decay predicate; 0/1: explicit.
  int decay = -1;
  double lr_scale = 1.0;  // this tensor's learning rate is step()'s lr times this
};

using DecayPredicate = std::function<bool(const std::string& name, const Tensor& param)>;
// The default split: param.ndim >= 2.
bool default_decay(const std::string& name, const Tensor& param);

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;  // the paper's default ratio
};

class AdamW {
 public:
  // `owned`: this rank's flat range (zero1_partition); an empty optional range {0, -1} means all.
  AdamW(std::vector<ParamRef> params, const AdamWConfig& cfg, FlatRange owned = {0, -1},
        const DecayPredicate& decay = default_decay);

  // One update at learning rate lr: increments the step counter t, then for every owned piece calls
  // ops::adamw_update at lr x its lr_scale, with weight_decay = cfg.weight_decay on decayed parameters, 0
  // otherwise, each gradient first scaled by grad_scale (the clipping factor); with flat buffers, one
  // ops::adamw_update_ranges call per distinct lr_scale for all pieces (the same arithmetic, element by element).
  void step(double lr, double grad_scale = 1.0);
  // The parameters are views of one flat buffer each (the model's, at their ParamRef::flat_offset): step()
  // then updates every piece in one multi-tensor call (one per distinct lr_scale), and writes the updated
  // parameters rounded into flat_params_lp (bf16, optional: the weights the next forward multiplies with).
  void use_flat_buffers(Tensor flat_params, Tensor flat_grads, Tensor flat_params_lp);
  int64_t step_count() const { return step_; }

  const AdamWConfig& config() const { return cfg_; }
  void set_config(const AdamWConfig& cfg) { cfg_ = cfg; }
  FlatRange owned() const { return owned_; }
  int64_t flat_size() const { return flat_size_; }     // end of the last parameter in the flat index space
  int64_t state_elements() const { return state_elems_; }  // elements of m (= of v) held for parameters here
  bool decays(const std::string& name) const;

  struct Piece {  // the part [first, first+length) of one parameter owned here (flattened)
    std::string name;
    bool decay = true;
    double lr_scale = 1.0;
    int64_t first = 0, length = 0;
    int64_t flat_begin = 0;  // its first element in the flat index space
    Tensor param, grad, m, v;  // 1-D views of length `length`
  };
  const std::vector<Piece>& pieces() const { return pieces_; }

  // The state as safetensors content. Tensors are views of the state (copied to host when the
  // state lives on a device: `host` keeps those copies alive).
  std::vector<io::NamedTensor> state_tensors(std::vector<Buffer>* host) const;
  std::map<std::string, std::string> state_metadata() const;
  // Restores m, v and the step from a state file; throws naming the file on any mismatch.
  void load_state(const io::SafetensorsFile& file);

  // Standalone files (the checkpoint writes the same content with extra metadata).
  void save_state(const std::string& path, const std::map<std::string, std::string>& extra = {}) const;
  void load_state(const std::string& path);

 private:
  AdamWConfig cfg_;
  FlatRange owned_;
  int64_t flat_size_ = 0, state_elems_ = 0, step_ = 0;
  std::map<std::string, bool> decay_;
  std::vector<Piece> pieces_;
  Buffer state_;  // m then v, each over the owned range of the flat index space
  struct FlatBuffers {
    Tensor param, grad, param_lp;  // the owned range of each (use_flat_buffers)
  };
  FlatBuffers flat_;
  struct FlatGroup {
    double lr_scale = 1.0;
    ops::FlatRanges ranges;  // its pieces within the owned range, tagged 1 where they decay
  };
  std::vector<FlatGroup> flat_groups_;  // the pieces by lr_scale, in order of first appearance
};

// torch.nn.utils.clip_grad_norm_'s factor: max_norm / (norm + 1e-6) when norm > max_norm, else 1
// (max_norm <= 0 disables clipping).
double clip_coefficient(double norm, double max_norm);

}  // namespace sinklab::train
