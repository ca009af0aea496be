// io::ResultSet: results made on one rank, serialised for MPI, written into HDF5 by another.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "io/result_set.hpp"

namespace sinklab::io {
namespace {

namespace fs = std::filesystem;

ResultSet example() {
  ResultSet s;
  s.add_array("alpha", {2, 1, 3}, std::vector<double>{0.5, 0.25, 1.0 / 3.0, -1e300, 0.0, 7.0});
  s.add_array("qk/cos", {1, 2, 2}, std::vector<float>{1.0f, -0.5f, 0.25f, 0.0f});
  s.add_array("layers", {3}, std::vector<int32_t>{0, 4, -7});
  s.set_attr("", "n_seq", int64_t{100});
  s.set_attr("", "T", int64_t{64});
  s.set_attr("", "domain", std::string("pile_cc"));
  s.set_attr("alpha", "note", std::string("with\0nul", 8));
  s.set_attr("", "seconds", 1.5);
  s.set_attr("", "T", int64_t{65});  // replaces
  return s;
}

TEST(ResultSet, RoundTripAndConcatenation) {
  const ResultSet a = example();
  ResultSet b;
  b.set_attr("", "status", std::string("failed"));
  const std::string bytes = a.serialize() + b.serialize();
  size_t used = 0;
  ResultSet a2 = ResultSet::deserialize(bytes, &used);
  ResultSet b2 = ResultSet::deserialize(std::string_view(bytes).substr(used));
  EXPECT_EQ(a2.serialize(), a.serialize());
  EXPECT_EQ(b2.serialize(), b.serialize());
  ASSERT_EQ(a2.arrays().size(), 3u);
  EXPECT_EQ(a2.arrays()[0].dims, (std::vector<int64_t>{2, 1, 3}));
  EXPECT_EQ(std::get<std::vector<double>>(a2.arrays()[0].data)[3], -1e300);
  EXPECT_EQ(std::get<std::vector<float>>(a2.find_array("qk/cos")->data)[1], -0.5f);
  EXPECT_EQ(std::get<std::vector<int32_t>>(a2.find_array("layers")->data)[2], -7);
  EXPECT_EQ(std::get<int64_t>(*a2.find_attr("", "T")), 65);
  EXPECT_EQ(std::get<std::string>(*a2.find_attr("alpha", "note")), std::string("with\0nul", 8));
  EXPECT_EQ(std::get<std::string>(*b2.find_attr("", "status")), "failed");
  EXPECT_EQ(a2.find_attr("", "missing"), nullptr);
}

TEST(ResultSet, MalformedBytesAndShapes) {
  const std::string bytes = example().serialize();
  for (size_t cut : {size_t(0), size_t(5), size_t(20), bytes.size() / 2, bytes.size() - 1})
    EXPECT_THROW(ResultSet::deserialize(std::string_view(bytes).substr(0, cut)), Error) << cut;
  std::string bad = bytes;
  bad[0] = 'X';
  EXPECT_THROW(ResultSet::deserialize(bad), Error);
  ResultSet s;
  EXPECT_THROW(s.add_array("x", {2, 2}, std::vector<double>(3)), Error);
}

TEST(ResultSet, WritesIntoResultsFile) {
  const fs::path dir = fs::temp_directory_path() / ("sinklab_test_result_set_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "r.h5").string();
  {
    ResultsFile f = ResultsFile::create(path, RootInfo{"0.1.0", "", "2025-01-01T00:00:00Z", "test", "", ""});
    example().write(f, "/models/m/natural/pile_cc");
    f.commit();
  }
  ResultsFile r = ResultsFile::open_read(path);
  const std::string g = "/models/m/natural/pile_cc";
  Array alpha = r.read_array(g + "/alpha");
  EXPECT_EQ(alpha.dims, (std::vector<int64_t>{2, 1, 3}));
  EXPECT_DOUBLE_EQ(alpha.data[2], 1.0 / 3.0);
  EXPECT_EQ(r.read_array(g + "/qk/cos").data, (std::vector<double>{1.0, -0.5, 0.25, 0.0}));
  EXPECT_EQ(r.read_array(g + "/layers").data, (std::vector<double>{0, 4, -7}));
  EXPECT_EQ(r.attr_int(g, "T"), 65);
  EXPECT_EQ(r.attr_string(g, "domain"), "pile_cc");
  EXPECT_DOUBLE_EQ(r.attr_double(g, "seconds"), 1.5);
  EXPECT_TRUE(r.has_attr(g + "/alpha", "note"));
  r.close();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace sinklab::io
