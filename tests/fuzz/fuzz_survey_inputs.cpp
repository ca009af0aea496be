// libFuzzer target: the survey's reading of a survey inputs file (probe::read_natural_tokens and the
// InputsFinder's index of a --survey-inputs-dir). The fuzzer drives the *content* of a well-formed HDF5
// file — domains, the rank, shape and type of /<domain>/tokens, token values (negative, huge, NaN),
// root attributes of any type — which the target writes with io::ResultsFile and then reads as the
// survey does. Byte-level corruption of the container is libhdf5's own parser, not sinklab's (Debian's
// uninstrumented build; HDF5 is fuzzed upstream), and is not what this target is about.
#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "fuzz_util.hpp"
#include "io/h5.hpp"
#include "io/sha256.hpp"
#include "probe/survey_run.hpp"

namespace fs = std::filesystem;
using namespace sinklab;

namespace {

const char* const kDomains[] = {"wikipedia", "github", "x", "a/b", "", "pile cc", ".."};

std::string model_dir() { return fuzz::scratch_dir() + "/model"; }
std::string inputs_dir() { return fuzz::scratch_dir() + "/inputs"; }

// A root attribute of a type the fuzzer picks (the reader expects a string or an integer).
void fuzzed_attr(FuzzedDataProvider& in, io::ResultsFile& f, const char* name, const std::string& likely_string,
                 int64_t likely_int) {
  switch (in.ConsumeIntegralInRange(0, 4)) {
    case 0: return;  // absent
    case 1: f.set_attr("/", name, likely_string); return;
    case 2: f.set_attr("/", name, in.ConsumeRandomLengthString(80)); return;
    case 3: f.set_attr("/", name, in.ConsumeBool() ? likely_int : in.ConsumeIntegral<int64_t>()); return;
    default: f.set_attr("/", name, in.ConsumeFloatingPoint<double>()); return;
  }
}

double fuzzed_token(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange(0, 7)) {
    case 0: return std::numeric_limits<double>::quiet_NaN();
    case 1: return in.ConsumeFloatingPoint<double>();
    case 2: return -double(in.ConsumeIntegralInRange(1, 3));
    case 3: return 1e10;
    default: return double(in.ConsumeIntegralInRange(0, 600));  // the model's vocabulary is 512 below
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fs::create_directories(model_dir());
  fs::create_directories(inputs_dir());
  fuzz::write_file("model/tokenizer.json", std::string("{\"model\": {\"type\": \"BPE\"}}"));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const std::string path = inputs_dir() + "/inputs.h5";
  static const std::string sha = io::sha256_file(model_dir() + "/tokenizer.json");  // written once, at start-up
  const int64_t T = in.ConsumeIntegralInRange<int64_t>(1, 12);
  const int64_t n_requested = in.ConsumeIntegralInRange<int64_t>(1, 6);
  const int64_t vocab_size = 512;
  const std::string domain = kDomains[in.ConsumeIntegralInRange<size_t>(0, std::size(kDomains) - 1)];
  {
    io::RootInfo info;
    io::ResultsFile f = io::ResultsFile::create(path, info);
    const int n_domains = in.ConsumeIntegralInRange(0, 3);
    for (int d = 0; d < n_domains; ++d) {
      const std::string name = d == 0 && in.ConsumeBool() ? domain
                                                          : kDomains[in.ConsumeIntegralInRange<size_t>(0, std::size(kDomains) - 1)];
      std::vector<int64_t> dims(in.ConsumeIntegralInRange(0, 3));
      int64_t count = 1;
      for (int64_t& dim : dims) count *= (dim = in.ConsumeIntegralInRange<int64_t>(0, 16));
      std::vector<double> values(static_cast<size_t>(count));
      for (double& v : values) v = fuzzed_token(in);
      const std::string ds = "/" + name + "/tokens";
      try {
        switch (in.ConsumeIntegralInRange(0, 2)) {
          case 0: f.write_array(ds, dims, values.data()); break;
          case 1: {
            std::vector<int32_t> ints(values.size());
            for (size_t i = 0; i < ints.size(); ++i)
              ints[i] = std::isfinite(values[i]) && std::fabs(values[i]) < 2e9 ? int32_t(values[i]) : -7;
            f.write_array(ds, dims, ints.data());
            break;
          }
          default: {
            std::vector<float> floats(values.begin(), values.end());
            f.write_array(ds, dims, floats.data());
          }
        }
      } catch (const Error&) {
        // a name or shape the writer itself refuses: the file simply lacks that dataset
      }
    }
    fuzzed_attr(in, f, "prefix_id", "1", in.ConsumeIntegralInRange<int64_t>(-2, 520));
    fuzzed_attr(in, f, "tokenizer_sha256", sha, 0);
    fuzzed_attr(in, f, "T", "8", in.ConsumeIntegralInRange<int64_t>(-1, 16));
    f.commit();
  }

  fuzz::expect_clean([&] {
    const probe::InputTokens t = probe::read_natural_tokens(path, domain, n_requested, T, vocab_size);
    // What the survey relies on from an accepted file: the shape asked for, every id in the vocabulary.
    if (t.ids.shape[1] != T || t.ids.shape[0] < 1 || t.ids.shape[0] > n_requested) std::abort();
    for (int64_t i = 0; i < t.ids.numel(); ++i)
      if (t.ids.ptr<int32_t>()[i] < 0 || t.ids.ptr<int32_t>()[i] >= vocab_size) std::abort();
    if (t.bos < -1 || t.bos >= vocab_size) std::abort();
  });
  fuzz::expect_clean([&] {
    probe::InputsFinder finder(inputs_dir());
    probe::SurveyModel model;
    model.name = "fuzz";
    model.dir = model_dir();
    const std::string found = finder.find(model, T);
    if (found != path) std::abort();
  });
  return 0;
}
