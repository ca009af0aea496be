// libFuzzer target: the survey's reading of a data_prep hellaswag file (probe::read_multiple_choice), the
// one input of the hellaswag item the survey does not make itself. Structure-aware like
// fuzz_survey_inputs: the fuzzer drives the content of a well-formed HDF5 file (which datasets exist,
// their rank, shape and type, offsets, starts, labels and token ids of any value) that the target writes
// with io::ResultsFile, then reads as the survey does. Whatever the reader accepts must be safe to score:
// offsets that start at 0, grow and stay inside /tokens, continuations inside their choices, labels among
// their example's choices, ids in the vocabulary.
#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "fuzz_util.hpp"
#include "io/h5.hpp"
#include "probe/multiple_choice.hpp"

using namespace sinklab;

namespace {

const char* const kDatasets[] = {"tokens", "choice_offsets", "cont_start", "choice_chars", "example_offsets", "label"};

// A value near the ones a valid file holds (small counts and offsets), or anything.
double fuzzed_value(FuzzedDataProvider& in, int64_t running) {
  switch (in.ConsumeIntegralInRange(0, 9)) {
    case 0: return std::numeric_limits<double>::quiet_NaN();
    case 1: return in.ConsumeFloatingPoint<double>();
    case 2: return -double(in.ConsumeIntegralInRange(1, 3));
    case 3: return 3e9;
    case 4: return double(running);  // offsets that follow on
    default: return double(in.ConsumeIntegralInRange(0, 40));
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::filesystem::create_directories(fuzz::scratch_dir());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const std::string path = fuzz::scratch_dir() + "/hellaswag.h5";
  const int64_t vocab_size = 32;
  const int64_t n_examples = in.ConsumeIntegralInRange<int64_t>(0, 4);
  {
    io::ResultsFile f = io::ResultsFile::create(path, io::RootInfo{});
    for (const char* name : kDatasets) {
      if (in.ConsumeIntegralInRange(0, 9) == 0) continue;  // absent
      std::vector<int64_t> dims(in.ConsumeIntegralInRange(0, 9) == 0 ? 2 : 1);
      int64_t count = 1;
      for (int64_t& dim : dims) count *= (dim = in.ConsumeIntegralInRange<int64_t>(0, 24));
      std::vector<double> values(static_cast<size_t>(count));
      int64_t running = 0;
      for (double& v : values) {  // offsets tend to grow from wherever the last value left them
        v = fuzzed_value(in, running);
        running = (std::isfinite(v) && std::fabs(v) < 1e6 ? int64_t(v) : 0) + in.ConsumeIntegralInRange(0, 6);
      }
      try {
        if (in.ConsumeBool()) {
          f.write_array("/" + std::string(name), dims, values.data());
        } else {
          std::vector<int32_t> ints(values.size());
          for (size_t i = 0; i < ints.size(); ++i)
            ints[i] = std::isfinite(values[i]) && std::fabs(values[i]) < 2e9 ? int32_t(values[i]) : -7;
          f.write_array("/" + std::string(name), dims, ints.data());
        }
      } catch (const Error&) {
        // a shape the writer itself refuses: the file simply lacks that dataset
      }
    }
    f.commit();
  }
  fuzz::expect_clean([&] {
    const probe::MultipleChoiceSet s = probe::read_multiple_choice(path, n_examples, vocab_size);
    const int64_t N = s.n_examples(), C = int64_t(s.cont_start.size());
    if (n_examples > 0 && N > n_examples) std::abort();
    if (int64_t(s.example_offsets.size()) != N + 1 || s.example_offsets.front() != 0 || s.example_offsets.back() != C) std::abort();
    if (int64_t(s.choice_offsets.size()) != C + 1 || s.choice_offsets.front() != 0) std::abort();
    if (s.choice_offsets.back() != int64_t(s.tokens.size()) || int64_t(s.choice_chars.size()) != C) std::abort();
    for (int64_t c = 0; c < C; ++c) {
      const int64_t len = s.choice_offsets[size_t(c + 1)] - s.choice_offsets[size_t(c)];
      if (s.cont_start[size_t(c)] < 1 || s.cont_start[size_t(c)] >= len || s.choice_chars[size_t(c)] < 1) std::abort();
    }
    for (int64_t e = 0; e < N; ++e) {
      const int64_t n_choices = s.example_offsets[size_t(e + 1)] - s.example_offsets[size_t(e)];
      if (n_choices < 1 || s.label[size_t(e)] < 0 || s.label[size_t(e)] >= n_choices) std::abort();
    }
    for (int32_t id : s.tokens)
      if (id < 0 || id >= vocab_size) std::abort();
  });
  return 0;
}
