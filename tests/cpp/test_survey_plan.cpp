// The survey's plan (probe/survey_plan.hpp): catalogue lines, model selection, interventions, and the
// item list every rank builds identically.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "probe/survey_plan.hpp"

namespace sinklab::probe {
namespace {

namespace fs = std::filesystem;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(SurveyPlan, Interventions) {
  std::vector<Intervention> v = parse_interventions("replace:5,swap:30", "--interventions");
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].kind, Intervention::Kind::replace);
  EXPECT_EQ(v[0].t, 5);
  EXPECT_EQ(v[0].tag(), "replace_5");
  EXPECT_EQ(v[1].tag(), "swap_30");
  EXPECT_TRUE(parse_interventions("", "--interventions").empty());
  EXPECT_TRUE(parse_interventions("none", "--interventions").empty());
  for (const char* bad : {"replace", "replace:", "move:5", "swap:1", "swap:x", "swap:5x", "replace:-3"})
    EXPECT_NE(error_of([&] { parse_interventions(bad, "--interventions"); }).find("--interventions: '"), std::string::npos)
        << bad;
}

TEST(SurveyPlan, CatalogueLines) {
  SurveyModel m = parse_model_line("gpt2-xl  openai-community/gpt2-xl interventions=replace:5,swap:5 inputs=gpt2.h5", "/models");
  EXPECT_EQ(m.name, "gpt2-xl");
  EXPECT_EQ(m.dir, "/models/openai-community/gpt2-xl");
  EXPECT_EQ(m.inputs, "gpt2.h5");
  ASSERT_TRUE(m.interventions.has_value());
  EXPECT_EQ(m.interventions->size(), 2u);
  m = parse_model_line("own /abs/step_00000040 interventions=none", "/models");
  EXPECT_EQ(m.dir, "/abs/step_00000040");
  EXPECT_TRUE(m.interventions.has_value() && m.interventions->empty());
  EXPECT_FALSE(parse_model_line("a b", "").interventions.has_value());
  EXPECT_EQ(parse_model_line("a b", "").dir, "b");
  EXPECT_NE(error_of([] { parse_model_line("lonely", ""); }).find("expected NAME DIR"), std::string::npos);
  EXPECT_NE(error_of([] { parse_model_line("a/b dir", ""); }).find("'a/b'"), std::string::npos);
  EXPECT_NE(error_of([] { parse_model_line("a:b dir", ""); }).find("'a:b'"), std::string::npos);
  EXPECT_NE(error_of([] { parse_model_line("a dir colour=red", ""); }).find("colour=red"), std::string::npos);
  // Per-model map pairs (Jamba's attention layers); absent: the flags' pairs.
  m = parse_model_line("jamba ai21labs/Jamba-v0.1 attention-maps=4:0,-1:31 qk-maps=12:3", "/models");
  ASSERT_TRUE(m.attention_maps.has_value() && m.qk_maps.has_value());
  ASSERT_EQ(m.attention_maps->size(), 2u);
  EXPECT_EQ((*m.attention_maps)[1].layer, -1);
  EXPECT_EQ((*m.attention_maps)[1].head, 31);
  EXPECT_EQ((*m.qk_maps)[0].layer, 12);
  EXPECT_FALSE(parse_model_line("a b", "").attention_maps.has_value());
  const std::string bad = error_of([] { parse_model_line("a dir attention-maps=4-0", ""); });
  EXPECT_NE(bad.find("model = a dir attention-maps=4-0: "), std::string::npos) << bad;
  EXPECT_NE(bad.find("'4-0' is not layer:head"), std::string::npos) << bad;
}

class SurveyPlanDirs : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("sinklab_plan_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    for (const char* m : {"gpt", "opt", "llama", "broken"}) fs::create_directories(dir_ / m);
    std::ofstream(dir_ / "gpt" / "config.json") << R"({"model_type": "gpt2"})";
    std::ofstream(dir_ / "opt" / "config.json") << R"({"model_type": "opt"})";
    std::ofstream(dir_ / "llama" / "config.json") << R"({"model_type": "llama"})";
    std::ofstream(dir_ / "broken" / "config.json") << "{not json";
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string root() const { return dir_.string(); }
  fs::path dir_;
};

