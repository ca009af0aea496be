// The attention kernel dispatch (backend/attention_dispatch.hpp) over every AttentionSpec the trainable
// model can build: the product of the model's attention axes, each value list read from ModelConfig
// itself (set_axis names every valid value when given an invalid one, so a new value joins the matrix),
// each valid configuration built into a real Transformer whose layer_spec (with its sink logit and
// relative-bias tensors) goes to the dispatch, for every --attn-kernel request on every kind of call.
// The expected kernel is written independently, from the model's axes rather than the spec's fields,
// as the issue states the rule: cuDNN for softmax with plain normalisation, causal/window masks, ALiBi
// and the sink logit; the flash kernel for sigmoid / elu+1 / identity with norm one or sum, any mask,
// lead keys; the GEMM path for every other spec with bf16 tensors; the reference for everything else.
// And every job file of jobs/pretrain/ on a CUDA device with bf16 tensors: a fast kernel, never the
// reference (the table of choices and reasons is printed).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "backend/attention_dispatch.hpp"
#include "core/error.hpp"
#include "model/transformer.hpp"
#include "train/train_config.hpp"

namespace sinklab {
namespace {

using model::AttnBias;
using model::ModelConfig;
using model::PosEmb;
using model::Transformer;
using ops::AttnCall;
using ops::AttnKernel;

// The values of an enum-valued axis, from the error set_axis gives for an invalid one
// ("--attn-sim: '?' is not one of exp | sigmoid | ...").
std::vector<std::string> axis_values(const std::string& flag) {
  ModelConfig c;
  std::string what;
  try {
    c.set_axis(flag, "?");
  } catch (const Error& e) {
    what = e.what();
  }
  const std::string marker = "is not one of ";
  const size_t at = what.find(marker);
  EXPECT_NE(at, std::string::npos) << flag << ": " << what;
  std::vector<std::string> values;
  std::string rest = at == std::string::npos ? "" : what.substr(at + marker.size());
  for (size_t pos = 0; pos <= rest.size();) {
    size_t bar = rest.find(" | ", pos);
    if (bar == std::string::npos) bar = rest.size();
    values.push_back(rest.substr(pos, bar - pos));
    pos = bar + 3;
  }
  return values;
}

ModelConfig tiny_model() {
  ModelConfig c;
  c.vocab_size = 8;
  c.d_model = 16;
  c.n_layers = 1;
  c.n_heads = 2;
  c.ffn_hidden = 8;
  c.context = 8;
  return c;
}

// One attention configuration: the axes that change the attention operation.
struct Variant {
  std::map<std::string, std::string> axes;
  ModelConfig cfg;
};

// Every valid combination of the attention axes (invalid ones are refused by validate and skipped).
std::vector<Variant> attention_variants() {
  std::vector<std::vector<std::pair<std::string, std::string>>> choices;
  auto add_enum = [&](const std::string& flag) {
    std::vector<std::pair<std::string, std::string>> c;
    for (const std::string& v : axis_values(flag)) c.push_back({flag, v});
    choices.push_back(c);
  };
  add_enum("attn-sim");
  add_enum("attn-norm");
  add_enum("pos-emb");
  add_enum("relative-bias");
  add_enum("attn-bias");
  choices.push_back({{"attn-alpha", "1"}, {"attn-alpha", "0.5"}});
  choices.push_back({{"sigmoid-bias-log-n", "false"}, {"sigmoid-bias-log-n", "true"}});
  choices.push_back({{"sink", "none"}, {"sink", "sink-logit"}, {"sink", "softmax-plus-one"}});
  choices.push_back({{"mask", "causal"}, {"attn-window", "3"}, {"prefix-length", "3"}});
  choices.push_back({{"n-kv-heads", "2"}, {"n-kv-heads", "1"}});

  std::vector<Variant> out;
  std::vector<size_t> idx(choices.size(), 0);
  while (true) {
    Variant v;
    v.cfg = tiny_model();
    bool ok = true;
    for (size_t a = 0; a < choices.size(); ++a) {
      const auto& [flag, value] = choices[a][idx[a]];
      v.axes[flag] = value;
      try {
        if (flag == "sink") {
          v.cfg.sink_logit = value == "sink-logit";
          v.cfg.softmax_plus_one = value == "softmax-plus-one";
        } else if (flag == "n-kv-heads") {
          v.cfg.n_kv_heads = std::stoi(value);
        } else if (flag != "mask") {
          v.cfg.set_axis(flag, value);
        }
      } catch (const Error&) {
        ok = false;
      }
    }
    // relative-bias only matters with pos-emb relative: keep its other value only there.
    if (v.axes["relative-bias"] != "learned" && v.axes["pos-emb"] != "relative") ok = false;
    if (ok) {
      try {
        v.cfg.validate();
      } catch (const Error&) {
        ok = false;
      }
    }
    if (ok) out.push_back(v);
    size_t a = 0;
    while (a < choices.size() && ++idx[a] == choices[a].size()) idx[a++] = 0;
    if (a == choices.size()) break;
  }
  return out;
}

// The rule, from the model's axes.
bool fast_call(const AttnCall& call) {
  return call.device == DeviceKind::cuda && (call.dtype == DType::f32 || call.dtype == DType::bf16) && !call.probs;
}
bool tiled_head_dim(const AttnCall& call) { return call.head_dim % 8 == 0 && call.head_dim <= 128; }
bool expect_cudnn(const ModelConfig& c, const AttnCall& call) {
  const bool sink = c.sink_logit || c.softmax_plus_one;
  return fast_call(call) && tiled_head_dim(call) && call.cudnn_version > 0 && c.attn_sim == ops::AttnSim::exp &&
         c.attn_norm == ops::AttnNorm::sum && c.attn_alpha == 1.0 && c.prefix_length == 1 &&
         c.pos_emb != PosEmb::relative && c.attn_bias != AttnBias::kv && c.attn_bias != AttnBias::k &&
         (!sink || call.cudnn_version >= 91300);
}
bool expect_flash(const ModelConfig& c, const AttnCall& call) {
  const bool sim = c.attn_sim == ops::AttnSim::sigmoid || c.attn_sim == ops::AttnSim::elu_plus_one ||
                   c.attn_sim == ops::AttnSim::identity;
  return fast_call(call) && tiled_head_dim(call) && sim &&
         (c.attn_norm == ops::AttnNorm::one || c.attn_norm == ops::AttnNorm::sum) && c.pos_emb != PosEmb::relative &&
         c.pos_emb != PosEmb::alibi && !c.sink_logit && !c.softmax_plus_one;
}
// The GEMM path: any model, bf16 tensors, T within its bound.
bool expect_gemm(const AttnCall& call) {
  return fast_call(call) && call.dtype == DType::bf16 && call.queries <= ops::kAttnGemmMaxQueries;
}
AttnKernel expect_auto(const ModelConfig& c, const AttnCall& call) {
  return expect_cudnn(c, call)   ? AttnKernel::cudnn
         : expect_flash(c, call) ? AttnKernel::flash
         : expect_gemm(call)     ? AttnKernel::gemm
                                 : AttnKernel::reference;
}

std::vector<AttnCall> calls() {
  std::vector<AttnCall> out;
  for (bool probs : {false, true}) {
    for (int64_t dh : {8, 64, 128, 36, 136, 256}) {
      out.push_back({DeviceKind::cpu, DType::f32, dh, probs, 0});
      out.push_back({DeviceKind::cpu, DType::f64, dh, probs, 0});
      for (DType dt : {DType::f32, DType::bf16})
        for (int64_t cudnn : {0, 91200, 91300, 91900}) out.push_back({DeviceKind::cuda, dt, dh, probs, cudnn});
      out.push_back({DeviceKind::cuda, DType::bf16, dh, probs, 91900, ops::kAttnGemmMaxQueries + 1});
    }
  }
  return out;
}

std::string describe(const Variant& v, const AttnCall& call) {
  std::string s;
  for (const auto& [flag, value] : v.axes) s += "--" + flag + " " + value + " ";
  s += strfmt("| device %s dh %lld probs %d cudnn %lld dtype %s T %lld", call.device == DeviceKind::cuda ? "cuda" : "cpu",
              (long long)call.head_dim, int(call.probs), (long long)call.cudnn_version, dtype_name(call.dtype),
              (long long)call.queries);
  return s;
}

TEST(AttentionDispatch, EveryModelVariantEveryRequest) {
  const std::vector<Variant> variants = attention_variants();
  // The product holds thousands of valid models (a broken value list would shrink it to a few).
  ASSERT_GT(variants.size(), 1000u);
  std::map<AttnKernel, int64_t> chosen;  // auto's choices on CUDA calls
  std::set<std::string> sims_on_flash, specs_seen;
  for (const Variant& v : variants) {
    Transformer m(v.cfg);
    const ops::AttentionSpec base = m.layer_spec(0, false);
    ASSERT_EQ(base.sink_logit.defined(), v.cfg.sink_logit || v.cfg.softmax_plus_one);
    for (const AttnCall& call : calls()) {
      ops::AttentionSpec spec = base;
      const std::string where = describe(v, call);
      // auto
      spec.kernel = AttnKernel::auto_select;
      const ops::AttnKernelChoice a = ops::choose_attention_kernel(spec, call);
      ASSERT_STREQ(ops::attn_kernel_name(a.kernel), ops::attn_kernel_name(expect_auto(v.cfg, call))) << where << " (reason: " << a.reason << ")";
      if (a.kernel == AttnKernel::reference) {
        ASSERT_FALSE(a.reason.empty()) << where;
      }
      if (call.device == DeviceKind::cuda) chosen[a.kernel]++;
      if (a.kernel == AttnKernel::flash) sims_on_flash.insert(v.axes.at("attn-sim"));
      // each named kernel: runs, or is refused with one line naming --attn-kernel
      for (AttnKernel k : {AttnKernel::cudnn, AttnKernel::flash, AttnKernel::gemm, AttnKernel::reference}) {
        spec.kernel = k;
        const bool fits = k == AttnKernel::cudnn   ? expect_cudnn(v.cfg, call)
                          : k == AttnKernel::flash ? expect_flash(v.cfg, call)
                          : k == AttnKernel::gemm  ? expect_gemm(call)
                                                   : true;
        // a probs call on a GPU runs the reference whatever was asked (the fast kernels never hold P)
        const bool probs_to_reference = call.probs && call.device == DeviceKind::cuda;
        try {
          const ops::AttnKernelChoice c = ops::choose_attention_kernel(spec, call);
          ASSERT_TRUE(fits || probs_to_reference) << where << ": " << ops::attn_kernel_name(k) << " accepted";
          ASSERT_EQ(c.kernel, probs_to_reference ? AttnKernel::reference : k) << where;
        } catch (const Error& e) {
          ASSERT_FALSE(fits) << where << ": " << e.what();
          ASSERT_FALSE(probs_to_reference) << where;
          const std::string head = std::string("--attn-kernel ") + ops::attn_kernel_name(k) + ": ";
          ASSERT_EQ(std::string(e.what()).rfind(head, 0), 0u) << e.what();
          ASSERT_GT(std::string(e.what()).size(), head.size() + 10) << e.what();
          ASSERT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
        }
      }
    }
  }
  // Each kernel is reached, and the flash kernel by each of its three sims.
  EXPECT_GT(chosen[AttnKernel::cudnn], 0);
  EXPECT_GT(chosen[AttnKernel::flash], 0);
  EXPECT_GT(chosen[AttnKernel::gemm], 0);
  EXPECT_GT(chosen[AttnKernel::reference], 0);
  EXPECT_EQ(sims_on_flash, (std::set<std::string>{"sigmoid", "elu-plus-one", "identity"}));
}

// The paper's two headline models on an H100-like call, and what the log line says.
TEST(AttentionDispatch, HeadlineModels) {
  const AttnCall gpu{DeviceKind::cuda, DType::f32, 128, false, 91900};
  ModelConfig softmax = tiny_model();
  ModelConfig sigmoid = tiny_model();
  sigmoid.set_axis("attn-sim", "sigmoid");
  sigmoid.set_axis("attn-norm", "one");
  sigmoid.sigmoid_bias_log_n = true;
  ops::AttentionSpec s = Transformer(softmax).layer_spec(0, false);
  ops::AttnKernelChoice c = ops::choose_attention_kernel(s, gpu);
  EXPECT_EQ(c.kernel, AttnKernel::cudnn);
  EXPECT_EQ(c.reason, "fastest kernel that fits");
  s = Transformer(sigmoid).layer_spec(0, false);
  c = ops::choose_attention_kernel(s, gpu);
  EXPECT_EQ(c.kernel, AttnKernel::flash);
  EXPECT_EQ(c.reason, "cudnn: cuDNN computes softmax (sim exp), not sim sigmoid");
  // softmax with a sink logit on a cuDNN older than 9.13: the reference, saying why for both
  ModelConfig sink = tiny_model();
  sink.sink_logit = true;
  s = Transformer(sink).layer_spec(0, false);
  c = ops::choose_attention_kernel(s, AttnCall{DeviceKind::cuda, DType::f32, 128, false, 91200});
  EXPECT_EQ(c.kernel, AttnKernel::reference);
  EXPECT_EQ(c.reason,
            "cudnn: the sink logit needs cuDNN >= 9.13 (loaded: 91200); flash: the flash kernel computes sim sigmoid, "
            "elu-plus-one or identity, not exp; gemm: the GEMM path takes bf16 tensors (an f32 call keeps the "
            "reference kernel's f32 arithmetic)");
  // the same call with bf16 tensors: the GEMM path
  c = ops::choose_attention_kernel(s, AttnCall{DeviceKind::cuda, DType::bf16, 128, false, 91200});
  EXPECT_EQ(c.kernel, AttnKernel::gemm);
  // a sink logit with one query: cuDNN refuses it (its decode mode), seen on an H200 with cuDNN 9.14
  EXPECT_EQ(ops::choose_attention_kernel(s, AttnCall{DeviceKind::cuda, DType::f32, 128, false, 91900, 8}).kernel,
            AttnKernel::cudnn);
  c = ops::choose_attention_kernel(s, AttnCall{DeviceKind::cuda, DType::f32, 128, false, 91900, 1});
  EXPECT_EQ(c.kernel, AttnKernel::reference);
  EXPECT_EQ(c.reason.substr(0, 58), "cudnn: cuDNN refuses a sink logit with one query (T = 1); ");
}

// On the CPU backend: the model's own choice, the op's refusal, the flag's parser.
TEST(AttentionDispatch, CpuRunsTheReferenceAndRefusesGpuKernels) {
  Transformer m(tiny_model());
  ops::AttnKernelChoice c = m.attention_kernel();
  EXPECT_EQ(c.kernel, AttnKernel::reference);
  EXPECT_NE(c.reason.find("needs a CUDA device"), std::string::npos) << c.reason;
  m.set_attention_kernel(AttnKernel::reference);
  EXPECT_EQ(m.attention_kernel().kernel, AttnKernel::reference);
  m.set_attention_kernel(AttnKernel::cudnn);
  try {
    m.attention_kernel();
    FAIL() << "cudnn accepted on the CPU";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "--attn-kernel cudnn: needs a CUDA device (this attention runs on the CPU)");
  }
  // The op itself refuses too (a spec built elsewhere with a GPU kernel asked for).
  std::vector<float> buf(4 * 2 * 8, 0.5f);
  const int64_t dims[4] = {1, 2, 2, 8};
  Tensor q = Tensor::contiguous_view(buf.data(), DType::f32, dims, 4, Device::cpu());
  std::vector<float> o(buf.size()), st(4);
  const int64_t sd[3] = {1, 2, 2};
  Tensor out = Tensor::contiguous_view(o.data(), DType::f32, dims, 4, Device::cpu());
  Tensor stats = Tensor::contiguous_view(st.data(), DType::f32, sd, 3, Device::cpu());
  ops::AttentionSpec spec;
  spec.kernel = AttnKernel::flash;
  EXPECT_THROW(ops::attention_forward(out, stats, q, q, q, spec), Error);
  spec.kernel = AttnKernel::reference;
  EXPECT_NO_THROW(ops::attention_forward(out, stats, q, q, q, spec));
  spec.kernel = AttnKernel::auto_select;
  EXPECT_NO_THROW(ops::attention_forward(out, stats, q, q, q, spec));
  // A dtype no kernel takes goes to the reference, whose own check names the op (not the dispatch). (bf16
  // is taken on the CPU: ops.hpp's bf16 storage.)
  EXPECT_EQ(ops::choose_attention_kernel(spec, AttnCall{DeviceKind::cpu, DType::bf16, 8, false, 0}).kernel,
            AttnKernel::reference);
  EXPECT_EQ(ops::choose_attention_kernel(spec, AttnCall{DeviceKind::cuda, DType::f64, 64, false, 91900}).kernel,
            AttnKernel::reference);
  std::vector<uint16_t> half(buf.size());
  Tensor qh = Tensor::contiguous_view(half.data(), DType::f16, dims, 4, Device::cpu());
  try {
    ops::attention_forward(out, stats, qh, qh, qh, spec);
    FAIL() << "f16 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attention_forward"), std::string::npos) << e.what();
  }

  EXPECT_EQ(ops::parse_attn_kernel("auto"), AttnKernel::auto_select);
  EXPECT_EQ(ops::parse_attn_kernel("cudnn"), AttnKernel::cudnn);
  EXPECT_EQ(ops::parse_attn_kernel("flash"), AttnKernel::flash);
  EXPECT_EQ(ops::parse_attn_kernel("gemm"), AttnKernel::gemm);
  EXPECT_EQ(ops::parse_attn_kernel("reference"), AttnKernel::reference);
  try {
    ops::parse_attn_kernel("fast");
    FAIL() << "'fast' accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "--attn-kernel: 'fast' is not one of auto | cudnn | flash | gemm | reference");
  }
}

