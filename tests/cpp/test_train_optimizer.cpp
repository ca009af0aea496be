// AdamW (decay split, a tensor's lr scale, equality with the op and with torch's formula, ZeRO-1 sharding,
// state round trip), learning-rate schedules and the stop-signal flag.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "test_util.hpp"
#include "train/optimizer.hpp"
#include "train/schedule.hpp"
#include "train/signals.hpp"

namespace sinklab {
namespace {

namespace fs = std::filesystem;
using test::Owned;
using train::AdamW;
using train::AdamWConfig;
using train::FlatRange;
using train::ParamRef;

// A tiny "model": parameters in one flat buffer at 16-element-aligned offsets, like the real layout.
struct FlatModel {
  struct Spec {
    std::string name;
    std::vector<int64_t> shape;
  };
  std::vector<Spec> specs = {{"model.embed_tokens.weight", {7, 5}},
                             {"model.layers.0.input_layernorm.weight", {5}},
                             {"model.layers.0.self_attn.q_proj.weight", {5, 5}},
                             {"model.layers.0.self_attn.q_proj.bias", {5}},
                             {"model.norm.weight", {5}},
                             {"lm_head.weight", {7, 5}}};
  DType dt;
  int64_t n = 0;
  std::vector<int64_t> offsets;
  Buffer params, grads;