TEST_F(SurveyPlanDirs, SelectModels) {
  const std::vector<SurveyModel> cat = {parse_model_line("g gpt", root()), parse_model_line("l llama", root())};
  EXPECT_EQ(select_models(cat, "all", root()).size(), 2u);
  std::vector<SurveyModel> s = select_models(cat, "l,opt," + (dir_ / "broken").string(), root());
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].name, "l");
  EXPECT_EQ(s[1].name, "opt");  // not in the catalogue: a directory under the model root
  EXPECT_EQ(s[1].dir, (dir_ / "opt").string());
  EXPECT_EQ(s[2].name, "broken");  // an absolute directory
  EXPECT_NE(error_of([&] { select_models(cat, "g,g", root()); }).find("twice"), std::string::npos);
  EXPECT_NE(error_of([&] { select_models({}, "all", root()); }).find("--models selects no model"), std::string::npos);
}

// Issue 44: a misspelled --models name failed only as failed items after every other item had run.
TEST_F(SurveyPlanDirs, MisspelledModelIsRefusedBeforeAnyItem) {
  const std::vector<SurveyModel> cat = {parse_model_line("gpt2-xl gpt", root()), parse_model_line("llama2-7b llama", root())};
  const std::string error = error_of([&] { select_models(cat, "gpt2-xl,lama2-7b", root()); });
  EXPECT_NE(error.find("--models: 'lama2-7b' is neither a model of the catalogue (gpt2-xl, llama2-7b) nor a model "
                       "directory (no directory " + (dir_ / "lama2-7b").string() + ")"), std::string::npos) << error;
  EXPECT_NE(error_of([&] { select_models({}, (dir_ / "nope").string(), root()); }).find("--models: '"), std::string::npos);
  EXPECT_EQ(select_models(cat, "gpt2-xl,llama", root()).size(), 2u);  // a catalogue name and a directory still do
}

// Issue 44: T beyond a model's max_position_embeddings. Learned positions (GPT-2's n_positions, OPT) and a
// sinklab checkpoint's context are hard limits, refused while planning naming the flag; a rotary model's is a
// warning, once per model and T.
TEST_F(SurveyPlanDirs, LengthsBeyondAModelsPositions) {
  for (const char* m : {"gpt16", "rope64", "own32", "gemma_hub"}) fs::create_directories(dir_ / m);
  std::ofstream(dir_ / "gpt16" / "config.json") << R"({"model_type": "gpt2", "n_positions": 16})";
  std::ofstream(dir_ / "rope64" / "config.json") << R"({"model_type": "llama", "max_position_embeddings": 64})";
  std::ofstream(dir_ / "own32" / "config.json") << R"({"model_type": "llama", "max_position_embeddings": 32, "sinklab": {}})";
  std::ofstream(dir_ / "gemma_hub" / "config.json") << R"({"model_type": "gemma3", "text_config": {"max_position_embeddings": 64}})";
  EXPECT_EQ(position_limit((dir_ / "gpt16").string()).positions, 16);
  EXPECT_TRUE(position_limit((dir_ / "gpt16").string()).hard);
  EXPECT_FALSE(position_limit((dir_ / "rope64").string()).hard);
  EXPECT_TRUE(position_limit((dir_ / "own32").string()).hard);
  EXPECT_EQ(position_limit((dir_ / "gemma_hub").string()).positions, 64);
  EXPECT_EQ(position_limit((dir_ / "missing").string()).positions, 0);  // unknown: the item reports it

  auto plan = [&](const std::string& model, std::vector<int64_t> seq_lens, std::vector<std::string> inputs) {
    std::vector<SurveyModel> models = {parse_model_line("m " + model, root())};
    PlanOptions o;
    o.inputs = std::move(inputs);
    o.domains = {"pile_cc"};
    o.long_domains = {"pile_cc"};
    o.seq_len = 12;
    o.seq_lens = std::move(seq_lens);
    return std::make_pair(models, plan_items(models, o));
  };
  {
    auto [models, items] = plan("gpt16", {16}, {"natural", "random"});
    EXPECT_TRUE(check_position_limits(models, items, 12, 4096 /* no long input */).empty());
  }
  {
    auto [models, items] = plan("gpt16", {8, 32}, {"natural", "random"});
    const std::string error = error_of([&] { check_position_limits(models, items, 12, 0); });
    EXPECT_NE(error.find("--seq-lens: T = 32 exceeds the 16 positions of model m (n_positions in " +
                         (dir_ / "gpt16").string() + "/config.json)"), std::string::npos) << error;
  }
  {
    auto [models, items] = plan("own32", {}, {"random", "long"});
    EXPECT_NE(error_of([&] { check_position_limits(models, items, 12, 64); }).find("--long-input-len: T = 64 exceeds the 32"),
              std::string::npos);
  }
  {
    auto [models, items] = plan("gpt16", {}, {"hellaswag"});  // each example's length is checked as it is scored
    EXPECT_TRUE(check_position_limits(models, items, 12, 0).empty());
  }
  auto [models, items] = plan("rope64", {128}, {"natural", "random"});
  const std::vector<std::string> warnings = check_position_limits(models, items, 12, 0);
  ASSERT_EQ(warnings.size(), 1u);  // natural@T128 and random@T128: one line
  EXPECT_NE(warnings[0].find("model m: T = 128 (--seq-lens) exceeds its max_position_embeddings = 64"), std::string::npos)
      << warnings[0];
}

