#include "train/run_dir.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"
#include "io/files.hpp"
#include "train/checkpoint.hpp"

namespace sinklab::train {

namespace fs = std::filesystem;

namespace {

// What the holder wrote into LOCK ("<pid> on <host>"), for the refusal ("" when unreadable).
std::string lock_holder(int fd) {
  char text[300] = {};
  const ssize_t n = ::pread(fd, text, sizeof(text) - 1, 0);
  std::string pid(text, n > 0 ? size_t(n) : 0);
  while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
  return pid;
}

void remove_logged(const fs::path& path, const char* why) {
  std::error_code ec;
  fs::remove_all(path, ec);
  SL_CHECK(!ec, "cannot remove %s (%s): %s", path.c_str(), why, ec.message().c_str());
  log::info0("removed %s (%s)", path.c_str(), why);
}

// A checkpoint save's own name: step_<digits>, optionally followed by .tmp or .old (checkpoint.cpp).
bool is_checkpoint_dir_name(const std::string& name) {
  if (name.size() <= 5 || name.compare(0, 5, "step_") != 0) return false;
  const size_t digits_end = name.find_first_not_of("0123456789", 5);
  if (digits_end == 5) return false;
  const std::string rest = digits_end == std::string::npos ? "" : name.substr(digits_end);
  return rest.empty() || rest == ".tmp" || rest == ".old";
}

}  // namespace

std::string results_path(const std::string& out_dir) { return out_dir + "/" + kResultsFile; }
std::string checkpoints_dir(const std::string& out_dir) { return out_dir + "/" + kCheckpointsDir; }

RunDirLock::RunDirLock(const std::string& out_dir) {
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  SL_CHECK(!ec, "--out-dir: cannot create %s: %s", out_dir.c_str(), ec.message().c_str());
  const std::string path = (fs::path(out_dir) / kRunLock).string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  SL_CHECK(fd_ >= 0, "--out-dir: cannot open %s: %s", path.c_str(), std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err == ENOLCK || err == ENOSYS || err == EOPNOTSUPP) {  // e.g. Lustre mounted without flock
      log::warn("%s: this filesystem has no flock (%s): a second job on --out-dir %s will not be refused",
                path.c_str(), std::strerror(err), out_dir.c_str());
      return;
    }
    const std::string holder = lock_holder(fd_);
    ::close(fd_);
    fd_ = -1;
    SL_CHECK(err != EWOULDBLOCK, "--out-dir %s is in use by another job (pid %s holds %s): one directory holds one "
             "run; give this job its own --out-dir", out_dir.c_str(), holder.empty() ? "?" : holder.c_str(),
             path.c_str());
    SL_FAIL("--out-dir: cannot lock %s: %s", path.c_str(), std::strerror(err));
  }
  // Who holds it, for the refusal a second job prints (the lock itself is the flock, not this text).
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  const std::string holder = std::to_string(::getpid()) + " on " + host + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, holder.data(), holder.size(), 0) != ssize_t(holder.size()))
    log::warn("%s: cannot record this job's pid: %s", path.c_str(), std::strerror(errno));
}

RunDirLock::~RunDirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

void remove_leftovers(const std::string& out_dir) {
  std::error_code ec;
  const std::string temp_prefix = std::string(kResultsFile) + io::kWorkingCopyInfix;
  for (const auto& entry : fs::directory_iterator(out_dir, ec))
    if (entry.path().filename().string().starts_with(temp_prefix))
      remove_logged(entry.path(), "the working copy of results.h5 of an interrupted job");
  SL_CHECK(!ec, "--out-dir: cannot list %s: %s", out_dir.c_str(), ec.message().c_str());
  const fs::path checkpoints = fs::path(out_dir) / kCheckpointsDir;
  if (!fs::is_directory(checkpoints, ec)) return;
  std::vector<fs::path> stale;
  for (const auto& entry : fs::directory_iterator(checkpoints, ec)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || !is_checkpoint_dir_name(name)) continue;
    if (name.ends_with(".tmp") || name.ends_with(".old") || !fs::is_regular_file(entry.path() / kCheckpointManifest))
      stale.push_back(entry.path());
  }
  SL_CHECK(!ec, "--out-dir: cannot list %s: %s", checkpoints.c_str(), ec.message().c_str());
  // Incomplete step_N first, then the saves in descending order, so that of step_N.tmp and step_N.old (both
  // complete: a kill between finish_checkpoint's renames) the newer one is moved back into place.
  std::sort(stale.begin(), stale.end(), [](const fs::path& a, const fs::path& b) {
    return a.has_extension() != b.has_extension() ? !a.has_extension() : a > b;
  });
  for (const fs::path& dir : stale) {
    const fs::path final_dir = dir.parent_path() / dir.stem();
    if (dir.has_extension() && fs::is_regular_file(dir / kCheckpointManifest) && !fs::exists(final_dir)) {
      fs::rename(dir, final_dir, ec);
      SL_CHECK(!ec, "cannot rename %s to %s: %s", dir.c_str(), final_dir.c_str(), ec.message().c_str());
      log::info0("restored %s from %s (a complete save interrupted while it was moved into place)",
                 final_dir.c_str(), dir.c_str());
      continue;
    }
    remove_logged(dir, dir.has_extension() ? "an interrupted checkpoint save"
                                           : "a checkpoint directory without COMPLETE: an interrupted save or pruning");
  }
}

