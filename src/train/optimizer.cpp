#include "train/optimizer.hpp"

#include <algorithm>
#include <cstdlib>
#include <set>

#include "core/error.hpp"

namespace sinklab::train {

int64_t zero1_shard_size(int64_t n, int world, int64_t align) {
  SL_CHECK(n >= 0, "zero1: negative element count %lld", (long long)n);
  SL_CHECK(world >= 1, "zero1: world size %d must be >= 1", world);
  SL_CHECK(align >= 1, "zero1: alignment %lld must be >= 1", (long long)align);
  const int64_t units = (n + align - 1) / align;
  return (units + world - 1) / world * align;
}

FlatRange zero1_partition(int64_t n, int world, int rank, int64_t align) {
  const int64_t shard = zero1_shard_size(n, world, align);
  SL_CHECK(rank >= 0 && rank < world, "zero1: rank %d outside [0, %d)", rank, world);
  return FlatRange{std::min(n, rank * shard), std::min(n, (rank + 1) * shard)};
}

bool default_decay(const std::string&, const Tensor& param) { return param.ndim >= 2; }

double clip_coefficient(double norm, double max_norm) {
  if (max_norm <= 0 || !(norm > max_norm)) return 1.0;
  return max_norm / (norm + 1e-6);
}

namespace {

Tensor flat_slice(const Tensor& t, int64_t first, int64_t length) {
  auto* base = static_cast<unsigned char*>(t.data) + size_t(first) * dtype_size(t.dtype);
  return Tensor::contiguous_view(base, t.dtype, &length, 1, t.device);
}

int64_t parse_int(const std::map<std::string, std::string>& meta, const std::string& key, const std::string& path) {
  auto it = meta.find(key);
  SL_CHECK(it != meta.end(), "%s: optimizer state lacks metadata \"%s\"", path.c_str(), key.c_str());
  char* end = nullptr;
  long long v = std::strtoll(it->second.c_str(), &end, 10);
  SL_CHECK(end && *end == '\0' && !it->second.empty(), "%s: metadata \"%s\" = \"%s\" is not an integer",
           path.c_str(), key.c_str(), it->second.c_str());
  return int64_t(v);
}

}  // namespace

AdamW::AdamW(std::vector<ParamRef> params, const AdamWConfig& cfg, FlatRange owned, const DecayPredicate& decay)
    : cfg_(cfg) {
  SL_CHECK(!params.empty(), "AdamW: no parameters");
  const DType dt = params[0].param.dtype;
  const Device dev = params[0].param.device;
  const bool explicit_offsets = params[0].flat_offset >= 0;
  std::set<std::string> names;
  int64_t cursor = 0;
  for (ParamRef& p : params) {
    const char* n = p.name.c_str();
    SL_CHECK(names.insert(p.name).second, "AdamW: parameter '%s' given twice", n);
    SL_CHECK(p.param.defined() && p.grad.defined(), "AdamW: parameter '%s' lacks its tensor or gradient", n);
    SL_CHECK(p.param.is_contiguous() && p.grad.is_contiguous(), "AdamW: parameter '%s' must be contiguous", n);
    SL_CHECK(p.param.dtype == DType::f32 || p.param.dtype == DType::f64,
             "AdamW: parameter '%s' is %s (f32 or f64 master weights expected)", n, dtype_name(p.param.dtype));
    SL_CHECK(p.param.dtype == dt && p.grad.dtype == dt, "AdamW: parameter '%s' dtype differs from the others", n);
    SL_CHECK(p.param.device == dev && p.grad.device == dev, "AdamW: parameter '%s' device differs from the others",
             n);
    SL_CHECK(p.grad.numel() == p.param.numel(), "AdamW: gradient of '%s' is %s, parameter is %s", n,
             p.grad.shape_str().c_str(), p.param.shape_str().c_str());
    SL_CHECK((p.flat_offset >= 0) == explicit_offsets,
             "AdamW: give flat offsets for every parameter or for none ('%s')", n);
    if (!explicit_offsets) p.flat_offset = cursor;
    cursor = p.flat_offset + p.param.numel();
    decay_[p.name] = p.decay >= 0 ? p.decay != 0 : decay(p.name, p.param);
  }
  // Offsets must not overlap.
  std::vector<const ParamRef*> order;
  for (const ParamRef& p : params) order.push_back(&p);
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->flat_offset < b->flat_offset; });
  int64_t end = 0;
  for (const ParamRef* p : order) {
    SL_CHECK(p->flat_offset >= end, "AdamW: parameter '%s' at flat offset %lld overlaps its predecessor",
             p->name.c_str(), (long long)p->flat_offset);
    end = p->flat_offset + p->param.numel();
  }
  flat_size_ = end;
  owned_ = owned.end < 0 ? FlatRange{0, flat_size_} : owned;
  SL_CHECK(owned_.begin >= 0 && owned_.begin <= owned_.end, "AdamW: owned range [%lld, %lld) is invalid",
           (long long)owned_.begin, (long long)owned_.end);

  // Pieces: each parameter's intersection with the owned range, in list order.
  for (const ParamRef& p : params) {
    const int64_t lo = std::max(owned_.begin, p.flat_offset);
    const int64_t hi = std::min(owned_.end, p.flat_offset + p.param.numel());
    if (hi <= lo) continue;
    Piece piece;
    piece.name = p.name;
    piece.decay = decay_[p.name];
    piece.lr_scale = p.lr_scale;
    piece.first = lo - p.flat_offset;
    piece.length = hi - lo;
    piece.flat_begin = lo;
    piece.param = flat_slice(p.param, piece.first, piece.length);
    piece.grad = flat_slice(p.grad, piece.first, piece.length);
    pieces_.push_back(piece);
    state_elems_ += piece.length;
  }
  // m and v mirror the owned range of the flat index space (a parameter's alignment padding included), so
  // that one multi-tensor call can update every piece of a flat parameter buffer (use_flat_buffers).
  const int64_t span = owned_.end - owned_.begin;
  if (state_elems_ > 0) {
    state_ = Buffer(size_t(2 * span) * dtype_size(dt), dev);
    Tensor all = state_.view(dt, {2 * span});
    ops::fill(all, 0.0);
    for (Piece& piece : pieces_) {
      const int64_t at = piece.flat_begin - owned_.begin;
      piece.m = flat_slice(all, at, piece.length);
      piece.v = flat_slice(all, span + at, piece.length);
    }
  }
}

