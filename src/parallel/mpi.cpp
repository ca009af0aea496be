#include "parallel/mpi.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"

namespace sinklab::parallel {
namespace {

constexpr size_t kMaxCount = size_t(INT_MAX) / 2;

template <class T>
void allreduce_chunks(T* data, size_t n, MPI_Datatype type, MPI_Op op) {
  for (size_t off = 0; off < n; off += kMaxCount) {
    int count = int(std::min(kMaxCount, n - off));
    MPI_Allreduce(MPI_IN_PLACE, data + off, count, type, op, MPI_COMM_WORLD);
  }
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  return end && *end == '\0' ? int(x) : fallback;
}

// Whether a launcher started this process as one rank of a job: mpirun/mpiexec (OpenMPI's variables,
// PMIx or PMI), srun with a PMI plugin, or several tasks of a Slurm step. SINKLAB_MPI=1 forces MPI for
// other launchers, SINKLAB_MPI=0 forbids it.
bool started_by_a_launcher() {
  if (const char* forced = std::getenv("SINKLAB_MPI"); forced && *forced) return std::string(forced) != "0";
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (std::getenv(name)) return true;
  return env_int("SLURM_STEP_NUM_TASKS", 1) > 1;
}

}  // namespace

World World::init(int& argc, char**& argv) {
  World w;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized && !started_by_a_launcher()) {
    // One process on its own: rank 0 of 1 without MPI. OpenMPI's singleton start forks a daemon per
    // process (~0.5 s) and fails now and then when several start at once ("Unable to start a daemon on
    // the local node", seen in the test suite's parallel runs); a job of one needs no MPI at all.
    log::set_rank(0, 1);
    return w;
  }
  w.mpi_active_ = true;
  if (!initialized) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    w.owns_mpi_ = true;
    if (provided < MPI_THREAD_FUNNELED) {
      std::fprintf(stderr, "sinklab: error: the MPI library does not provide MPI_THREAD_FUNNELED\n");
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &w.rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &w.size_);
  MPI_Comm local = MPI_COMM_NULL;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w.rank_, MPI_INFO_NULL, &local) == MPI_SUCCESS &&
      local != MPI_COMM_NULL) {
    MPI_Comm_rank(local, &w.local_rank_);
    MPI_Comm_size(local, &w.local_size_);
    MPI_Comm_free(&local);
  } else {
    w.local_rank_ = env_int("OMPI_COMM_WORLD_LOCAL_RANK", env_int("SLURM_LOCALID", 0));
    w.local_size_ = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", env_int("SLURM_NTASKS_PER_NODE", 1));
  }
  log::set_rank(w.rank_, w.size_);
  return w;
}

int World::gpu_for(int local_rank, int local_size, int visible) {
  if (visible == 0 || visible == 1) return visible == 1 ? 0 : local_rank;
  SL_CHECK(local_rank < visible,
           "local rank %d of %d on this node sees %d GPUs: start at most one rank per GPU, or bind one GPU to each "
           "rank (srun --gpus-per-task=1)", local_rank, local_size, visible);
  return local_rank;
}

