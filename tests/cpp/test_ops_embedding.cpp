// Embedding lookup and its scatter-add backward (CPU, f32 and f64) against F.embedding float64 goldens
// (tests/python/goldens/gen_embedding.py), plus range errors, race-freedom of the parallel backward and
// a finite-difference check in f64.
#include <omp.h>

#include <string>
#include <vector>

#include "test_util.hpp"

namespace sinklab {
namespace {

using test::Golden;
using test::Owned;
using test::rel_error;
using test::kDtypes;
using test::tol;
using test::dims_of;

Owned ids_of(const Golden& g, const std::string& c) {
  Tensor raw = g.raw(c + "/ids");
  Owned ids(DType::i32, dims_of(raw));
  for (int64_t i = 0; i < raw.numel(); ++i) ids.data<int32_t>()[i] = raw.ptr<int32_t>()[i];
  return ids;
}

// Forward (into a contiguous and into a row-strided out), backward twice: d_table accumulates, so it
// must hold twice the reference (a forward gather is exact: any difference is a bug, hence == 0).
TEST(OpsEmbedding, GoldenForwardBackward) {
  Golden g("embedding.safetensors");
  ASSERT_GE(g.cases().size(), 3u);
  for (DType dt : kDtypes) {
    for (const std::string& c : g.cases()) {
      SCOPED_TRACE(c + (dt == DType::f32 ? " f32" : " f64"));
      Owned ids = ids_of(g, c), table = g.get(c + "/table", dt), dout = g.get(c + "/d_out", dt);
      const int64_t n = ids.t.numel(), d = table.t.shape[1];
      Owned out(dt, {n, d});
      ops::embedding_forward(out, ids, table);
      EXPECT_EQ(rel_error(out, g.raw(c + "/out")), 0.0);
      Owned wide(dt, {n, d + 7});
      Tensor strided = wide.t.slice(1, 3, d);
      ops::embedding_forward(strided, ids, table);
      EXPECT_EQ(rel_error(strided, g.raw(c + "/out")), 0.0);
      Owned d_table(dt, dims_of(table.t));
      ops::embedding_backward(d_table, dout, ids);
      EXPECT_LE(rel_error(d_table, g.raw(c + "/d_table")), tol(dt));
      ops::embedding_backward(d_table, dout, ids);
      Owned twice = g.get(c + "/d_table", DType::f64);
      ops::scale(twice, 2.0);
      EXPECT_LE(rel_error(d_table, twice), tol(dt));
    }
  }
}

TEST(OpsEmbedding, CasesCoverTheAcceptanceShapes) {
  Golden g("embedding.safetensors");
  bool n1 = false, n67 = false, repeats = false;
  for (const std::string& c : g.cases()) {
    Tensor ids = g.raw(c + "/ids");
    n1 |= ids.numel() == 1;
    n67 |= ids.numel() == 67;
    for (int64_t i = 0; i < ids.numel(); ++i)
      for (int64_t j = 0; j < i; ++j) repeats |= ids.ptr<int32_t>()[i] == ids.ptr<int32_t>()[j];
  }
  EXPECT_TRUE(n1 && n67 && repeats);
}

// Out-of-range ids (>= V or negative) throw a sinklab::Error that names the id, in both directions.
TEST(OpsEmbedding, OutOfRangeIdThrowsNamingTheId) {
  Owned table(DType::f32, {10, 4}), out(DType::f32, {3, 4}), ids(DType::i32, std::vector<int64_t>{3});
  for (int32_t bad : {10, -1, 123456}) {
    ids.data<int32_t>()[0] = 1, ids.data<int32_t>()[1] = bad, ids.data<int32_t>()[2] = 2;
    try {
      ops::embedding_forward(out, ids, table);
      ADD_FAILURE() << "no error for id " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("id " + std::to_string(bad)), std::string::npos) << e.what();
    }
    EXPECT_THROW(ops::embedding_backward(table, out, ids), Error);
  }
  // Wrong id dtype / count.
  Owned fids(DType::f32, {3});
  EXPECT_THROW(ops::embedding_forward(out, fids, table), Error);
  Owned ids2(DType::i32, std::vector<int64_t>{2});
  ids2.data<int32_t>()[0] = 0, ids2.data<int32_t>()[1] = 0;
  EXPECT_THROW(ops::embedding_forward(out, ids2, table), Error);
}

// The parallel backward (rows * d > 16384) with heavy id collisions: every element must equal the
// serial row-order sum bit for bit, whatever the number of threads (no races, deterministic).
TEST(OpsEmbedding, ParallelBackwardIsRaceFreeAndDeterministic) {
  const int64_t n = 5000, d = 61, vocab = 3;
  for (DType dt : kDtypes) {
    for (int threads : {1, 2, 3, 7}) {
      SCOPED_TRACE(std::to_string(threads) + " threads");
      omp_set_num_threads(threads);
      Owned ids(DType::i32, std::vector<int64_t>{n}), dout(dt, {n, d}), d_table(dt, {vocab, d});
      for (int64_t i = 0; i < n; ++i) ids.data<int32_t>()[i] = int32_t((i * 7 + i / 3) % vocab);
      test::randn(dout, 51);
      test::randn(d_table, 52);
      Owned want = Owned::copy_of(d_table, dt);
      ops::embedding_backward(d_table, dout, ids);
      auto serial = [&](auto zero) {
        using T = decltype(zero);
        for (int64_t i = 0; i < n; ++i)
          for (int64_t c = 0; c < d; ++c)
            want.data<T>()[ids.data<int32_t>()[i] * d + c] += dout.data<T>()[i * d + c];
      };
      if (dt == DType::f32) serial(float{}); else serial(double{});
      EXPECT_EQ(rel_error(d_table, want), 0.0);
    }
  }
  omp_set_num_threads(omp_get_num_procs());
}

// f64 finite differences of loss = sum(embedding(table) * R) with respect to the table.
TEST(OpsEmbedding, FiniteDifferences) {
  const DType f = DType::f64;
  Owned table(f, {6, 5}), out(f, {9, 5}), r(f, {9, 5}), d_table(f, {6, 5}), ids(DType::i32, std::vector<int64_t>{9});
  const int32_t id[9] = {0, 5, 5, 2, 3, 0, 5, 1, 2};
  for (int i = 0; i < 9; ++i) ids.data<int32_t>()[i] = id[i];
  test::randn(table, 61);
  test::randn(r, 62);
  auto loss = [&] {
    ops::embedding_forward(out, ids, table);
    return test::weighted_sum(out, r);
  };
  ops::embedding_backward(d_table, r, ids);
  EXPECT_LT(test::finite_difference_error(table, d_table, loss), 1e-6);
}

}  // namespace
}  // namespace sinklab
