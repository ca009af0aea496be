// CUDA cross_entropy (fused loss and gradient) against the CPU backend (label "gpu"; skips without a
// usable CUDA device): f32 within 1e-5 (max error over max |reference|) for losses and gradients; two
// runs give the same bits. One row, one-logit rows, vocabularies off every block multiple up to
// GPT-2's 50257, ignored rows, targets at 0 and V-1, large logits, strided logit rows, the gradient
// written over the logits (aliasing) or skipped. A target outside the vocabulary is reported at the
// next synchronisation.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "gpu/gpu_test_util.hpp"

namespace sinklab {
namespace {

using gpu_test::Dev;
using gpu_test::poison;
using gpu_test::random_host;
using gpu_test::same_bits;
using gpu_test::to_device;
using gpu_test::to_host;
using test::Owned;
using test::rel_error;

constexpr double kTol = 1e-5;
constexpr int kIgnore = -100;

Owned make_targets(int64_t n, int64_t vocab) {
  Owned t(DType::i32, {n});
  for (int64_t i = 0; i < n; ++i) {
    int64_t v = (i * 7919 + 13) % vocab;
    if (i % 5 == 1) v = 0;
    if (i % 5 == 2) v = vocab - 1;
    if (i % 5 == 4 && n > 1) v = kIgnore;
    t.data<int32_t>()[i] = int32_t(v);
  }
  return t;
}

struct Case {
  int64_t n, vocab;
  double scale;
};

TEST(CudaCrossEntropy, MatchesCpu) {
  SKIP_WITHOUT_CUDA();
  const std::vector<Case> cases = {{1, 1, 1.0}, {3, 1, 1.0}, {1, 7, 1.0}, {37, 1000, 3.0}, {64, 513, 30.0}, {9, 50257, 5.0}};
  uint64_t stream = 10;
  for (const Case& c : cases) {
    SCOPED_TRACE("N " + std::to_string(c.n) + " V " + std::to_string(c.vocab) + " scale " + std::to_string(c.scale));
    Owned wide = random_host(DType::f32, {c.n, c.vocab + 3}, stream++, c.scale);
    Tensor logits = wide.t.slice(1, 0, c.vocab);
    Owned targets = make_targets(c.n, c.vocab);
    int64_t counted = 0;
    for (int64_t i = 0; i < c.n; ++i) counted += targets.data<int32_t>()[i] != kIgnore;
    const double grad_scale = counted ? 1.0 / double(counted) : 0.0;
    Dev dwide = to_device(wide.t), dtargets = to_device(targets.t);
    Tensor dlogits = dwide.t.slice(1, 0, c.vocab);

    Owned losses(DType::f32, {c.n}), d_logits(DType::f32, {c.n, c.vocab});
    ops::cross_entropy(losses.t, d_logits.t, logits, targets.t, kIgnore, grad_scale);
    Dev glosses(DType::f32, {c.n}), gd_logits(DType::f32, {c.n, c.vocab});
    poison(glosses.t);
    poison(gd_logits.t);
    ops::cross_entropy(glosses.t, gd_logits.t, dlogits, dtargets.t, kIgnore, grad_scale);
    Owned glosses_h = to_host(glosses.t), gd_h = to_host(gd_logits.t);
    EXPECT_LE(rel_error(glosses_h.t, losses.t), kTol) << "losses";
    EXPECT_LE(rel_error(gd_h.t, d_logits.t), kTol) << "d_logits";

    // Losses only; then the gradient over the logits themselves: the same bits as above.
    Dev glosses2(DType::f32, {c.n});
    ops::cross_entropy(glosses2.t, Tensor{}, dlogits, dtargets.t, kIgnore, grad_scale);
    EXPECT_TRUE(same_bits(to_host(glosses2.t).t, glosses_h.t)) << "losses without gradient";
    ops::cross_entropy(glosses2.t, dlogits, dlogits, dtargets.t, kIgnore, grad_scale);
    EXPECT_TRUE(same_bits(to_host(glosses2.t).t, glosses_h.t)) << "losses, aliased";
    EXPECT_TRUE(same_bits(Owned::copy_of(to_host(dwide.t).t.slice(1, 0, c.vocab), DType::f32).t, gd_h.t))
        << "d_logits aliasing logits";
  }
}

// bf16 storage, as the fused classifier runs it: bf16 logits (strided rows), f32 losses, bf16 d_logits written
// over the logits in place, against the CPU's bf16 storage.
TEST(CudaCrossEntropyBf16, InPlaceGradientMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  const std::vector<Case> cases = {{1, 1, 1.0}, {1, 7, 1.0}, {37, 1000, 3.0}, {9, 50257, 5.0}};
  uint64_t stream = 40;
  for (const Case& c : cases) {
    SCOPED_TRACE("N " + std::to_string(c.n) + " V " + std::to_string(c.vocab));
    gpu_test::HostDev wide = gpu_test::random_pair(DType::bf16, {c.n, c.vocab + 5}, stream++, c.scale);
    const Tensor logits = wide.host.t.slice(1, 0, c.vocab), dlogits = wide.dev.t.slice(1, 0, c.vocab);
    Owned targets = make_targets(c.n, c.vocab);
    Dev dtargets = to_device(targets.t);
    Owned losses(DType::f32, {c.n});
    Dev glosses(DType::f32, {c.n});
    poison(glosses.t);
    ops::cross_entropy(losses.t, logits, logits, targets.t, kIgnore, 0.125);
    ops::cross_entropy(glosses.t, dlogits, dlogits, dtargets.t, kIgnore, 0.125);
    EXPECT_LE(rel_error(to_host(glosses.t).t, losses.t), kTol) << "losses";
    EXPECT_LE(gpu_test::device_error(wide.dev.t, wide.host.t), gpu_test::kBf16Tol) << "d_logits over the logits";
  }
}

TEST(CudaCrossEntropy, OutOfRangeTargetIsReported) {
  SKIP_WITHOUT_CUDA();
  Owned logits = random_host(DType::f32, {6, 10}, 77);
  Owned targets = make_targets(6, 10);
  targets.data<int32_t>()[3] = 10;
  Dev dlogits = to_device(logits.t), dtargets = to_device(targets.t);
  Dev losses(DType::f32, {6});
  try {
    ops::cross_entropy(losses.t, Tensor{}, dlogits.t, dtargets.t, kIgnore, 1.0);
    backend_for(Device::cuda(0)).synchronize();
    ADD_FAILURE() << "the bad target was not reported";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cross_entropy"), std::string::npos) << what;
    EXPECT_NE(what.find("target 10 of row 3"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace sinklab
