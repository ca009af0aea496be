// HDF5 results writer: schema, append/commit durability, resume (reopen + truncate), N-d arrays,
// attributes, errors. With SINKLAB_H5_LAYOUT_OUT set, H5Layout.WriteExample writes a schema example
// there for tests/python/test_h5_layout.py to inspect with h5py.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "io/h5.hpp"
#include "io/results_schema.hpp"

namespace sinklab::io {
namespace {

namespace fs = std::filesystem;

class H5Test : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("sinklab_test_h5_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  static RootInfo info() { return RootInfo{"0.1.0", "abc123", "2025-01-01T00:00:00Z", "sinklab-test --x 1", "[run]\nx = 1\n", "OpenBLAS test"}; }
  // Files in the test directory other than the committed ones (leftover temporaries).
  size_t temporaries() const {
    size_t n = 0;
    for (auto& e : fs::directory_iterator(dir_))
      if (e.path().filename().string().find(".tmp.") != std::string::npos) ++n;
    return n;
  }
  fs::path dir_;
};

TEST_F(H5Test, CreateWritesRootAttributesOnlyOnCommit) {
  const std::string p = path("r.h5");
  {
    ResultsFile f = ResultsFile::create(p, info());
    EXPECT_FALSE(fs::exists(p)) << "nothing is visible before the first commit";
    f.commit();
    EXPECT_TRUE(fs::exists(p));
  }
  EXPECT_EQ(temporaries(), 0u);
  ResultsFile r = ResultsFile::open_read(p);
  EXPECT_EQ(r.attr_string("/", "sinklab_version"), "0.1.0");
  EXPECT_EQ(r.attr_string("/", "git_sha"), "abc123");
  EXPECT_EQ(r.attr_string("/", "created_utc"), "2025-01-01T00:00:00Z");
  EXPECT_EQ(r.attr_string("/", "command_line"), "sinklab-test --x 1");
  EXPECT_EQ(r.attr_string("/", "config"), "[run]\nx = 1\n");
  EXPECT_EQ(r.attr_string("/", "cpu_blas"), "OpenBLAS test");
  EXPECT_FALSE(r.writable());
  EXPECT_THROW(r.append_row("/runs/a/train", {{"step", 1}}), Error);
}

TEST_F(H5Test, AppendRowsOverSeveralCommits) {
  const std::string p = path("r.h5");
  ResultsFile f = ResultsFile::create(p, info());
  const std::string g = "/runs/demo/train";
  for (int step = 0; step < 5; ++step) {
    f.append_row(g, {{"step", step}, {"tokens", int64_t(step) * 1024}, {"loss", 10.0 - step}, {"lr", 1e-3f}});
    if (step % 2 == 1) f.commit();
  }
  EXPECT_EQ(f.rows(g), 5);
  f.commit();
  ResultsFile r = ResultsFile::open_read(p);
  EXPECT_EQ(r.rows(g), 5);
  EXPECT_EQ(r.read_column_int(g + "/step"), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(r.read_column(g + "/loss"), (std::vector<double>{10, 9, 8, 7, 6}));
  EXPECT_EQ(r.read_column_int(g + "/tokens")[4], 4096);
  EXPECT_NEAR(r.read_column(g + "/lr")[2], 1e-3, 1e-10);
  EXPECT_EQ(r.list(g), (std::vector<std::string>{"loss", "lr", "step", "tokens"}));
}

TEST_F(H5Test, ColumnsStayEqualLength) {
  const std::string p = path("r.h5");
  ResultsFile f = ResultsFile::create(p, info());
  const std::string g = "/runs/a/eval";
  f.append_row(g, {{"step", 0}, {"valid_loss", 3.0}});
  f.append_row(g, {{"step", 10}, {"valid_loss", 2.5}, {"sink_0.3", 12.5}});  // new column: padded
  f.append_row(g, {{"step", 20}, {"sink_0.3", 20.0}});                        // missing column: NaN
  EXPECT_EQ(f.rows(g), 3);
  std::vector<double> sink = f.read_column(g + "/sink_0.3");
  ASSERT_EQ(sink.size(), 3u);
  EXPECT_TRUE(std::isnan(sink[0]));
  EXPECT_EQ(sink[1], 12.5);
  std::vector<double> vl = f.read_column(g + "/valid_loss");
  ASSERT_EQ(vl.size(), 3u);
  EXPECT_TRUE(std::isnan(vl[2]));
  EXPECT_EQ(f.read_column_int(g + "/step"), (std::vector<int64_t>{0, 10, 20}));
  EXPECT_THROW(f.append_row(g, {{"step", 1}, {"step", 2}}), Error);
}

TEST_F(H5Test, UncommittedWorkIsLostNotTorn) {
  // The kill-safety simulation: commit 3 rows, write 2 more and an array, then destroy the writer
  // without commit (what a kill leaves behind): the file holds exactly the committed rows.
  const std::string p = path("r.h5");
  const std::string g = "/runs/a/train";
  {
    ResultsFile f = ResultsFile::create(p, info());
    for (int s = 0; s < 3; ++s) f.append_row(g, {{"step", s}, {"loss", 1.0 * s}});
    f.commit();
    for (int s = 3; s < 5; ++s) f.append_row(g, {{"step", s}, {"loss", 1.0 * s}});
    float a[2] = {1, 2};
    f.write_array("/models/m/x/alpha", {2}, a);
    EXPECT_EQ(f.rows(g), 5);
  }
  EXPECT_EQ(temporaries(), 0u);
  {
    ResultsFile r = ResultsFile::open_read(p);
    EXPECT_EQ(r.rows(g), 3);
    EXPECT_EQ(r.read_column_int(g + "/step"), (std::vector<int64_t>{0, 1, 2}));
    EXPECT_FALSE(r.exists("/models"));
  }
  // A real kill -9 in the middle of writing: a child process commits, writes more and is killed
  // before its next commit. The parent sees the committed state.
  const std::string p2 = path("killed.h5");
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ResultsFile f = ResultsFile::create(p2, info());
    f.append_row(g, {{"step", 0}, {"loss", 1.0}});
    f.commit();
    for (int s = 1; s < 200; ++s) f.append_row(g, {{"step", s}, {"loss", 1.0}});
    ::kill(::getpid(), SIGKILL);
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
  ResultsFile r2 = ResultsFile::open_read(p2);
  EXPECT_EQ(r2.read_column_int(g + "/step"), (std::vector<int64_t>{0}));
}

TEST_F(H5Test, ReopenAppendAndTruncateForResume) {
  const std::string p = path("r.h5");
  const std::string g = "/runs/a/train";
  const std::string e = "/runs/a/eval";
  {
    ResultsFile f = ResultsFile::create(p, info());
    for (int s = 0; s < 6; ++s) f.append_row(g, {{"step", s}, {"loss", 0.5 * s}});
    for (int s = 0; s < 3; ++s) {
      float alpha[2 * 3];
      for (int i = 0; i < 6; ++i) alpha[i] = float(s * 10 + i);
      f.append_row(e, {{"step", s * 2}});
      f.append_slab(e + "/alpha", {2, 3}, alpha);
    }
    f.commit();
  }
  {
    // Resume from a checkpoint at step 3: drop rows logged after it, continue appending.
    ResultsFile f = ResultsFile::open(p);
    EXPECT_EQ(f.attr_string("/", "git_sha"), "abc123");
    EXPECT_EQ(f.rows(g), 6);
    f.truncate_rows(g, 4);
    f.truncate_rows(e, 2);
    EXPECT_EQ(f.rows(g), 4);
    EXPECT_EQ(f.dims(e + "/alpha"), (std::vector<int64_t>{2, 2, 3}));
    f.append_row(g, {{"step", 4}, {"loss", 99.0}});
    float alpha[6] = {7, 7, 7, 7, 7, 7};
    f.append_slab(e + "/alpha", {2, 3}, alpha);
    f.truncate_rows(g, 100);  // no-op
    f.commit();
  }
  ResultsFile r = ResultsFile::open_read(p);
  EXPECT_EQ(r.read_column_int(g + "/step"), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(r.read_column(g + "/loss").back(), 99.0);
  Array a = r.read_array(e + "/alpha");
  EXPECT_EQ(a.dims, (std::vector<int64_t>{3, 2, 3}));
  EXPECT_EQ(a.data[6], 10.0);  // second slab kept
  EXPECT_EQ(a.data[12], 7.0);  // appended after the truncation
  // Item shape mismatch is refused.
  ResultsFile f = ResultsFile::open(p);
  float bad[4] = {};
  EXPECT_THROW(f.append_slab(e + "/alpha", {2, 2}, bad), Error);
}

TEST_F(H5Test, ArraysAndAttributes) {
  const std::string p = path("r.h5");
  {
    ResultsFile f = ResultsFile::create(p, info());
    const std::string d = "/models/gpt2/natural/Pile-CC";
    std::vector<float> alpha(2 * 3 * 4);
    for (size_t i = 0; i < alpha.size(); ++i) alpha[i] = float(i) * 0.5f;
    f.write_array(d + "/alpha", {2, 3, 4}, alpha.data());
    std::vector<double> sink = {80.0, 50.0, 12.5};
    f.write_array(d + "/sink", {3}, sink.data());
    std::vector<int32_t> ids = {5, 6};
    f.write_array(d + "/ids", {2}, ids.data());
    f.write_array(d + "/empty", {0, 3}, static_cast<const double*>(nullptr));
    f.set_attr(d, "n_seq", 100);
    f.set_attr(d, "T", int64_t(64));
    f.set_attr(d, "bos", "none");
    f.set_attr(d + "/sink", "eps", 0.3);
    f.set_attr(d, "bos", "<s>");  // replaced
    // Rewriting an array with another shape replaces it.
    f.write_array(d + "/sink", {2}, sink.data());
    f.commit();
  }
  ResultsFile r = ResultsFile::open_read(p);
  const std::string d = "/models/gpt2/natural/Pile-CC";
  Array a = r.read_array(d + "/alpha");
  EXPECT_EQ(a.dims, (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(a.data[23], 11.5);
  EXPECT_EQ(r.read_array(d + "/sink").dims, (std::vector<int64_t>{2}));
  EXPECT_FALSE(r.has_attr(d + "/sink", "eps"));  // went with the replaced dataset
  EXPECT_EQ(r.read_array(d + "/ids").data, (std::vector<double>{5, 6}));
  EXPECT_EQ(r.read_array(d + "/empty").dims, (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(r.attr_int(d, "n_seq"), 100);
  EXPECT_EQ(r.attr_double(d, "T"), 64.0);
  EXPECT_EQ(r.attr_string(d, "bos"), "<s>");
  EXPECT_TRUE(r.exists(d));
  EXPECT_TRUE(r.exists("/models/gpt2"));
  EXPECT_FALSE(r.exists("/models/opt/natural"));
  EXPECT_TRUE(r.exists("/"));
}

TEST_F(H5Test, ErrorsNameTheFileAndObject) {
  auto expect_error = [](auto&& fn, const std::vector<std::string>& parts) {
    try {
      fn();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      for (const auto& s : parts) EXPECT_NE(std::string(e.what()).find(s), std::string::npos) << e.what();
    }
  };
  const std::string bad = path("no/such/dir/r.h5");
  expect_error([&] { ResultsFile::create(bad, info()); }, {bad});
  expect_error([&] { ResultsFile::open(path("missing.h5")); }, {path("missing.h5")});
  expect_error([&] { ResultsFile::open_read(path("missing.h5")); }, {path("missing.h5")});
  const std::string junk = path("junk.h5");
  { FILE* fp = std::fopen(junk.c_str(), "w"); std::fputs("not hdf5", fp); std::fclose(fp); }
  expect_error([&] { ResultsFile::open(junk); }, {junk});
  const std::string p = path("r.h5");
  ResultsFile f = ResultsFile::create(p, info());
  expect_error([&] { f.read_column("/runs/x/train/loss"); }, {p, "/runs/x/train/loss"});
  expect_error([&] { f.attr_string("/", "nope"); }, {p, "nope"});
  f.append_row("/runs/a/train", {{"step", 1}});
  expect_error([&] { f.attr_double("/", "git_sha"); }, {p, "git_sha"});
  expect_error([&] { f.write_array("/runs/a/train/step/x", {1}, static_cast<const float*>(nullptr)); },
               {p, "/runs/a/train/step/x"});
}

// The schema example inspected by tests/python/test_h5_layout.py (skipped unless the env var is set).
// The declared results schema (io/results_schema.hpp): the grammar, and what a write must match.
TEST(ResultsSchema, ChecksKindPathDtypeAndRank) {
  const ResultsSchema s = ResultsSchema::parse(
      "# comment\n"
      "group   /runs/{run}             -    -        src/a.cpp  open_results\n"
      "attr    /runs/{run}@config      str  -        src/a.cpp  open_results (Run.config)\n"
      "column  /runs/{run}/train/step  i64  [n]      src/a.cpp  _read_train\n"
      "series  /runs/{run}/eval/alpha  f32  [n,L,H]  src/a.cpp  _read_eval\n"
      "array   /m/natural@T64/pairs          i32  [P,2]    src/b.cpp  unread: a test\n"
      "attr    /m/natural@T64/pairs@heads    -    -        none       map_pairs: a read-only fallback\n",
      "test.tsv");
  ASSERT_EQ(s.items().size(), 6u);
  EXPECT_EQ(s.items()[4].path, (std::vector<std::string>{"m", "natural@T64", "pairs"}));
  EXPECT_EQ(s.items()[5].attr, "heads");  // split at the last '@'
  EXPECT_EQ(s.items()[3].dims, (std::vector<int64_t>{-1, -1, -1}));
  EXPECT_EQ(s.items()[4].reader, "unread: a test");
  s.check_group("f.h5", "/runs/demo");
  s.check_attr("f.h5", "/runs/demo", "config", "str");
  s.check_dataset("f.h5", ResultsSchema::Kind::column, "/runs/demo/train/step", "i64", {1});
  s.check_dataset("f.h5", ResultsSchema::Kind::series, "/runs/demo/eval/alpha", "f32", {1, 2, 3});
  s.check_dataset("f.h5", ResultsSchema::Kind::array, "/m/natural@T64/pairs", "i32", {5, 2});
  auto message = [](auto&& write) {
    try {
      write();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // Undeclared: another name, another kind, dtype, rank or fixed dimension, a read-only fallback.
  EXPECT_NE(message([&] { s.check_dataset("f.h5", ResultsSchema::Kind::column, "/runs/demo/train/loss", "f64", {1}); })
                .find("f.h5: undeclared write: column /runs/demo/train/loss f64 [1] (not in the results schema test.tsv)"),
            std::string::npos);
  EXPECT_NE(message([&] { s.check_dataset("f.h5", ResultsSchema::Kind::series, "/runs/demo/eval/alpha", "f64", {1, 2, 3}); })
                .find("undeclared write: series /runs/demo/eval/alpha f64 [1,2,3] (test.tsv:5 declares it as f32 rank 3)"),
            std::string::npos);
  EXPECT_NE(message([&] { s.check_dataset("f.h5", ResultsSchema::Kind::series, "/runs/demo/eval/alpha", "f32", {1, 2}); }),
            "no error");
  EXPECT_NE(message([&] { s.check_dataset("f.h5", ResultsSchema::Kind::array, "/runs/demo/eval/alpha", "f32", {1, 2, 3}); }),
            "no error");
  EXPECT_NE(message([&] { s.check_dataset("f.h5", ResultsSchema::Kind::array, "/m/natural@T64/pairs", "i32", {5, 3}); }),
            "no error");
  EXPECT_NE(message([&] { s.check_attr("f.h5", "/runs/demo", "config", "i64"); }).find("undeclared write: attr /runs/demo@config i64"),
            std::string::npos);
  EXPECT_NE(message([&] { s.check_attr("f.h5", "/m/natural@T64/pairs", "heads", "str"); }), "no error");
  EXPECT_NE(message([&] { s.check_group("f.h5", "/runs/demo/extra"); }).find("undeclared write: group /runs/demo/extra"),
            std::string::npos);
  // Malformed lines name the file and line.
  EXPECT_NE(message([&] { ResultsSchema::parse("group /a - -\n", "x.tsv"); }).find("x.tsv:1: needs kind"), std::string::npos);
  EXPECT_NE(message([&] { ResultsSchema::parse("table /a - - w r\n", "x.tsv"); }).find("x.tsv:1: unknown kind"),
            std::string::npos);
  EXPECT_NE(message([&] { ResultsSchema::parse("array /a f32 [L,] w r\n", "x.tsv"); }).find("x.tsv:1: empty dimension"),
            std::string::npos);
}

TEST(ResultsSchema, TheDeclaredSchemaParses) {
  const ResultsSchema s = ResultsSchema::load(SINKLAB_SOURCE_DIR "/src/io/results_schema.tsv");
  EXPECT_GT(s.items().size(), 100u);
  s.check_attr("results.h5", "/", "sinklab_version", "str");
  s.check_dataset("results.h5", ResultsSchema::Kind::series, "/runs/t/eval/alpha", "f32", {1, 2, 2});
}

TEST(H5Layout, WriteExample) {
  const char* out = std::getenv("SINKLAB_H5_LAYOUT_OUT");
  if (!out || !*out) GTEST_SKIP() << "SINKLAB_H5_LAYOUT_OUT not set";
  const int L = 2, H = 3, K = 4;
  ResultsFile f = ResultsFile::create(out, RootInfo{"0.1.0", "deadbeef", "2025-01-01T00:00:00Z",
                                                    "sinklab-pretrain --config jobs/demo.ini", "[train]\nsteps = 3\n",
                                                    "OpenBLAS 0.3.21 (Haswell kernels, 2 threads)"});
  for (int s = 0; s < 3; ++s)
    f.append_row("/runs/demo/train", {{"step", s}, {"tokens", int64_t(s + 1) * 4096}, {"loss", 5.0 - s},
                                      {"lr", 1e-3}, {"grad_norm", 1.5}, {"tokens_per_s", 1000.0}});
  f.commit();
  for (int s = 0; s < 2; ++s) {
    std::vector<float> alpha(size_t(L) * H);
    for (size_t i = 0; i < alpha.size(); ++i) alpha[i] = 0.1f * float(i + s);
    std::vector<double> sink = {50.0, 33.3, 16.7};
    std::vector<float> massive = {1.0f, 20.0f};
    f.append_row("/runs/demo/eval", {{"step", s * 2}, {"valid_loss", 4.0 - s}});
    f.append_slab("/runs/demo/eval/alpha", {L, H}, alpha.data());
    f.append_slab("/runs/demo/eval/sink", {3}, sink.data());
    f.append_slab("/runs/demo/eval/massive_ratio", {L}, massive.data());
  }
  std::vector<double> eps = {0.2, 0.3, 0.4};
  f.write_array("/runs/demo/eval/eps", {3}, eps.data());
  std::vector<float> a(size_t(L) * H * K, 0.25f);
  const std::string m = "/models/gpt2/natural/Pile-CC";
  f.write_array(m + "/alpha", {L, H, K}, a.data());
  f.write_array(m + "/sink", {3}, eps.data());
  f.set_attr(m, "n_seq", 100);
  f.set_attr(m, "T", 64);
  f.set_attr(m, "bos", "none");
  f.append_row("/items/0", {{"rank", 0}, {"seconds", 1.25}});
  f.set_attr("/items/0", "status", "ok");
  f.commit();
}

}  // namespace
}  // namespace sinklab::io
