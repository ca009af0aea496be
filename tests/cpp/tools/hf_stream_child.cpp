// Helper process of test_hf_streaming: loads a model directory under --max-memory, runs one forward
// over deterministic token ids and writes what it computed plus its memory high-water mark. It is a
// fresh process so that VmHWM (/proc/self/status) measures this load and forward alone, not the test
// that generated the model.
//
//   hf_stream_child MODEL_DIR MAX_MEMORY_BYTES B T OUT.safetensors
// OUT holds logits [B,T,V] and per-layer sums of the hidden states and q taps (f64), with metadata
// vm_rss_start_kb (before loading) and vm_hwm_kb (after the forward).

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "backend/memory.hpp"
#include "core/error.hpp"
#include "hf/hf_model.hpp"
#include "io/safetensors.hpp"

namespace {

using namespace sinklab;

// A "Vm...:  1234 kB" line of /proc/self/status, in kB.
long status_kb(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0 && line[std::strlen(key)] == ':') return std::stol(line.substr(std::strlen(key) + 1));
  SL_FAIL("/proc/self/status has no %s", key);
}

// Sums of every layer's hidden_out and q: a fingerprint of the taps that allocates nothing.
class TapSums : public LayerObserver {
 public:
  explicit TapSums(int n_layers) : sums(size_t(2 * n_layers), 0.0) {}
  void on_layer(const LayerTaps& taps) override {
    sums[size_t(2 * taps.layer)] = sum(taps.hidden_out);
    sums[size_t(2 * taps.layer + 1)] = sum(taps.q);
  }
  std::vector<double> sums;

 private:
  static double sum(const Tensor& t) {  // [B,T,...] view with a contiguous last dim
    double s = 0.0;
    const int64_t last = t.shape[t.ndim - 1], rows = t.numel() / last;
    for (int64_t r = 0; r < rows; ++r) {
      int64_t off = 0, rem = r;
      for (int d = t.ndim - 2; d >= 0; --d) {
        off += (rem % t.shape[d]) * t.stride[d];
        rem /= t.shape[d];
      }
      const float* p = t.ptr<float>() + off;
      for (int64_t c = 0; c < last; ++c) s += p[c];
    }
    return s;
  }
};

}  // namespace

int main(int argc, char** argv) {
  return run_main("hf_stream_child", [&]() {
    SL_CHECK(argc == 6, "usage: hf_stream_child MODEL_DIR MAX_MEMORY_BYTES B T OUT.safetensors");
    const long rss_start = status_kb("VmRSS");
    hf::LoadOptions lo;
    lo.max_memory_bytes = std::stoll(argv[2]);
    const int64_t B = std::stoll(argv[3]), T = std::stoll(argv[4]);
    std::unique_ptr<hf::HfModel> model = hf::load_model(argv[1], lo);
    const int64_t V = model->info().vocab_size;
    Buffer ids_buf = Buffer::for_tensor(DType::i32, {B, T});
    Tensor ids = ids_buf.view(DType::i32, {B, T});
    for (int64_t i = 0; i < B * T; ++i) ids.ptr<int32_t>()[i] = int32_t((i * 7919 + 13) % V);
    Buffer logits_buf = Buffer::for_tensor(DType::f32, {B, T, V});
    Tensor logits = logits_buf.view(DType::f32, {B, T, V});
    TapSums sums(model->info().n_layers);
    model->forward(ids, &sums, logits, {});
    const long hwm = status_kb("VmHWM");
    Tensor sums_t(sums.sums.data(), DType::f64, {int64_t(sums.sums.size())});
    io::write_safetensors(argv[5], {{"logits", logits}, {"tap_sums", sums_t}},
                          {{"vm_rss_start_kb", std::to_string(rss_start)}, {"vm_hwm_kb", std::to_string(hwm)}});
    return 0;
  });
}
