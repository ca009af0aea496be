// A training run's --out-dir holds one run: results.h5, checkpoints/ and, once the run reached its
// --steps, DONE. Rank 0 claims the directory before anything is read or written there:
//
//   LOCK         an exclusive flock(2) held for the job's life (released by the kernel at exit, even on
//                kill -9), so a second job on the same directory is refused instead of mixing two runs
//   leftovers    what killed jobs leave behind (results.h5.tmp.<pid> working copies, checkpoint
//                directories without their COMPLETE marker, *.tmp / *.old save directories) is removed,
//                one log line each: with the lock held no other job can be writing them
//   fresh run    without --resume, a directory that holds results.h5 or a checkpoint is refused (it is
//                another run's) unless --overwrite deletes exactly those (results.h5, checkpoints/, DONE)
//   DONE         removed at every start, so a stale one never says "finished" for an extended run;
//                written at the end as "steps <reached> of <target>" (slurm/common.sh compares them)
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "io/h5.hpp"

namespace sinklab::train {

// The out-dir layout, spelled here only: <out_dir>/results.h5, <out_dir>/checkpoints/step_<N>/
// (train/checkpoint.hpp), LOCK, DONE.
inline constexpr const char* kResultsFile = "results.h5";
inline constexpr const char* kCheckpointsDir = "checkpoints";
inline constexpr const char* kRunLock = "LOCK";
inline constexpr const char* kDoneMarker = "DONE";

// "<out_dir>/results.h5" and "<out_dir>/checkpoints" (joined with one '/', as given).
std::string results_path(const std::string& out_dir);
std::string checkpoints_dir(const std::string& out_dir);

// The exclusive lock on <out_dir>/LOCK (the directory is created when missing). Throws, naming
// --out-dir and the holder's pid, when another job holds it.
class RunDirLock {
 public:
  explicit RunDirLock(const std::string& out_dir);
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

 private:
  int fd_ = -1;
};

// Removes what interrupted jobs left in out_dir (see above), logging each removal. Call with the lock held.
void remove_leftovers(const std::string& out_dir);

// A run without --resume: refuses (one line naming --out-dir) a directory holding results.h5 or a
// checkpoint, or with overwrite deletes them (results.h5, checkpoints/, DONE; nothing else) and says so.
void claim_for_fresh_run(const std::string& out_dir, bool overwrite);

// A run's fingerprint: every setting that changes its trajectory, as (flag, value) (Trainer::fingerprint).
// A checkpoint stores it in config.json and its state files ("run:<flag>"), results.h5 as "flag = value"
// lines (/runs/<run> attribute "fingerprint").
using Fingerprint = std::vector<std::pair<std::string, std::string>>;
std::string fingerprint_text(const Fingerprint& settings);
std::map<std::string, std::string> fingerprint_of_text(const std::string& text);

// Refuses, in one line naming the setting and both values, a stored fingerprint that differs from this
// job's in a setting both have (files of older builds lack some). `holder` begins the message's subject:
// "<checkpoint> was trained with", "<results.h5> holds run 'x' with".
void refuse_other_run(const std::map<std::string, std::string>& stored, const Fingerprint& ours,
                      const std::string& holder);

// --resume, rank 0, before results.h5 is opened for writing: it must hold this run (the fingerprint
// `ours` under /runs/<run_name>) and, when a checkpoint of step start_step > 0 is continued, the rows of
// every step before it; else the resume would append this run's rows to another's (or after a gap).
void check_results_continue_run(const io::ResultsFile& results, const std::string& run_name,
                                const Fingerprint& ours, int64_t start_step, const std::string& checkpoint);

// DONE: removed at start, written when the run reached its target ("steps 200 of 200").
void remove_done_marker(const std::string& out_dir);
void write_done_marker(const std::string& out_dir, int64_t reached, int64_t target);

}  // namespace sinklab::train