void AdamW::use_flat_buffers(Tensor flat_params, Tensor flat_grads, Tensor flat_params_lp) {
  const int64_t n = owned_.end - owned_.begin;
  SL_CHECK(flat_params.ndim == 1 && flat_grads.ndim == 1 && flat_params.numel() >= owned_.end &&
               flat_grads.numel() == flat_params.numel() && flat_params.dtype == DType::f32,
           "AdamW::use_flat_buffers: flat f32 buffers covering the owned range expected");
  for (const Piece& piece : pieces_) {
    SL_CHECK(piece.param.data == flat_slice(flat_params, piece.flat_begin, 1).data &&
                 piece.grad.data == flat_slice(flat_grads, piece.flat_begin, 1).data,
             "AdamW::use_flat_buffers: parameter '%s' is not at its flat offset in the buffers", piece.name.c_str());
  }
  flat_ = FlatBuffers{flat_slice(flat_params, owned_.begin, n), flat_slice(flat_grads, owned_.begin, n),
                      flat_params_lp.defined() ? flat_slice(flat_params_lp, owned_.begin, n) : Tensor{}};
  flat_groups_.clear();
  for (const Piece& piece : pieces_) {
    auto group = std::find_if(flat_groups_.begin(), flat_groups_.end(),
                              [&](const FlatGroup& g) { return g.lr_scale == piece.lr_scale; });
    if (group == flat_groups_.end()) group = flat_groups_.insert(flat_groups_.end(), FlatGroup{piece.lr_scale, {}});
    group->ranges.ranges.push_back({piece.flat_begin - owned_.begin, piece.flat_begin - owned_.begin + piece.length});
    group->ranges.tags.push_back(piece.decay ? 1 : 0);
  }
}

bool AdamW::decays(const std::string& name) const {
  auto it = decay_.find(name);
  SL_CHECK(it != decay_.end(), "AdamW: unknown parameter '%s'", name.c_str());
  return it->second;
}

void AdamW::step(double lr, double grad_scale) {
  ++step_;
  ops::AdamWStep s;
  s.beta1 = cfg_.beta1;
  s.beta2 = cfg_.beta2;
  s.eps = cfg_.eps;
  s.step = step_;
  s.grad_scale = grad_scale;
  if (flat_.param.defined()) {  // every piece of one lr_scale in one call
    if (state_elems_ == 0) return;
    s.weight_decay = cfg_.weight_decay;
    const int64_t n = owned_.end - owned_.begin;
    Tensor all = state_.view(flat_.param.dtype, {2 * n});
    for (const FlatGroup& group : flat_groups_) {
      s.lr = lr * group.lr_scale;
      ops::adamw_update_ranges(flat_.param, flat_.grad, all.slice(0, 0, n), all.slice(0, n, n), flat_.param_lp,
                               group.ranges, s);
    }
    return;
  }
  for (const Piece& piece : pieces_) {
    s.lr = lr * piece.lr_scale;
    s.weight_decay = piece.decay ? cfg_.weight_decay : 0.0;
    ops::adamw_update(piece.param, piece.grad, piece.m, piece.v, s);
  }
}