World::~World() {
  if (!owns_mpi_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

// Without MPI (a job of one) every collective is the identity: the sum, maximum, broadcast or gather
// over one rank is that rank's own data.
void World::barrier() const {
  if (mpi_active_) MPI_Barrier(MPI_COMM_WORLD);
}

void World::allreduce_sum(float* data, size_t n) const {
  if (mpi_active_) allreduce_chunks(data, n, MPI_FLOAT, MPI_SUM);
}
void World::allreduce_sum(double* data, size_t n) const {
  if (mpi_active_) allreduce_chunks(data, n, MPI_DOUBLE, MPI_SUM);
}
void World::allreduce_sum(int64_t* data, size_t n) const {
  if (mpi_active_) allreduce_chunks(data, n, MPI_INT64_T, MPI_SUM);
}

double World::allreduce_sum(double value) const {
  allreduce_sum(&value, 1);
  return value;
}
int64_t World::allreduce_sum(int64_t value) const {
  allreduce_sum(&value, 1);
  return value;
}
void World::allreduce_max(double* data, size_t n) const {
  if (!mpi_active_) return;
  std::vector<double> values_and_nans(2 * n);  // [values with NaN as -inf, 1 where NaN]
  for (size_t i = 0; i < n; ++i) {
    const bool nan = std::isnan(data[i]);
    values_and_nans[i] = nan ? -std::numeric_limits<double>::infinity() : data[i];
    values_and_nans[n + i] = nan ? 1.0 : 0.0;
  }
  allreduce_chunks(values_and_nans.data(), 2 * n, MPI_DOUBLE, MPI_MAX);
  for (size_t i = 0; i < n; ++i)
    data[i] = values_and_nans[n + i] > 0 ? std::numeric_limits<double>::quiet_NaN() : values_and_nans[i];
}

double World::allreduce_max(double value) const {
  allreduce_max(&value, 1);
  return value;
}

void World::broadcast(std::vector<uint8_t>& bytes, int root) const {
  SL_CHECK(root >= 0 && root < size_, "broadcast: root %d outside [0, %d)", root, size_);
  if (!mpi_active_) return;
  uint64_t n = bytes.size();
  MPI_Bcast(&n, 1, MPI_UINT64_T, root, MPI_COMM_WORLD);
  bytes.resize(size_t(n));
  for (uint64_t off = 0; off < n; off += kMaxCount) {
    int count = int(std::min<uint64_t>(kMaxCount, n - off));
    MPI_Bcast(bytes.data() + off, count, MPI_BYTE, root, MPI_COMM_WORLD);
  }
}

void World::broadcast(std::string& text, int root) const {
  std::vector<uint8_t> bytes(text.begin(), text.end());
  broadcast(bytes, root);
  text.assign(bytes.begin(), bytes.end());
}

std::vector<std::string> World::gather(const std::string& blob, int root) const {
  SL_CHECK(root >= 0 && root < size_, "gather: root %d outside [0, %d)", root, size_);
  SL_CHECK(blob.size() <= size_t(INT_MAX), "gather: a blob of %zu bytes is too large", blob.size());
  if (!mpi_active_) return {blob};
  int mine = int(blob.size());
  std::vector<int> counts(rank_ == root ? size_t(size_) : 0);
  MPI_Gather(&mine, 1, MPI_INT, counts.data(), 1, MPI_INT, root, MPI_COMM_WORLD);
  std::vector<int> displs(counts.size());
  std::vector<char> all;
  if (rank_ == root) {
    int64_t total = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
      SL_CHECK(total <= INT_MAX, "gather: %lld bytes in total is too large", (long long)total);
      displs[r] = int(total);
      total += counts[r];
    }
    SL_CHECK(total <= INT_MAX, "gather: %lld bytes in total is too large", (long long)total);
    all.resize(size_t(std::max<int64_t>(total, 1)));
  }
  MPI_Gatherv(blob.data(), mine, MPI_BYTE, all.data(), counts.data(), displs.data(), MPI_BYTE, root,
              MPI_COMM_WORLD);
  std::vector<std::string> out;
  if (rank_ == root)
    for (size_t r = 0; r < counts.size(); ++r) out.emplace_back(all.data() + displs[r], size_t(counts[r]));
  return out;
}

void World::abort(int code) const {
  std::fflush(stdout);
  std::fflush(stderr);
  if (mpi_active_) MPI_Abort(MPI_COMM_WORLD, code == 0 ? 1 : code);
  std::_Exit(code == 0 ? 1 : code);  // MPI_Abort does not return; this keeps [[noreturn]] honest
}

std::function<void(int)> World::abort_hook() const {
  const int size = size_;
  return [size](int status) {
    if (size <= 1 || status == 0) return;
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, status);
  };
}

}  // namespace sinklab::parallel
