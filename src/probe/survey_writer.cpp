// SurveyWriter (survey_writer.hpp): sinklab-survey's results file on rank 0.
#include "probe/survey_writer.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <variant>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/text.hpp"

namespace fs = std::filesystem;

namespace sinklab::probe {

std::string params_fingerprint(const SurveyParams& p) {
  std::string eps;
  for (double e : p.eps) eps += strfmt("%s%g", eps.empty() ? "" : ",", e);
  std::string fp = strfmt("n-seq=%lld seq-len=%lld max-k=%d sink-eps=%s batch=%lld seed=%llu long-input-len=%lld long-n-seq=%lld",
                          (long long)p.n_seq, (long long)p.seq_len, p.max_k, eps.c_str(), (long long)p.batch,
                          (unsigned long long)p.seed, (long long)p.long_len, (long long)p.long_n_seq);
  if (p.hellaswag_n > 0) fp += strfmt(" hellaswag-n=%lld", (long long)p.hellaswag_n);  // older files stay resumable
  if (p.max_logits_bytes != int64_t(256) << 20) fp += strfmt(" max-logits-memory=%lld", (long long)p.max_logits_bytes);
  return fp;
}

std::string encode_item_outcome(bool ok, const std::string& error, double seconds, const io::ResultSet& data) {
  io::ResultSet meta;
  meta.set_attr("", "status", std::string(ok ? "ok" : "failed"));
  meta.set_attr("", "error", error);
  meta.set_attr("", "seconds", seconds);
  return meta.serialize() + data.serialize();
}

SurveyWriter::SurveyWriter(SurveyFileOptions o, const std::vector<SurveyItem>& items,
                           const std::vector<SurveyModel>& models, std::vector<double> costs)
    : o_(std::move(o)), items_(items), models_(models), costs_(std::move(costs)), done_(items.size(), 0) {
  const fs::path dir = fs::path(o_.output).parent_path();
  std::error_code ec;
  if (!dir.empty()) fs::create_directories(dir, ec);
  SL_CHECK(!ec, "--output: cannot create %s: %s", dir.c_str(), ec.message().c_str());
  const std::string& fingerprint = o_.fingerprint;
  if (fs::exists(o_.output)) {
    SL_CHECK(o_.resume, "--output %s exists: pass --resume to continue it, or remove it", o_.output.c_str());
    file_.emplace(io::ResultsFile::open(o_.output));
    SL_CHECK(file_->has_attr("/", "survey_params"), "--resume: %s is not a survey results file", o_.output.c_str());
    const std::string was = file_->attr_string("/", "survey_params");
    SL_CHECK(was == fingerprint, "--resume: %s was made with %s; this run has %s", o_.output.c_str(), was.c_str(),
             fingerprint.c_str());
    for (size_t i = 0; i < items_.size(); ++i) {
      const std::string obj = "/items/" + items_[i].id(models_);
      done_[i] = file_->exists(obj) && file_->attr_string(obj, "status") == "ok";
    }
  } else {
    file_.emplace(io::ResultsFile::create(o_.output, o_.root));
    file_->set_attr("/", "survey_params", fingerprint);
    file_->create_group("/items");
    file_->create_group("/models");
  }
  std::error_code rm;
  fs::remove(o_.output + ".done", rm);
  for (size_t i = 0; i < items_.size(); ++i)
    if (done_[i]) ++already_;
    else pending_cost_ += costs_[i];
}

void SurveyWriter::collect(int64_t index, int rank, const std::string& blob) {
  const SurveyItem& item = items_[size_t(index)];
  const std::string id = item.id(models_);
  size_t used = 0;
  const io::ResultSet meta = io::ResultSet::deserialize(blob, &used);
  const io::ResultSet data = io::ResultSet::deserialize(std::string_view(blob).substr(used));
  const bool ok = std::get<std::string>(*meta.find_attr("", "status")) == "ok";
  const std::string error = std::get<std::string>(*meta.find_attr("", "error"));
  if (ok) data.write(*file_, item.group(models_));
  const std::string obj = "/items/" + id;
  meta.write(*file_, obj);
  file_->set_attr(obj, "rank", int64_t(rank));
  file_->set_attr(obj, "model", models_[size_t(item.model)].name);
  file_->set_attr(obj, "input", item.label());
  file_->set_attr(obj, "domain", item.domain);
  if (!ok) {
    failed_.push_back(index);
    std::fprintf(stderr, "sinklab-survey: item %s failed: %s\n", id.c_str(), error.c_str());
    std::fflush(stderr);
  }
  ++finished_;
  done_cost_ += costs_[size_t(index)];
  const double elapsed = clock_.seconds();
  const double eta = done_cost_ > 0 ? elapsed * (pending_cost_ - done_cost_) / done_cost_ : 0;
  log::info("items %lld/%zu, model %s (%s/%s %s), elapsed %s, ETA %s", (long long)(already_ + finished_),
            items_.size(), models_[size_t(item.model)].name.c_str(), item.label().c_str(), item.domain.c_str(),
            ok ? "ok" : "FAILED", hms(elapsed).c_str(), hms(eta).c_str());
  if (o_.commit_every <= 0 || since_commit_.seconds() >= o_.commit_every) commit();
}

void SurveyWriter::commit() {
  file_->commit();
  since_commit_.reset();
}

int SurveyWriter::finish(bool stopped) {
  commit();
  const int64_t total = int64_t(items_.size()), done = already_ + finished_;
  if (stopped) {
    log::info("survey stopped: %lld of %lld items attempted (%zu failed); run again with --resume to continue %s",
              (long long)done, (long long)total, failed_.size(), o_.output.c_str());
    return 0;
  }
  std::string summary = strfmt("%lld items, %zu failed -> %s", (long long)total, failed_.size(), o_.output.c_str());
  std::ofstream(o_.output + ".done") << summary << "\n";
  if (failed_.empty()) {
    log::info("survey done: %s", summary.c_str());
    return 0;
  }
  // In the plan's order, not the order in which ranks happened to report them: the line is the same every run.
  std::sort(failed_.begin(), failed_.end());
  std::string list;
  for (int64_t index : failed_) list += (list.empty() ? "" : ", ") + items_[size_t(index)].id(models_);
  std::fprintf(stderr, "sinklab-survey: error: %zu of %lld items failed: %s (errors under /items in %s)\n",
               failed_.size(), (long long)total, list.c_str(), o_.output.c_str());
  return 1;
}

}  // namespace sinklab::probe