// Every job file of jobs/pretrain/ (the paper's runs and those beyond it), as the trainer reads it, on a CUDA
// device with bf16 tensors (the --precision bf16 step) and the H200's cuDNN (9.14): a fast kernel, never the
// reference. The table (job, head dim, kernel, reason) is printed; a job that falls to the reference fails.
TEST(AttentionDispatch, EveryPretrainJobRunsAFastKernelOnCudaBf16) {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(std::string(SINKLAB_SOURCE_DIR) + "/jobs/pretrain"))
    if (e.path().extension() == ".ini") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  ASSERT_EQ(files.size(), 129u) << "jobs/pretrain/ holds another number of job files: update this count";
  std::map<AttnKernel, int> count;
  for (const auto& f : files) {
    const std::string rel = std::filesystem::relative(f, SINKLAB_SOURCE_DIR).string();
    std::string arg0 = "sinklab-pretrain", flag = "--config", path = f.string();
    char* argv[] = {arg0.data(), flag.data(), path.data()};
    train::TrainConfig tc;
    ASSERT_TRUE(train::parse_train_config(3, argv, tc, 1)) << rel;
    const ModelConfig& m = tc.model;
    ops::AttentionSpec spec = m.attention_spec();
    spec.kernel = ops::parse_attn_kernel(tc.attn_kernel);
    // The learned tensors' presence is what the dispatch reads of them (host stand-ins of their shapes).
    std::vector<float> sink(size_t(m.n_heads)), rel_bias(size_t(m.n_heads) * size_t(std::max(m.relative_buckets, 1)));
    const int64_t sink_dims[1] = {m.n_heads}, rel_dims[2] = {m.n_heads, m.relative_buckets};
    if (m.sink_logit || m.softmax_plus_one) spec.sink_logit = Tensor::contiguous_view(sink.data(), DType::f32, sink_dims, 1, Device::cpu());
    if (m.pos_emb == PosEmb::relative)
      spec.relative_bias = Tensor::contiguous_view(rel_bias.data(), DType::f32, rel_dims, 2, Device::cpu());
    AttnCall call{DeviceKind::cuda, DType::bf16, m.head_dim(), false, 91400};
    call.queries = m.context;
    const ops::AttnKernelChoice c = ops::choose_attention_kernel(spec, call);
    std::printf("%-48s dh %4d  %-9s %s\n", rel.c_str(), m.head_dim(), ops::attn_kernel_name(c.kernel), c.reason.c_str());
    EXPECT_NE(c.kernel, AttnKernel::reference) << rel << ": " << c.reason;
    count[c.kernel]++;
  }
  std::printf("cudnn %d, flash %d, gemm %d, reference %d of %zu job files\n", count[AttnKernel::cudnn],
              count[AttnKernel::flash], count[AttnKernel::gemm], count[AttnKernel::reference], files.size());
}

