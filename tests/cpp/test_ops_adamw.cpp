// AdamW and gradient-norm clipping on the CPU backend against torch.optim.AdamW /
// torch.nn.utils.clip_grad_norm_ in float64 (tests/python/goldens/gen_adamw.py), in f32 and f64.
#include <cmath>
#include <string>
#include <vector>

#include "backend/adamw_math.hpp"
#include "test_util.hpp"

namespace sinklab {
namespace {

using test::Golden;
using test::Owned;
using test::rel_error;
using test::kDtypes;
using test::tol;

// Five consecutive steps from p0 with m = v = 0; param, m and v checked after every step.
TEST(AdamW, MatchesTorchOverFiveSteps) {
  Golden g("adamw.safetensors");
  int n_cases = 0;
  for (const std::string& c : g.cases()) {
    if (c.rfind("adamw_", 0) != 0) continue;
    ++n_cases;
    for (DType dt : kDtypes) {
      SCOPED_TRACE(c + " " + dtype_name(dt));
      Owned p = g.get(c + "/p0", dt);
      std::vector<int64_t> dims(p.t.shape.begin(), p.t.shape.begin() + p.t.ndim);
      Owned m(dt, dims), v(dt, dims);
      ops::AdamWStep s;
      s.lr = g.param(c + "/lr");
      s.beta1 = g.param(c + "/beta1");
      s.beta2 = g.param(c + "/beta2");
      s.eps = g.param(c + "/eps");
      s.weight_decay = g.param(c + "/weight_decay");
      const int steps = int(g.param(c + "/steps"));
      ASSERT_EQ(steps, 5);
      for (int t = 1; t <= steps; ++t) {
        const std::string k = std::to_string(t);
        Owned grad = g.get(c + "/g" + k, dt);
        s.step = t;
        ops::adamw_update(p, grad, m, v, s);
        EXPECT_LE(rel_error(p, g.raw(c + "/p" + k)), tol(dt)) << "param after step " << t;
        EXPECT_LE(rel_error(m, g.raw(c + "/m" + k)), tol(dt)) << "m after step " << t;
        EXPECT_LE(rel_error(v, g.raw(c + "/v" + k)), tol(dt)) << "v after step " << t;
      }
      // The update moved the parameters by much more than the tolerance (the test can fail).
      EXPECT_GT(rel_error(p, g.raw(c + "/p0")), 100 * tol(dt));
    }
  }
  EXPECT_EQ(n_cases, 3);
}

// A large tensor takes the OpenMP path; sampled elements must match the scalar update.
TEST(AdamW, ParallelPathMatchesElementUpdate) {
  const int64_t n = 300001;
  Owned p(DType::f32, {n}), gr(DType::f32, {n}), m(DType::f32, {n}), v(DType::f32, {n});
  test::randn(p, 1);
  test::randn(gr, 2);
  Owned p0 = Owned::copy_of(p, DType::f32);
  ops::AdamWStep s;
  s.lr = 1e-2;
  s.weight_decay = 0.1;
  s.step = 3;
  ops::adamw_update(p, gr, m, v, s);
  auto c = math::adamw_constants(s.lr, s.beta1, s.beta2, s.eps, s.weight_decay, s.step);
  for (int64_t i = 0; i < n; i += 997) {
    float pp = p0.data<float>()[i], mm = 0, vv = 0;
    math::adamw_element<float>(pp, gr.data<float>()[i], mm, vv, c);
    // (the library is built with -march=native: FMA contraction may differ in the last bit)
    ASSERT_NEAR(pp, p.data<float>()[i], 1e-6 * std::fabs(pp)) << i;
    ASSERT_NEAR(mm, m.data<float>()[i], 1e-6 * std::fabs(mm)) << i;
    ASSERT_NEAR(vv, v.data<float>()[i], 1e-6 * std::fabs(vv)) << i;
  }
}

TEST(AdamW, RejectsBadArguments) {
  Owned p(DType::f32, {4}), g(DType::f32, {4}), m(DType::f32, {4}), v(DType::f32, {4}), bad(DType::f32, {5});
  Owned g64(DType::f64, {4});
  ops::AdamWStep s;
  s.step = 0;
  EXPECT_THROW(ops::adamw_update(p, g, m, v, s), Error);
  s.step = 1;
  EXPECT_THROW(ops::adamw_update(p, bad, m, v, s), Error);
  EXPECT_THROW(ops::adamw_update(p, g64, m, v, s), Error);
  EXPECT_NO_THROW(ops::adamw_update(p, g, m, v, s));
}

TEST(ClipGradNorm, MatchesTorch) {
  Golden g("adamw.safetensors");
  for (const std::string c : {"clip_on", "clip_off"}) {
    for (DType dt : kDtypes) {
      SCOPED_TRACE(c + " " + dtype_name(dt));
      std::vector<Owned> grads;
      for (int i = 0; i < 3; ++i) grads.push_back(g.get(c + "/g" + std::to_string(i), dt));
      std::vector<Tensor> views;
      for (const Owned& o : grads) views.push_back(o.t);
      const double want = g.param(c + "/norm");
      EXPECT_NEAR(ops::global_norm(views) / want, 1.0, 1e-12);
      const double norm = ops::clip_grad_norm(views, g.param(c + "/max_norm"));
      EXPECT_NEAR(norm / want, 1.0, 1e-12);
      for (int i = 0; i < 3; ++i)
        EXPECT_LE(rel_error(grads[size_t(i)], g.raw(c + "/c" + std::to_string(i))), tol(dt)) << "grad " << i;
    }
  }
  EXPECT_GT(g.param("clip_on/norm"), g.param("clip_on/max_norm"));
  EXPECT_LT(g.param("clip_off/norm"), g.param("clip_off/max_norm"));
}

}  // namespace
}  // namespace sinklab
