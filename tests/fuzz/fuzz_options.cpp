// libFuzzer target: sinklab-pretrain's option parsing (train::parse_train_config: command-line flags, an
// ini file named by --config, the variant axes, every cross-flag check). The input is split by the
// FuzzedDataProvider into up to 8 command-line words and the ini text; seeds are the job files of jobs/.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.hpp"
#include "train/train_config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sinklab;
  FuzzedDataProvider in(data, size);
  const int world_size = in.ConsumeIntegralInRange<int>(1, 8);
  const int n_words = in.ConsumeIntegralInRange<int>(0, 8);
  std::vector<std::string> words = {"sinklab-pretrain"};
  for (int i = 0; i < n_words; ++i) words.push_back(in.ConsumeRandomLengthString(64));
  const std::string ini_path = fuzz::write_file("job.ini", in.ConsumeRemainingBytesAsString());
  words.push_back("--config");
  words.push_back(ini_path);
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  fuzz::expect_clean([&] {
    train::TrainConfig config;
    train::parse_train_config(int(words.size()), argv.data(), config, world_size);
  });
  return 0;
}