std::vector<io::NamedTensor> AdamW::state_tensors(std::vector<Buffer>* host) const {
  std::vector<io::NamedTensor> out;
  auto add = [&](const std::string& name, const Tensor& t) {
    if (t.device.is_cpu()) {
      out.push_back({name, t});
      return;
    }
    SL_CHECK(host != nullptr, "AdamW::state_tensors: device state needs host buffers");
    host->emplace_back(t.nbytes(), Device::cpu());
    Tensor h = host->back().view(t.dtype, {t.numel()});
    ops::copy(h, t);
    out.push_back({name, h});
  };
  for (const Piece& piece : pieces_) add("exp_avg/" + piece.name, piece.m);
  for (const Piece& piece : pieces_) add("exp_avg_sq/" + piece.name, piece.v);
  return out;
}

std::map<std::string, std::string> AdamW::state_metadata() const {
  std::map<std::string, std::string> meta;
  meta["optimizer"] = "adamw";
  meta["step"] = std::to_string(step_);
  meta["owned_begin"] = std::to_string(owned_.begin);
  meta["owned_end"] = std::to_string(owned_.end);
  for (const Piece& piece : pieces_)
    meta["piece/" + piece.name] = std::to_string(piece.first) + "," + std::to_string(piece.length);
  return meta;
}

void AdamW::load_state(const io::SafetensorsFile& file) {
  const std::string& path = file.path();
  const auto& meta = file.metadata();
  auto opt = meta.find("optimizer");
  SL_CHECK(opt != meta.end() && opt->second == "adamw", "%s: not an AdamW optimizer state", path.c_str());
  const int64_t begin = parse_int(meta, "owned_begin", path), end = parse_int(meta, "owned_end", path);
  SL_CHECK(begin == owned_.begin && end == owned_.end,
           "%s: optimizer state covers flat range [%lld, %lld), this rank owns [%lld, %lld) (was the job "
           "resumed with a different number of ranks or another model?)",
           path.c_str(), (long long)begin, (long long)end, (long long)owned_.begin, (long long)owned_.end);
  const int64_t step = parse_int(meta, "step", path);
  SL_CHECK(step >= 0, "%s: negative optimizer step %lld", path.c_str(), (long long)step);
  size_t expected_tensors = 0;
  for (const Piece& piece : pieces_) {
    auto it = meta.find("piece/" + piece.name);
    const std::string want = std::to_string(piece.first) + "," + std::to_string(piece.length);
    SL_CHECK(it != meta.end() && it->second == want, "%s: optimizer state for '%s' is %s, expected %s",
             path.c_str(), piece.name.c_str(), it == meta.end() ? "missing" : it->second.c_str(), want.c_str());
    for (const char* kind : {"exp_avg/", "exp_avg_sq/"}) {
      const std::string name = kind + piece.name;
      const io::TensorEntry& e = file.entry(name);  // throws naming file and tensor when missing
      SL_CHECK(e.shape.size() == 1 && e.shape[0] == piece.length, "%s: '%s' has %zu dims / %lld elements, expected [%lld]",
               path.c_str(), name.c_str(), e.shape.size(), e.shape.empty() ? 0LL : (long long)e.shape[0],
               (long long)piece.length);
      expected_tensors++;
    }
  }
  SL_CHECK(file.names().size() == expected_tensors,
           "%s: optimizer state holds %zu tensors, this model's owned range needs %zu (another model?)",
           path.c_str(), file.names().size(), expected_tensors);
  for (const Piece& piece : pieces_) {
    ops::copy(piece.m, file.view("exp_avg/" + piece.name));
    ops::copy(piece.v, file.view("exp_avg_sq/" + piece.name));
  }
  step_ = step;
}

void AdamW::save_state(const std::string& path, const std::map<std::string, std::string>& extra) const {
  std::vector<Buffer> host;
  auto meta = state_metadata();
  for (const auto& kv : extra) {
    SL_CHECK(!meta.count(kv.first), "%s: metadata key \"%s\" is reserved by the optimizer", path.c_str(),
             kv.first.c_str());
    meta[kv.first] = kv.second;
  }
  io::write_safetensors(path, state_tensors(&host), meta);
}

void AdamW::load_state(const std::string& path) {
  io::SafetensorsFile file(path);
  load_state(file);
}

}  // namespace sinklab::train
