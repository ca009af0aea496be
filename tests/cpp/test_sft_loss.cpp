// sinklab-sft's loss against Hugging Face's LlamaForCausalLM (float64, eager attention): the rows of an
// SFT file (tokens + assistant loss mask, as data_prep sft writes them) read by SftSampler into
// micro-batches of every data-parallel layout of the same global batch, each micro-batch's gradient
// scaled by 1 / (the global batch's counted targets) as the trainer does, give the PyTorch masked mean
// and its gradients (golden file from tests/python/goldens/gen_sft_loss.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "io/h5.hpp"
#include "model/transformer.hpp"
#include "test_util.hpp"
#include "train/data.hpp"

namespace sinklab {
namespace {

namespace fs = std::filesystem;

model::ModelConfig config_of(const test::Golden& g) {
  model::ModelConfig cfg;
  cfg.vocab_size = int(g.param("sft/vocab"));
  cfg.d_model = int(g.param("sft/d"));
  cfg.n_layers = int(g.param("sft/layers"));
  cfg.n_heads = int(g.param("sft/heads"));
  cfg.n_kv_heads = int(g.param("sft/kv_heads"));
  cfg.ffn_hidden = int(g.param("sft/ffn"));
  cfg.context = int(g.param("sft/context"));
  cfg.norm_eps = g.param("sft/norm_eps");
  cfg.rope_theta = g.param("sft/rope_theta");
  return cfg;
}

// An SFT file in data_prep sft's layout (the mask stored as int32 here; the reader converts any type).
std::string write_sft_file(const fs::path& dir, Tensor tokens, Tensor mask, int64_t context) {
  fs::create_directories(dir);
  const std::string path = (dir / "sft.h5").string();
  io::ResultsFile f = io::ResultsFile::create(path, io::RootInfo{"test", "", io::now_utc_iso(), "", "", ""});
  f.write_array("/tokens", {tokens.shape[0], tokens.shape[1]}, tokens.ptr<int32_t>());
  f.write_array("/loss_mask", {mask.shape[0], mask.shape[1]}, mask.ptr<int32_t>());
  f.set_attr("/", "context", context);
  f.commit();
  f.close();
  return path;
}

struct Layout {
  int64_t rows, accum, world;
};

class SftLossVsHf : public ::testing::TestWithParam<Layout> {};

TEST_P(SftLossVsHf, MaskedMeanAndGradientsMatchTransformers) {
  const Layout lay = GetParam();
  test::Golden g("sft_loss.safetensors");
  const model::ModelConfig cfg = config_of(g);
  const int64_t C = cfg.context, R = int64_t(g.param("sft/rows"));
  const fs::path dir = fs::temp_directory_path() / ("sinklab_sft_loss_" + std::to_string(::getpid()) + "_" +
                                                    std::to_string(lay.rows) + std::to_string(lay.world));
  const std::string path = write_sft_file(dir, g.raw("sft/tokens"), g.raw("sft/loss_mask"), C);
  train::SftSampler data(path, C, /*seed=*/5, uint32_t(cfg.vocab_size));
  ASSERT_EQ(data.n_rows(), uint64_t(R));

  model::Transformer model(cfg);
  for (const auto& spec : model.specs()) ops::copy(model.param(spec.name), g.raw("sft/init/" + spec.name));
  const train::BatchLayout layout = train::make_batch_layout(R * C, C, lay.rows, lay.world);
  ASSERT_EQ(layout.global_rows(), R);

  // The global count first (the mask alone), then every micro-batch of every rank with 1 / count; one
  // model's gradient buffer sums the ranks' gradients as the all-reduce does.
  int64_t global_targets = 0;
  for (int64_t rank = 0; rank < lay.world; ++rank)
    for (int64_t micro = 0; micro < layout.accum; ++micro) global_targets += data.count_targets(layout, 0, micro, rank);
  EXPECT_EQ(global_targets, int64_t(g.param("sft/counted")));
  test::Owned inputs(DType::i32, {lay.rows, C}), targets(DType::i32, {lay.rows, C});
  model.zero_grads();
  double loss_sum = 0.0;
  std::set<uint64_t> rows_seen;
  for (int64_t rank = 0; rank < lay.world; ++rank)
    for (int64_t micro = 0; micro < layout.accum; ++micro) {
      const int64_t filled = data.fill_batch(layout, 0, micro, rank, inputs.t, targets.t);
      EXPECT_EQ(filled, data.count_targets(layout, 0, micro, rank));
      for (int64_t j = 0; j < lay.rows; ++j) {
        rows_seen.insert(data.row_of(train::ChunkSampler::sample_index(layout, 0, micro, rank, j)));
        EXPECT_EQ(targets.data<int32_t>()[j * C + C - 1], -1);  // the row's last token predicts nothing
      }
      int64_t counted = 0;
      loss_sum += model.forward_backward(inputs.t, targets.t, 1.0 / double(global_targets), &counted);
      EXPECT_EQ(counted, filled);
    }
  EXPECT_EQ(rows_seen.size(), size_t(R));  // the global batch is every row once
  const double loss = loss_sum / double(global_targets), ref = test::element(g.raw("sft/loss"), 0);
  EXPECT_LE(std::fabs(loss - ref) / std::fabs(ref), 1e-5) << loss << " vs " << ref;
  double worst = 0;
  for (const auto& spec : model.specs()) {
    const double err = test::rel_error(model.grad(spec.name), g.raw("sft/grad/" + spec.name));
    worst = std::max(worst, err);
    EXPECT_LE(err, 1e-5) << "gradient of " << spec.name;
  }
  std::printf("[rows %lld x accum %lld x world %lld] masked loss rel. diff %.2e, worst gradient rel. diff %.2e\n",
              (long long)lay.rows, (long long)layout.accum, (long long)lay.world, std::fabs(loss - ref) / ref, worst);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Layouts, SftLossVsHf,
                         ::testing::Values(Layout{4, 1, 1}, Layout{2, 2, 1}, Layout{1, 4, 1}, Layout{1, 2, 2},
                                           Layout{2, 1, 2}, Layout{1, 1, 4}));

TEST(SftSampler, RefusesAnotherContextAndTokensOutsideTheVocabulary) {
  test::Golden g("sft_loss.safetensors");
  const int64_t C = int64_t(g.param("sft/context"));
  const fs::path dir = fs::temp_directory_path() / ("sinklab_sft_bad_" + std::to_string(::getpid()));
  const std::string path = write_sft_file(dir, g.raw("sft/tokens"), g.raw("sft/loss_mask"), C);
  try {
    train::SftSampler data(path, C + 1, 1, 100);
    FAIL() << "a context mismatch was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--sft-data"), std::string::npos) << e.what();
  }
  train::SftSampler small_vocab(path, C, 1, 3);  // the golden's tokens go up to 36
  test::Owned in(DType::i32, {1, C}), tg(DType::i32, {1, C});
  EXPECT_THROW(small_vocab.fill_batch(train::BatchLayout{1, 1, 1}, 0, 0, 0, in.t, tg.t), Error);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace sinklab