void claim_for_fresh_run(const std::string& out_dir, bool overwrite) {
  const fs::path results = fs::path(out_dir) / kResultsFile, checkpoints = fs::path(out_dir) / kCheckpointsDir;
  std::error_code ec;
  const bool has_results = fs::exists(results, ec);
  const size_t n_checkpoints = list_checkpoints(checkpoints.string()).size();
  if (!has_results && n_checkpoints == 0) return;
  if (!overwrite) {
    std::string held = has_results ? kResultsFile : "";
    if (n_checkpoints > 0) held += strfmt("%s%zu checkpoint(s)", held.empty() ? "" : " and ", n_checkpoints);
    SL_FAIL("--out-dir %s holds another run (%s): continue it with --resume, give this run its own --out-dir, or "
            "pass --overwrite to delete them", out_dir.c_str(), held.c_str());
  }
  for (const fs::path& path : {results, checkpoints, fs::path(out_dir) / kDoneMarker})
    if (fs::exists(path, ec)) remove_logged(path, "--overwrite: the previous run's");
}

std::string fingerprint_text(const Fingerprint& settings) {
  std::string text;
  for (const auto& [flag, value] : settings) text += flag + " = " + value + "\n";
  return text;
}

std::map<std::string, std::string> fingerprint_of_text(const std::string& text) {
  std::map<std::string, std::string> settings;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(begin, end - begin);
    const size_t eq = line.find(" = ");
    if (eq != std::string::npos) settings[line.substr(0, eq)] = line.substr(eq + 3);
    begin = end + 1;
  }
  return settings;
}

void refuse_other_run(const std::map<std::string, std::string>& stored, const Fingerprint& ours,
                      const std::string& holder) {
  for (const auto& [flag, value] : ours) {
    auto it = stored.find(flag);
    SL_CHECK(it == stored.end() || it->second == value,
             "--%s: %s %s = '%s' but this job has '%s' (resume with the stored value, or give a new run its own "
             "--out-dir)", flag.c_str(), holder.c_str(), flag.c_str(), it->second.c_str(), value.c_str());
  }
}

void check_results_continue_run(const io::ResultsFile& results, const std::string& run_name,
                                const Fingerprint& ours, int64_t start_step, const std::string& checkpoint) {
  const std::string run = "/runs/" + run_name, steps_column = run + "/train/step";
  if (results.has_attr(run, "fingerprint"))
    refuse_other_run(fingerprint_of_text(results.attr_string(run, "fingerprint")), ours,
                     results.path() + " holds run '" + run_name + "' with");
  if (checkpoint.empty() || start_step == 0) return;
  const std::vector<int64_t> steps =
      results.exists(steps_column) ? results.read_column_int(steps_column) : std::vector<int64_t>{};
  int64_t logged = 0;  // steps 0, 1, ... in order
  while (logged < int64_t(steps.size()) && logged < start_step && steps[size_t(logged)] == logged) ++logged;
  SL_CHECK(logged == start_step,
           "--resume: %s holds %lld row(s) of steps 0, 1, ... of run '%s' (--run-name) but %s continues from step "
           "%lld: the steps in between are lost; start the run again in a new --out-dir (or here with --overwrite)",
           results.path().c_str(), (long long)logged, run_name.c_str(), checkpoint.c_str(), (long long)start_step);
}

void remove_done_marker(const std::string& out_dir) {
  const fs::path done = fs::path(out_dir) / kDoneMarker;
  std::error_code ec;
  fs::remove(done, ec);
  SL_CHECK(!ec, "--out-dir: cannot remove the stale %s: %s", done.c_str(), ec.message().c_str());
}

void write_done_marker(const std::string& out_dir, int64_t reached, int64_t target) {
  const std::string text = strfmt("steps %lld of %lld\n", (long long)reached, (long long)target);
  io::AtomicFile file((fs::path(out_dir) / kDoneMarker).string());
  file.write(text.data(), text.size());
  file.commit();
}

}  // namespace sinklab::train