// The cost model of one call (the step ledger's and bench/README.md's roofline): a causal call's FLOPs as
// FlashAttention counts them on cuDNN, whole squares on the GEMM path, whole tiles on the flash kernel; the f32
// copies around cuDNN; launches per head on the GEMM path.
TEST(AttentionDispatch, CostOfACall) {
  ops::AttentionSpec spec;
  const ops::AttnShape shape{8, 2048, 16, 16, 128, DType::bf16};
  const double pairs = 2048.0 * 2049.0 / 2.0, BH = 8.0 * 16.0;
  const ops::AttnCost cudnn = ops::attention_cost(AttnKernel::cudnn, spec, shape, false);
  EXPECT_DOUBLE_EQ(cudnn.flops, 4.0 * BH * pairs * 128.0);
  EXPECT_DOUBLE_EQ(ops::attention_cost(AttnKernel::cudnn, spec, shape, true).flops, 2.5 * cudnn.flops);
  EXPECT_DOUBLE_EQ(cudnn.bytes, 2.0 * (2.0 * 8 * 2048 * 16 * 128 * 2.0) + 4.0 * BH * 2048.0);
  EXPECT_EQ(cudnn.launches, 1);
  ops::AttnShape f32 = shape;
  f32.dtype = DType::f32;
  EXPECT_GT(ops::attention_cost(AttnKernel::cudnn, spec, f32, false).bytes, 3.9 * cudnn.bytes);
  const ops::AttnCost gemm = ops::attention_cost(AttnKernel::gemm, spec, shape, false);
  EXPECT_DOUBLE_EQ(gemm.flops, 4.0 * BH * 2048.0 * 2048.0 * 128.0);
  EXPECT_EQ(gemm.launches, 16 * 3);
  EXPECT_GT(gemm.bytes, 3.0 * 2.0 * BH * 2048.0 * 2048.0);  // the scores written, read, written, read
  const ops::AttnCost flash = ops::attention_cost(AttnKernel::flash, spec, shape, false);
  EXPECT_DOUBLE_EQ(flash.flops, 4.0 * BH * (32.0 * 33.0 / 2.0) * 64.0 * 64.0 * 128.0);  // 528 tiles of 64 x 64
  EXPECT_EQ(ops::attention_cost(AttnKernel::flash, spec, shape, true).launches, 2);
  spec.mask = ops::AttnMask::sliding_window;  // a window of 64: ~64 keys a query, a band of tiles
  spec.window = 64;
  const double band = ops::attention_cost(AttnKernel::cudnn, spec, shape, false).flops;
  EXPECT_DOUBLE_EQ(band, 4.0 * BH * (64.0 * 2048.0 - 63.0 * 64.0 / 2.0) * 128.0);
}

}  // namespace
}  // namespace sinklab
