// The survey's default memory budget (--max-memory auto): node_memory() on fake /proc and /sys trees
// (cgroup v2 and v1 limits along the process's cgroup path, "max" and v1's unlimited value, MemTotal
// when smaller), MemoryBudget's share per rank, and WeightStore keeping a model resident under an auto
// budget that holds it while streaming it under one that does not (same logits either way).

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/node_memory.hpp"
#include "hf/hf_model.hpp"
#include "io/safetensors.hpp"
#include "probe/survey_run.hpp"
#include "test_util.hpp"

namespace sinklab {
namespace {

namespace fs = std::filesystem;

struct FakeRoot {
  std::string path;
  FakeRoot() {
    path = (fs::temp_directory_path() / ("sinklab_node_" + std::to_string(::getpid()))).string();
    fs::remove_all(path);
  }
  ~FakeRoot() { fs::remove_all(path); }
  void write(const std::string& rel, const std::string& text) const {
    const fs::path p = fs::path(path) / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
};

const char* kMeminfo = "MemTotal:       24684084 kB\nMemFree:         1000000 kB\n";
constexpr int64_t kMemTotal = int64_t(24684084) * 1024;

TEST(NodeMemory, MemTotalWithoutCgroupLimits) {
  FakeRoot root;
  root.write("proc/meminfo", kMeminfo);
  root.write("proc/self/cgroup", "0::/\n");
  root.write("sys/fs/cgroup/memory.max", "max\n");
  const NodeMemory m = node_memory(root.path);
  EXPECT_EQ(m.bytes, kMemTotal);
  EXPECT_EQ(m.source, "MemTotal");
}

TEST(NodeMemory, CgroupV2TheSmallestLimitOnThePath) {
  FakeRoot root;
  root.write("proc/meminfo", kMeminfo);
  root.write("proc/self/cgroup", "0::/job/step\n");
  root.write("sys/fs/cgroup/memory.max", "max\n");
  root.write("sys/fs/cgroup/job/memory.max", "8589934592\n");  // 8 GiB on the job
  root.write("sys/fs/cgroup/job/step/memory.max", "max\n");
  const NodeMemory m = node_memory(root.path);
  EXPECT_EQ(m.bytes, int64_t(8) << 30);
  EXPECT_EQ(m.source, "cgroup v2 " + root.path + "/sys/fs/cgroup/job/memory.max");
  // A limit above MemTotal does not count.
  root.write("sys/fs/cgroup/job/memory.max", "99999999999999\n");
  EXPECT_EQ(node_memory(root.path).bytes, kMemTotal);
}

TEST(NodeMemory, CgroupV1MemoryControllerAndUnlimitedValues) {
  FakeRoot root;
  root.write("proc/meminfo", kMeminfo);
  root.write("proc/self/cgroup", "5:cpu,cpuacct:/x\n4:memory:/slurm/uid_0/job_7\n0::/\n");
  root.write("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");  // v1's "unlimited"
  root.write("sys/fs/cgroup/memory/slurm/memory.limit_in_bytes", "9223372036854771712\n");
  root.write("sys/fs/cgroup/memory/slurm/uid_0/job_7/memory.limit_in_bytes", "4294967296\n");
  const NodeMemory m = node_memory(root.path);
  EXPECT_EQ(m.bytes, int64_t(4) << 30);
  EXPECT_NE(m.source.find("cgroup v1 "), std::string::npos);
  // The controller list may name memory beside others.
  root.write("proc/self/cgroup", "4:blkio,memory:/slurm/uid_0/job_7\n");
  EXPECT_EQ(node_memory(root.path).bytes, int64_t(4) << 30);
}

TEST(NodeMemory, NoMemTotalIsOneLineNamingTheFile) {
  FakeRoot root;
  root.write("proc/meminfo", "MemFree: 12 kB\n");
  try {
    node_memory(root.path);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(root.path + "/proc/meminfo: no MemTotal line"), std::string::npos) << e.what();
  }
}

TEST(NodeMemory, ThisMachineAndTheShareOfEachRank) {
  const NodeMemory node = node_memory();
  EXPECT_GT(node.bytes, int64_t(64) << 20);
  const probe::MemoryBudget four = probe::MemoryBudget::resolve(-1, 4);
  EXPECT_TRUE(four.auto_);
  EXPECT_EQ(four.bytes, node.bytes / 4);
  EXPECT_NE(four.origin.find("/ 4 ranks on this node"), std::string::npos) << four.origin;
  const probe::MemoryBudget given = probe::MemoryBudget::resolve(int64_t(16) << 30, 4);  // --max-memory 16G
  EXPECT_FALSE(given.auto_);
  EXPECT_EQ(given.bytes, int64_t(16) << 30);
  EXPECT_EQ(probe::MemoryBudget::resolve(0, 2).bytes, 0);  // unbounded
}

TEST(NodeMemory, AutoBudgetKeepsWhatFitsResidentAndStreamsTheRest) {
  const std::string dir = std::string(SINKLAB_SOURCE_DIR) + "/tests/fixtures/hf/llama_gqa";
  io::SafetensorsFile golden(dir + "/golden.safetensors");
  Tensor ids = golden.view("t13/ids");
  const int64_t B = ids.shape[0], T = ids.shape[1];
  const int64_t weights = hf::load_model(dir)->info().weight_bytes;
  std::vector<test::Owned> logits;
  for (auto [bound, fits] : {std::pair<int64_t, bool>{0, false}, {weights * 2, true}, {weights, true}, {weights * 2, false}}) {
    hf::LoadOptions lo;
    lo.max_memory_bytes = bound;
    lo.resident_if_fits = fits;
    auto model = hf::load_model(dir, lo);
    // Resident: no bound, or an auto bound with a quarter to spare; otherwise streamed.
    EXPECT_EQ(model->info().weights_streamed, bound > 0 && !(fits && bound >= weights * 4 / 3))
        << bound << " " << fits;
    logits.emplace_back(DType::f32, std::vector<int64_t>{B, T, int64_t(model->info().vocab_size)});
    model->forward(ids, nullptr, logits.back().t, hf::ForwardOptions{});
  }
  for (size_t i = 1; i < logits.size(); ++i) EXPECT_EQ(test::max_abs_diff(logits[i].t, logits[0].t), 0.0) << i;
}

}  // namespace
}  // namespace sinklab