TEST_F(SurveyPlanDirs, LearnedPositionsFromConfig) {
  EXPECT_TRUE(has_learned_positions((dir_ / "gpt").string()));
  EXPECT_TRUE(has_learned_positions((dir_ / "opt").string()));
  EXPECT_FALSE(has_learned_positions((dir_ / "llama").string()));
  EXPECT_FALSE(has_learned_positions((dir_ / "broken").string()));   // the item will say what is wrong
  EXPECT_FALSE(has_learned_positions((dir_ / "missing").string()));
}

TEST_F(SurveyPlanDirs, Items) {
  std::vector<SurveyModel> models = {parse_model_line("g gpt", root()), parse_model_line("l llama", root()),
                                     parse_model_line("o opt interventions=none", root()),
                                     parse_model_line("x llama interventions=swap:7", root())};
  PlanOptions o;
  o.inputs = {"natural", "random", "long"};
  o.domains = {"pile_cc", "arxiv"};
  o.long_domains = {"pile_cc"};
  o.interventions = parse_interventions("replace:5,swap:5", "--interventions");
  o.intervention_inputs = {"repeat"};
  std::vector<SurveyItem> items = plan_items(models, o);
  std::vector<std::string> ids;
  for (const SurveyItem& it : items) ids.push_back(it.id(models));
  const std::vector<std::string> want = {
      "g:natural:pile_cc", "g:natural:arxiv", "g:random:-", "g:long:pile_cc", "g:repeat+replace_5:-", "g:repeat+swap_5:-",
      "l:natural:pile_cc", "l:natural:arxiv", "l:random:-", "l:long:pile_cc",  // RoPE: no global interventions
      "o:natural:pile_cc", "o:natural:arxiv", "o:random:-", "o:long:pile_cc",  // its own list: none
      "x:natural:pile_cc", "x:natural:arxiv", "x:random:-", "x:long:pile_cc", "x:repeat+swap_7:-"};  // asked for
  EXPECT_EQ(ids, want);
  EXPECT_EQ(items[4].group(models), "/models/g/repeat+replace_5/-");
  EXPECT_EQ(items[4].label(), "repeat+replace_5");
  EXPECT_EQ(items[0].group(models), "/models/g/natural/pile_cc");

  PlanOptions bad = o;
  bad.inputs = {"natural", "bogus"};
  EXPECT_NE(error_of([&] { plan_items(models, bad); }).find("--inputs: 'bogus'"), std::string::npos);
  bad = o;
  bad.domains = {};
  EXPECT_NE(error_of([&] { plan_items(models, bad); }).find("--domains"), std::string::npos);
  bad = o;
  bad.inputs = {"random", "random"};
  EXPECT_NE(error_of([&] { plan_items(models, bad); }).find("g:random:- twice"), std::string::npos);
}

