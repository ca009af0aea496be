#include "dist/mpi.hpp"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>

#include "core/error.hpp"
#include "core/log.hpp"

namespace sinklab::dist {
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

}  // namespace

World World::init(int& argc, char**& argv) {
  World w;
  int initialized = 0;
  MPI_Initialized(&initialized);
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

World::~World() {
  if (!owns_mpi_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void World::barrier() const { MPI_Barrier(MPI_COMM_WORLD); }

void World::allreduce_sum(float* data, size_t n) const { allreduce_chunks(data, n, MPI_FLOAT, MPI_SUM); }
void World::allreduce_sum(double* data, size_t n) const { allreduce_chunks(data, n, MPI_DOUBLE, MPI_SUM); }
void World::allreduce_sum(int64_t* data, size_t n) const { allreduce_chunks(data, n, MPI_INT64_T, MPI_SUM); }

double World::allreduce_sum(double value) const {
  allreduce_sum(&value, 1);
  return value;
}
int64_t World::allreduce_sum(int64_t value) const {
  allreduce_sum(&value, 1);
  return value;
}
double World::allreduce_max(double value) const {
  allreduce_chunks(&value, 1, MPI_DOUBLE, MPI_MAX);
  return value;
}

void World::broadcast(std::vector<uint8_t>& bytes, int root) const {
  SL_CHECK(root >= 0 && root < size_, "broadcast: root %d outside [0, %d)", root, size_);
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
  MPI_Abort(MPI_COMM_WORLD, code == 0 ? 1 : code);
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

}  // namespace sinklab::dist
