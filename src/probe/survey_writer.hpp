// sinklab-survey's results file (docs/DESIGN.md, "HDF5 results"; the schema in src/io/results_schema.tsv):
// rank 0 writes every item's measurements (probe/survey_run.hpp) under /models/<model>/<label>/<domain> and
// its bookkeeping under /items/<id> (attributes status, error, seconds, rank, model, input, domain), commits
// at most every commit_every seconds and at the end, and writes "<output>.done" once every item was attempted.
// An item's outcome travels from the rank that measured it to rank 0 as encode_item_outcome's bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/timer.hpp"
#include "io/h5.hpp"
#include "io/result_set.hpp"
#include "probe/survey_plan.hpp"
#include "probe/survey_run.hpp"

namespace sinklab::probe {

// The parameters an item's numbers depend on (the root attribute survey_params): a resumed file must have been
// made with the same.
std::string params_fingerprint(const SurveyParams& p);

// An item's outcome as it travels to rank 0: bookkeeping, then the measurements.
std::string encode_item_outcome(bool ok, const std::string& error, double seconds, const io::ResultSet& data);

struct SurveyFileOptions {
  std::string output;        // the results file
  bool resume = false;       // continue an existing file (else an existing file is refused)
  double commit_every = 60;  // seconds between commits (0: after every item)
  io::RootInfo root;         // the root attributes of a new file
  std::string fingerprint;   // params_fingerprint of the run
};

// Rank 0's side: the results file, the record of what is done, progress lines.
class SurveyWriter {
 public:
  SurveyWriter(SurveyFileOptions o, const std::vector<SurveyItem>& items, const std::vector<SurveyModel>& models,
               std::vector<double> costs);

  const std::vector<char>& done() const { return done_; }
  int64_t already() const { return already_; }

  // The outcome (encode_item_outcome's bytes) of items[index], measured by `rank`.
  void collect(int64_t index, int rank, const std::string& blob);
  void commit();
  // Final commit and summary; the exit status.
  int finish(bool stopped);

 private:
  SurveyFileOptions o_;
  const std::vector<SurveyItem>& items_;
  const std::vector<SurveyModel>& models_;
  std::vector<double> costs_;
  std::vector<char> done_;
  std::optional<io::ResultsFile> file_;
  std::vector<int64_t> failed_;  // indices into items_
  int64_t already_ = 0, finished_ = 0;
  double pending_cost_ = 0, done_cost_ = 0;
  Timer clock_, since_commit_;
};

}  // namespace sinklab::probe