  explicit FlatModel(DType dtype) : dt(dtype) {
    for (const auto& s : specs) {
      offsets.push_back(n);
      int64_t numel = 1;
      for (int64_t d : s.shape) numel *= d;
      n += (numel + 15) / 16 * 16;
    }
    params = Buffer(size_t(n) * dtype_size(dt), Device::cpu());
    grads = Buffer(size_t(n) * dtype_size(dt), Device::cpu());
    ops::fill(flat(false), 0.0);
    ops::fill(flat(true), 0.0);
    for (size_t i = 0; i < specs.size(); ++i) test::randn(tensor(i, false), 10 + i, 0.5);
  }
  Tensor flat(bool grad) const { return (grad ? grads : params).view(dt, {n}); }
  Tensor tensor(size_t i, bool grad) const {
    auto* base = static_cast<unsigned char*>((grad ? grads : params).data()) + size_t(offsets[i]) * dtype_size(dt);
    return Tensor::contiguous_view(base, dt, specs[i].shape.data(), int(specs[i].shape.size()), Device::cpu());
  }
  std::vector<ParamRef> refs(bool with_offsets = true) const {
    std::vector<ParamRef> out;
    for (size_t i = 0; i < specs.size(); ++i)
      out.push_back({specs[i].name, tensor(i, false), tensor(i, true), with_offsets ? offsets[i] : -1, -1});
    return out;
  }
  void random_grads(uint64_t stream) {
    for (size_t i = 0; i < specs.size(); ++i) test::randn(tensor(i, true), 1000 * stream + i, 1.0);
  }
  void copy_from(const FlatModel& o) {
    std::memcpy(params.data(), o.params.data(), params.bytes());
    std::memcpy(grads.data(), o.grads.data(), grads.bytes());
  }
  bool params_equal(const FlatModel& o) const { return std::memcmp(params.data(), o.params.data(), params.bytes()) == 0; }
};

TEST(Zero1, RangesPartitionTheFlatBuffer) {
  for (int64_t n : {0, 1, 2, 3, 7, 16, 17, 100, 1000, 12345}) {
    for (int world : {1, 2, 3, 4, 8, 16, 64}) {
      for (int64_t align : {1, 16}) {
        const int64_t shard = train::zero1_shard_size(n, world, align);
        EXPECT_EQ(shard % align, 0);
        EXPECT_GE(shard * world, n);
        int64_t cursor = 0;
        for (int r = 0; r < world; ++r) {
          FlatRange range = train::zero1_partition(n, world, r, align);
          ASSERT_EQ(range.begin, cursor) << n << " " << world << " " << r;
          ASSERT_LE(range.begin, range.end);
          EXPECT_LE(range.size(), shard);
          if (range.end < n) {
            EXPECT_EQ(range.end % align, 0);  // interior boundaries aligned
          }
          cursor = range.end;
        }
        EXPECT_EQ(cursor, n) << n << " " << world;
      }
    }
  }
  // n < world: one element each for the first n ranks, empty ranges after.
  EXPECT_EQ(train::zero1_partition(3, 8, 2), (FlatRange{2, 3}));
  EXPECT_EQ(train::zero1_partition(3, 8, 5), (FlatRange{3, 3}));
  EXPECT_EQ(train::zero1_partition(10, 4, 3), (FlatRange{9, 10}));
  EXPECT_THROW(train::zero1_partition(10, 4, 4), Error);
}

TEST(AdamW, DecaySplitByRank) {
  FlatModel model(DType::f32);
  AdamW opt(model.refs(), AdamWConfig{});
  EXPECT_TRUE(opt.decays("model.embed_tokens.weight"));
  EXPECT_TRUE(opt.decays("model.layers.0.self_attn.q_proj.weight"));
  EXPECT_TRUE(opt.decays("lm_head.weight"));
  EXPECT_FALSE(opt.decays("model.layers.0.input_layernorm.weight"));
  EXPECT_FALSE(opt.decays("model.layers.0.self_attn.q_proj.bias"));
  EXPECT_FALSE(opt.decays("model.norm.weight"));
  // An explicit flag wins over the predicate; a custom predicate is honoured.
  auto refs = model.refs();
  refs[0].decay = 0;
  AdamW explicit_opt(refs, AdamWConfig{});
  EXPECT_FALSE(explicit_opt.decays("model.embed_tokens.weight"));
  AdamW no_embed(model.refs(), AdamWConfig{}, {0, -1}, [](const std::string& name, const Tensor& t) {
    return t.ndim >= 2 && name.find("embed") == std::string::npos;
  });
  EXPECT_FALSE(no_embed.decays("model.embed_tokens.weight"));
  EXPECT_TRUE(no_embed.decays("lm_head.weight"));
}

TEST(AdamW, DecayAppliesOnlyToDecayedParameters) {
  FlatModel model(DType::f64), before(DType::f64);
  before.copy_from(model);
  AdamWConfig cfg;
  cfg.weight_decay = 0.5;
  AdamW opt(model.refs(), cfg);
  opt.step(0.1);  // zero gradients: only decay moves anything
  for (size_t i = 0; i < model.specs.size(); ++i) {
    Tensor now = model.tensor(i, false), was = before.tensor(i, false);
    const double factor = opt.decays(model.specs[i].name) ? 1.0 - 0.1 * 0.5 : 1.0;
    for (int64_t k = 0; k < now.numel(); ++k)
      EXPECT_NEAR(test::element(now, k), factor * test::element(was, k), 1e-7) << model.specs[i].name;
  }
}

TEST(AdamW, StepsEqualTheOpCalledByHand) {
  FlatModel a(DType::f32), b(DType::f32);
  b.copy_from(a);
  AdamWConfig cfg{0.9, 0.95, 1e-8, 0.1};
  AdamW opt(a.refs(), cfg);
  std::vector<Owned> m, v;
  for (size_t i = 0; i < b.specs.size(); ++i) {
    m.emplace_back(DType::f32, b.specs[i].shape);
    v.emplace_back(DType::f32, b.specs[i].shape);
  }
  const double lrs[] = {1e-3, 2e-3, 5e-4, 1e-3};
  for (int t = 1; t <= 4; ++t) {
    a.random_grads(uint64_t(t));
    b.random_grads(uint64_t(t));
    opt.step(lrs[t - 1]);
    for (size_t i = 0; i < b.specs.size(); ++i) {
      ops::AdamWStep s{lrs[t - 1], 0.9, 0.95, 1e-8, b.tensor(i, false).ndim >= 2 ? 0.1 : 0.0, t};
      ops::adamw_update(b.tensor(i, false), b.tensor(i, true), m[i], v[i], s);
    }
    EXPECT_TRUE(a.params_equal(b)) << "step " << t;
  }
  EXPECT_EQ(opt.step_count(), 4);
}

// lr_scale: a tensor's update is the one a run at lr x lr_scale makes (AdamW is not scale-free in the lr: the
// step is lr m/(sqrt(v) + eps), linear in it); the others' updates are untouched, bit for bit. Per piece and
// through the flat buffers' multi-tensor call (one call per distinct lr_scale) alike.
TEST(AdamW, LrScaleMultipliesOnlyItsTensorsLearningRate) {
  for (bool flat : {false, true}) {
    SCOPED_TRACE(flat ? "flat buffers" : "per piece");
    FlatModel a(DType::f32), b(DType::f32), c(DType::f32);
    b.copy_from(a);
    c.copy_from(a);
    AdamWConfig cfg{0.9, 0.95, 1e-8, 0.1};
    std::vector<ParamRef> scaled = a.refs();
    scaled[3].lr_scale = 10.0;  // the bias: one tensor at 10x
    AdamW opt_a(scaled, cfg), opt_b(b.refs(), cfg);
    std::vector<ParamRef> all_fast = c.refs();
    for (ParamRef& r : all_fast) r.lr_scale = 10.0;
    AdamW opt_c(all_fast, cfg);
    if (flat) {
      opt_a.use_flat_buffers(a.flat(false), a.flat(true), Tensor{});
      opt_b.use_flat_buffers(b.flat(false), b.flat(true), Tensor{});
      opt_c.use_flat_buffers(c.flat(false), c.flat(true), Tensor{});
    }
    EXPECT_EQ(opt_a.pieces()[3].lr_scale, 10.0);
    for (int t = 1; t <= 3; ++t) {
      a.random_grads(uint64_t(t));
      b.random_grads(uint64_t(t));
      c.random_grads(uint64_t(t));
      opt_a.step(1e-3);
      opt_b.step(1e-3);
      opt_c.step(1e-3);
    }
    for (size_t i = 0; i < a.specs.size(); ++i) {
      const FlatModel& same = i == 3 ? c : b;  // the scaled tensor as in the all-10x run, the rest as at 1x
      const Tensor mine = a.tensor(i, false), want = same.tensor(i, false);
      EXPECT_EQ(std::memcmp(mine.data, want.data, mine.nbytes()), 0) << a.specs[i].name;
    }
    EXPECT_FALSE(a.params_equal(b));
  }
}

// The flat buffers' multi-tensor step is the per-piece step, bit for bit (decayed and undecayed pieces, one at
// another lr_scale), and it writes the bf16 weights rounded from the updated f32 ones.
TEST(AdamW, FlatBuffersEqualThePerPieceSteps) {
  FlatModel a(DType::f32), b(DType::f32);
  b.copy_from(a);
  AdamWConfig cfg{0.9, 0.95, 1e-8, 0.1};
  std::vector<ParamRef> ra = a.refs(), rb = b.refs();
  ra[1].lr_scale = rb[1].lr_scale = 3.0;
  AdamW opt_a(ra, cfg), opt_b(rb, cfg);
  Owned lp(DType::bf16, {b.n}), lp_want(DType::bf16, {b.n});
  ops::fill(lp, 0.0);
  opt_b.use_flat_buffers(b.flat(false), b.flat(true), lp);
  for (int t = 1; t <= 3; ++t) {
    a.random_grads(uint64_t(t));
    b.random_grads(uint64_t(t));
    opt_a.step(2e-3, 0.5);
    opt_b.step(2e-3, 0.5);
    EXPECT_TRUE(a.params_equal(b)) << "step " << t;
  }
  ops::fill(lp_want, 0.0);
  for (size_t i = 0; i < b.specs.size(); ++i) {  // the padding between parameters stays as filled
    const Tensor p = b.tensor(i, false);
    ops::copy(lp_want.t.slice(0, b.offsets[i], p.numel()), p.reshape({p.numel()}));
  }
  EXPECT_EQ(std::memcmp(lp.t.data, lp_want.t.data, lp.t.nbytes()), 0);
}

TEST(AdamW, MatchesTorchFormulaInDouble) {
  FlatModel model(DType::f64), ref(DType::f64);
  ref.copy_from(model);
  AdamWConfig cfg{0.9, 0.95, 1e-8, 0.1};
  AdamW opt(model.refs(false), cfg);
  const int64_t n = model.n;
  std::vector<double> m(size_t(n), 0.0), v(size_t(n), 0.0);
  std::vector<int> decay(size_t(n), 0);
  for (size_t i = 0; i < model.specs.size(); ++i)
    for (int64_t k = 0; k < model.tensor(i, false).numel(); ++k)
      decay[size_t(model.offsets[i] + k)] = model.specs[i].shape.size() >= 2;
  for (int t = 1; t <= 5; ++t) {
    model.random_grads(uint64_t(t));
    const double lr = 1e-2 * t;
    opt.step(lr);
    // torch.optim.AdamW (single-tensor path): decoupled decay, bias-corrected moments.
    double* p = static_cast<double*>(ref.params.data());
    const double* g = static_cast<const double*>(model.grads.data());
    const double bc1 = 1 - std::pow(0.9, t), bc2 = 1 - std::pow(0.95, t);
    for (int64_t k = 0; k < n; ++k) {
      p[k] *= 1 - lr * (decay[size_t(k)] ? 0.1 : 0.0);
      m[size_t(k)] = 0.9 * m[size_t(k)] + 0.1 * g[k];
      v[size_t(k)] = 0.95 * v[size_t(k)] + 0.05 * g[k] * g[k];
      p[k] -= lr / bc1 * m[size_t(k)] / (std::sqrt(v[size_t(k)]) / std::sqrt(bc2) + 1e-8);
    }
  }
  // The padding between parameters is never touched; everything else agrees to rounding. (The op
  // receives its constants as float, so agreement is to f32 precision of lr/betas.)
  EXPECT_LT(test::rel_error(model.flat(false), ref.flat(false)), 1e-6);
}

TEST(AdamW, Zero1ShardsEqualTheUnshardedOptimizer) {
  for (int world : {1, 2, 3, 5, 64, 300}) {
    FlatModel full(DType::f32), sharded(DType::f32);
    sharded.copy_from(full);
    AdamW reference(full.refs(), AdamWConfig{});
    std::vector<std::unique_ptr<AdamW>> ranks;
    int64_t state = 0;
    for (int r = 0; r < world; ++r) {
      ranks.push_back(std::make_unique<AdamW>(sharded.refs(), AdamWConfig{},
                                              train::zero1_partition(sharded.n, world, r, 16)));
      state += ranks.back()->state_elements();
    }
    EXPECT_EQ(state, reference.state_elements()) << "world " << world;  // padding holds no state
    for (int t = 1; t <= 3; ++t) {
      full.random_grads(uint64_t(t));
      sharded.random_grads(uint64_t(t));
      reference.step(1e-2);
      for (auto& r : ranks) r->step(1e-2);  // each rank updates its range of the shared buffer (= after all-gather)
      EXPECT_TRUE(sharded.params_equal(full)) << "world " << world << " step " << t;
    }
  }
}

class AdamWState : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("sinklab_test_opt_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(AdamWState, SaveLoadRoundTripIsBitExact) {
  FlatModel a(DType::f32);
  AdamW opt(a.refs(), AdamWConfig{}, train::zero1_partition(a.n, 3, 1, 16));
  for (int t = 1; t <= 3; ++t) {
    a.random_grads(uint64_t(t));
    opt.step(1e-2);
  }
  const std::string path = (dir_ / "opt.safetensors").string();
  opt.save_state(path, {{"data_step", "3"}});

  FlatModel b(DType::f32);
  b.copy_from(a);
  AdamW restored(b.refs(), AdamWConfig{}, train::zero1_partition(b.n, 3, 1, 16));
  restored.load_state(path);
  EXPECT_EQ(restored.step_count(), 3);
  ASSERT_EQ(restored.pieces().size(), opt.pieces().size());
  for (size_t i = 0; i < opt.pieces().size(); ++i) {
    EXPECT_EQ(std::memcmp(restored.pieces()[i].m.data, opt.pieces()[i].m.data, opt.pieces()[i].m.nbytes()), 0);
    EXPECT_EQ(std::memcmp(restored.pieces()[i].v.data, opt.pieces()[i].v.data, opt.pieces()[i].v.nbytes()), 0);
  }
  // Continuing from the restored state is bit-identical to never having stopped.
  for (int t = 4; t <= 6; ++t) {
    a.random_grads(uint64_t(t));
    b.random_grads(uint64_t(t));
    opt.step(1e-2);
    restored.step(1e-2);
  }
  EXPECT_TRUE(a.params_equal(b));

  // A state from another rank's range (a different world size) or another model is refused, naming it.
  AdamW other_rank(b.refs(), AdamWConfig{}, train::zero1_partition(b.n, 3, 2, 16));
  try {
    other_rank.load_state(path);
    FAIL() << "state of another rank accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("opt.safetensors"), std::string::npos) << e.what();
  }
  io::SafetensorsFile file(path);
  EXPECT_EQ(file.metadata().at("data_step"), "3");
  EXPECT_EQ(file.metadata().at("step"), "3");
}

TEST_F(AdamWState, EmptyShardRoundTrips) {
  FlatModel a(DType::f32);
  AdamW opt(a.refs(), AdamWConfig{}, train::zero1_partition(a.n, 4 * int(a.n), 4 * int(a.n) - 1, 1));
  EXPECT_EQ(opt.state_elements(), 0);
  const std::string path = (dir_ / "empty.safetensors").string();
  opt.save_state(path);
  AdamW again(a.refs(), AdamWConfig{}, opt.owned());
  again.load_state(path);
  EXPECT_EQ(again.step_count(), 0);
}

TEST(ClipCoefficient, MatchesTorch) {
  EXPECT_EQ(train::clip_coefficient(0.5, 1.0), 1.0);
  EXPECT_EQ(train::clip_coefficient(1.0, 1.0), 1.0);
  EXPECT_DOUBLE_EQ(train::clip_coefficient(4.0, 1.0), 1.0 / (4.0 + 1e-6));
  EXPECT_EQ(train::clip_coefficient(4.0, 0.0), 1.0);
}

// ---------------------------------------------------------------------------------------------------

TEST(Schedule, WarmupThenConstant) {
  train::ScheduleConfig cfg;
  cfg.kind = train::LrSchedule::constant;
  cfg.lr = 1e-3;
  cfg.warmup_steps = 10;
  cfg.total_steps = 100;
  EXPECT_DOUBLE_EQ(train::learning_rate(cfg, 0), 1e-4);
  EXPECT_DOUBLE_EQ(train::learning_rate(cfg, 4), 5e-4);
  EXPECT_EQ(train::learning_rate(cfg, 9), 1e-3);
  EXPECT_EQ(train::learning_rate(cfg, 10), 1e-3);
  EXPECT_EQ(train::learning_rate(cfg, 99), 1e-3);
  EXPECT_EQ(train::learning_rate(cfg, 1000), 1e-3);
  cfg.warmup_steps = 0;
  EXPECT_EQ(train::learning_rate(cfg, 0), 1e-3);
}

TEST(Schedule, CosineEndpointsAndMidpoint) {
  train::ScheduleConfig cfg;
  cfg.kind = train::LrSchedule::cosine;
  cfg.lr = 4e-4;
  cfg.min_lr = 4e-5;
  cfg.warmup_steps = 10;
  cfg.total_steps = 110;  // decay over steps 10..109, p = (s - 9) / 100
  EXPECT_DOUBLE_EQ(train::learning_rate(cfg, 0), 4e-5);
  EXPECT_EQ(train::learning_rate(cfg, 9), 4e-4);              // peak at the end of warmup
  EXPECT_EQ(train::learning_rate(cfg, 59), (4e-4 + 4e-5) / 2);  // p = 1/2
  EXPECT_EQ(train::learning_rate(cfg, 109), 4e-5);            // min at the last step
  EXPECT_EQ(train::learning_rate(cfg, 500), 4e-5);
  EXPECT_DOUBLE_EQ(train::learning_rate(cfg, 34), 4e-5 + (4e-4 - 4e-5) * 0.5 * (1 + std::cos(M_PI * 0.25)));
  for (int64_t s = 10; s < 110; ++s) EXPECT_LE(train::learning_rate(cfg, s), train::learning_rate(cfg, s - 1));
  // Without warmup the decay starts right away and still ends at min_lr.
  cfg.warmup_steps = 0;
  cfg.total_steps = 4;
  EXPECT_DOUBLE_EQ(train::learning_rate(cfg, 1), (4e-4 + 4e-5) / 2);
  EXPECT_EQ(train::learning_rate(cfg, 3), 4e-5);
}

TEST(Schedule, ParseAndValidate) {
  EXPECT_EQ(train::parse_lr_schedule("cosine"), train::LrSchedule::cosine);
  EXPECT_EQ(train::parse_lr_schedule("constant"), train::LrSchedule::constant);
  try {
    train::parse_lr_schedule("linear");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--lr-schedule"), std::string::npos);
  }
  train::ScheduleConfig cfg;
  cfg.lr = 1e-3;
  cfg.min_lr = 1e-2;
  EXPECT_THROW(train::validate(cfg), Error);
  cfg.min_lr = 0;
  EXPECT_NO_THROW(train::validate(cfg));
}

TEST(Signals, TermAndUsr1SetTheStopFlag) {
  train::install_stop_handlers();
  train::clear_stop_request();
  EXPECT_FALSE(train::stop_requested());
  std::raise(SIGUSR1);
  EXPECT_TRUE(train::stop_requested());
  EXPECT_EQ(train::stop_signal(), SIGUSR1);
  train::clear_stop_request();
  std::raise(SIGTERM);  // handled: the process keeps running
  EXPECT_TRUE(train::stop_requested());
  EXPECT_EQ(train::stop_signal(), SIGTERM);
  train::clear_stop_request();
  train::request_stop();
  EXPECT_TRUE(train::stop_requested());
  train::clear_stop_request();
}

}  // namespace
}  // namespace sinklab