// --seq-lens: natural/random/repeat again at each other T, labelled input@T<T> (not long, not hellaswag, not
// the interventions; a length equal to --seq-len is not measured twice); hellaswag has the one domain "-".
TEST_F(SurveyPlanDirs, ItemsAtMoreLengthsAndHellaswag) {
  std::vector<SurveyModel> models = {parse_model_line("g gpt", root())};
  PlanOptions o;
  o.inputs = {"natural", "long", "hellaswag", "repeat"};
  o.domains = {"pile_cc"};
  o.long_domains = {"arxiv"};
  o.interventions = parse_interventions("swap:5", "--interventions");
  o.intervention_inputs = {"repeat"};
  o.seq_len = 64;
  o.seq_lens = {16, 64, 1024};
  std::vector<std::string> ids;
  const std::vector<SurveyItem> items = plan_items(models, o);
  for (const SurveyItem& it : items) ids.push_back(it.id(models));
  const std::vector<std::string> want = {
      "g:natural:pile_cc", "g:long:arxiv", "g:hellaswag:-", "g:repeat:-",
      "g:natural@T16:pile_cc", "g:repeat@T16:-", "g:natural@T1024:pile_cc", "g:repeat@T1024:-", "g:repeat+swap_5:-"};
  EXPECT_EQ(ids, want);
  EXPECT_EQ(items[4].seq_len, 16);
  EXPECT_EQ(items[0].seq_len, 0);
  EXPECT_EQ(items[6].group(models), "/models/g/natural@T1024/pile_cc");

  // --seq-lens-domains: natural text at the other lengths over its own (fewer) domains, ablations too.
  o.inputs = {"natural", "random"};
  o.domains = {"pile_cc", "arxiv", "github"};
  o.seq_lens = {1024};
  o.seq_lens_domains = {"arxiv"};
  o.interventions.clear();
  o.ablations = parse_ablations("window:256", "--ablations");
  o.ablation_inputs = {"natural"};
  ids.clear();
  for (const SurveyItem& it : plan_items(models, o)) ids.push_back(it.id(models));
  const std::vector<std::string> fewer = {
      "g:natural:pile_cc", "g:natural:arxiv", "g:natural:github", "g:random:-", "g:natural@T1024:arxiv",
      "g:random@T1024:-", "g:natural+window_256:pile_cc", "g:natural+window_256:arxiv", "g:natural+window_256:github",
      "g:natural@T1024+window_256:arxiv"};
  EXPECT_EQ(ids, fewer);
  o.seq_lens_domains = {"a/b"};
  EXPECT_NE(error_of([&] { plan_items(models, o); }).find("--seq-lens-domains: bad domain 'a/b'"), std::string::npos);
}

// --ablations: parsed with their parameters, tagged, crossed with the ablation inputs at every length;
// malformed entries are one error naming the flag.
TEST_F(SurveyPlanDirs, Ablations) {
  const std::vector<Ablation> a =
      parse_ablations("window:256,window_sinks:1020:4,mask_first:2,massive_zero:3:4,massive_mean:0:1", "--ablations");
  ASSERT_EQ(a.size(), 5u);
  EXPECT_EQ(a[0].tag(), "window_256");
  EXPECT_EQ(a[1].tag(), "window_1020_sinks_4");
  EXPECT_EQ(a[1].window, 1020);
  EXPECT_EQ(a[1].sink_tokens, 4);
  EXPECT_EQ(a[2].tag(), "mask_first_from_2");
  EXPECT_EQ(a[3].tag(), "massive_zero_3_top4");
  EXPECT_EQ(a[4].tag(), "massive_mean_0_top1");
  EXPECT_TRUE(a[2].attention());
  EXPECT_FALSE(a[3].attention());
  EXPECT_TRUE(parse_ablations("none", "x").empty());
  for (const char* bad : {"window", "window:0", "window:-1", "window_sinks:4", "window_sinks:4:0", "mask_first:a",
                          "massive_zero:1", "massive_mean:1:0", "streaming:4", "window:4:4", "window:4x"})
    EXPECT_NE(error_of([&] { parse_ablations(bad, "--ablations"); }).find("--ablations: '"), std::string::npos) << bad;

  std::vector<SurveyModel> models = {parse_model_line("g gpt", root())};
  PlanOptions o;
  o.inputs = {"natural", "random"};
  o.domains = {"pile_cc", "arxiv"};
  o.seq_len = 64;
  o.seq_lens = {256};
  o.ablations = {a[0], a[3]};
  o.ablation_inputs = {"natural"};
  std::vector<std::string> ids;
  for (const SurveyItem& it : plan_items(models, o)) ids.push_back(it.id(models));
  const std::vector<std::string> want = {
      "g:natural:pile_cc", "g:natural:arxiv", "g:random:-", "g:natural@T256:pile_cc", "g:natural@T256:arxiv",
      "g:random@T256:-", "g:natural+window_256:pile_cc", "g:natural+window_256:arxiv",
      "g:natural@T256+window_256:pile_cc", "g:natural@T256+window_256:arxiv", "g:natural+massive_zero_3_top4:pile_cc",
      "g:natural+massive_zero_3_top4:arxiv", "g:natural@T256+massive_zero_3_top4:pile_cc",
      "g:natural@T256+massive_zero_3_top4:arxiv"};
  EXPECT_EQ(ids, want);
  o.ablation_inputs = {"random"};
  EXPECT_NE(error_of([&] { plan_items(models, o); }).find("--ablation-inputs: 'random'"), std::string::npos);
}

}  // namespace
}  // namespace sinklab::probe
