// Layer streaming under --max-memory: a random Llama-style model whose f32 weights are 4.2x the bound
// (67 MiB against 16 MiB) runs to completion in a fresh process (tools/hf_stream_child.cpp) and
// computes bit-identically what the unbounded load computes, with its peak RSS (VmHWM) within
//
//     max_memory + kAllowance,                kAllowance = 16 MiB, and
//     max_memory + kGrowthAllowance above the RSS before loading,   kGrowthAllowance = 4 MiB.
//
// The allowances are what the bound does not cover: the process itself before loading (code, libc,
// OpenMP/OpenBLAS state, thread stacks: 6 MiB measured here, printed below), the caller's ids and
// logits (2 MiB here) and the kernel's fault-around of mapped pages (up to 64 KiB per fault; swept
// after every layer). A loader that kept the weights resident could not pass.

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace sinklab {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kMiB = int64_t(1) << 20;
constexpr int64_t kMaxMemory = 16 * kMiB;
constexpr int64_t kAllowance = 16 * kMiB;
constexpr int64_t kGrowthAllowance = 4 * kMiB;

// 3 MiB per layer; the 8192 x 256 head goes through the layer buffer in 3 chunks.
struct Shape {
  int64_t vocab = 8192, d = 256, heads = 4, kv_heads = 2, ffn = 768, layers = 17;
};

// config.json + model.safetensors (f32, random normals) of a Llama model; returns the f32 weight bytes.
int64_t write_llama(const std::string& dir, const Shape& s) {
  fs::create_directories(dir);
  std::ofstream(dir + "/config.json") << "{\"model_type\": \"llama\", \"vocab_size\": " << s.vocab
                                      << ", \"hidden_size\": " << s.d << ", \"intermediate_size\": " << s.ffn
                                      << ", \"num_hidden_layers\": " << s.layers
                                      << ", \"num_attention_heads\": " << s.heads
                                      << ", \"num_key_value_heads\": " << s.kv_heads
                                      << ", \"rms_norm_eps\": 1e-5, \"rope_theta\": 10000.0}";
  const int64_t dh = s.d / s.heads;
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes = {{"model.embed_tokens.weight", {s.vocab, s.d}},
                                                                      {"model.norm.weight", {s.d}},
                                                                      {"lm_head.weight", {s.vocab, s.d}}};
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (auto& [name, shape] : std::vector<std::pair<std::string, std::vector<int64_t>>>{
             {"input_layernorm.weight", {s.d}},
             {"post_attention_layernorm.weight", {s.d}},
             {"self_attn.q_proj.weight", {s.heads * dh, s.d}},
             {"self_attn.k_proj.weight", {s.kv_heads * dh, s.d}},
             {"self_attn.v_proj.weight", {s.kv_heads * dh, s.d}},
             {"self_attn.o_proj.weight", {s.d, s.heads * dh}},
             {"mlp.gate_proj.weight", {s.ffn, s.d}},
             {"mlp.up_proj.weight", {s.ffn, s.d}},
             {"mlp.down_proj.weight", {s.d, s.ffn}}})
      shapes.push_back({p + name, shape});
  }
  std::vector<test::Owned> keep;
  std::vector<io::NamedTensor> tensors;
  int64_t bytes = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    keep.emplace_back(DType::f32, shapes[i].second);
    const Tensor t = keep.back().t;
    if (t.ndim == 1) ops::fill_normal(t, 11, i, 1.0, 0.1);  // norm gains
    else ops::fill_normal(t, 11, i, 0.0, 1.0 / std::sqrt(double(t.shape[1])));
    tensors.push_back({shapes[i].first, t});
    bytes += int64_t(t.nbytes());
  }
  io::write_safetensors(dir + "/model.safetensors", tensors);
  return bytes;
}

struct ChildResult {
  std::vector<float> logits;
  std::vector<double> tap_sums;
  int64_t rss_start = 0, hwm = 0;  // bytes
};

ChildResult run_child(const std::string& dir, int64_t max_memory, const std::string& out) {
  const std::string cmd = std::string(SINKLAB_BIN_DIR) + "/hf_stream_child " + dir + " " + std::to_string(max_memory) +
                          " 2 32 " + out;
  const int status = std::system(cmd.c_str());
  EXPECT_EQ(status, 0) << cmd;
  ChildResult r;
  if (status != 0) return r;
  io::SafetensorsFile f(out);
  Tensor logits = f.view("logits"), sums = f.view("tap_sums");
  r.logits.assign(logits.ptr<float>(), logits.ptr<float>() + logits.numel());
  r.tap_sums.assign(sums.ptr<double>(), sums.ptr<double>() + sums.numel());
  r.rss_start = std::stoll(f.metadata().at("vm_rss_start_kb")) * 1024;
  r.hwm = std::stoll(f.metadata().at("vm_hwm_kb")) * 1024;
  return r;
}

TEST(HfStreaming, ModelFourTimesTheBoundRunsWithinIt) {
  const std::string dir = (fs::temp_directory_path() / ("sinklab_test_hf_stream_" + std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  const int64_t weight_bytes = write_llama(dir + "/model", Shape{});
  ASSERT_GE(weight_bytes, 4 * kMaxMemory) << "the model must be at least 4x the bound";

  const ChildResult full = run_child(dir + "/model", 0, dir + "/full.safetensors");
  const ChildResult streamed = run_child(dir + "/model", kMaxMemory, dir + "/streamed.safetensors");
  fs::remove_all(dir);
  ASSERT_FALSE(full.logits.empty());
  ASSERT_FALSE(streamed.logits.empty());
  std::printf("  weights %.1f MiB, --max-memory %.1f MiB: peak RSS streamed %.1f MiB (process before loading "
              "%.1f MiB), unbounded %.1f MiB; bound + allowance %.1f MiB\n",
              double(weight_bytes) / kMiB, double(kMaxMemory) / kMiB, double(streamed.hwm) / kMiB,
              double(streamed.rss_start) / kMiB, double(full.hwm) / kMiB, double(kMaxMemory + kAllowance) / kMiB);
  EXPECT_LE(streamed.hwm, kMaxMemory + kAllowance);
  EXPECT_LE(streamed.hwm - streamed.rss_start, kMaxMemory + kGrowthAllowance);
  // The measurement can tell: the unbounded run holds every weight.
  EXPECT_GT(full.hwm, weight_bytes);

  // Bit-identical logits and taps.
  ASSERT_EQ(full.logits.size(), streamed.logits.size());
  EXPECT_EQ(std::memcmp(full.logits.data(), streamed.logits.data(), full.logits.size() * sizeof(float)), 0);
  EXPECT_EQ(full.tap_sums, streamed.tap_sums);
  bool finite = true;
  for (float x : full.logits) finite = finite && std::isfinite(x);
  EXPECT_TRUE(finite);
}

}  // namespace
}  // namespace sinklab
