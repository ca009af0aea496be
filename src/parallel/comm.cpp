#include "parallel/comm.hpp"

#include <algorithm>
#include <climits>
#include <cstring>

#include "core/error.hpp"
#include "parallel/nccl.hpp"  // declares NcclComm in CUDA builds only

namespace sinklab::parallel {

std::vector<int64_t> piece_offsets(const std::vector<int64_t>& begins, int64_t n) {
  std::vector<int64_t> offsets(begins.size() + 1, n);
  for (size_t r = 0; r < begins.size(); ++r) {
    offsets[r] = std::clamp<int64_t>(begins[r], 0, n);
    SL_CHECK(r == 0 || offsets[r] >= offsets[r - 1], "piece_offsets: rank %zu begins before rank %zu", r, r - 1);
  }
  offsets[0] = 0;
  return offsets;
}

namespace {

// MPI counts are ints: a bucket or a flat buffer past 2^31 - 1 elements would need splitting, which
// sinklab's models (at most a few billion parameters per bucket-free all-gather) do not reach.
int mpi_count(int64_t n, const char* what) {
  SL_CHECK(n >= 0 && n <= INT_MAX, "%s of %lld elements exceeds MPI's int count", what, (long long)n);
  return int(n);
}

void check_offsets(const std::vector<int64_t>& offsets, int size, const char* what) {
  SL_CHECK(offsets.size() == size_t(size) + 1 && offsets.front() == 0, "%s: %zu piece offsets for %d ranks", what,
           offsets.size(), size);
  for (size_t r = 1; r < offsets.size(); ++r)
    SL_CHECK(offsets[r] >= offsets[r - 1], "%s: piece %zu ends before it begins", what, r - 1);
}

}  // namespace

// A started operation: the request, the count arrays MPI reads until it completes, and for a
// reduce-scatter the received piece, copied into place when it completes.
struct MpiComm::Pending {
  MPI_Request request = MPI_REQUEST_NULL;
  std::vector<int> counts, displs;
  std::vector<float> received;
  float* destination = nullptr;  // where `received` goes
};

MpiComm::MpiComm(const World& world) : world_(world) {}

MpiComm::~MpiComm() {
  // An error unwound past a started operation: complete it so MPI does not write into freed memory.
  for (auto& p : pending_)
    if (p->request != MPI_REQUEST_NULL) MPI_Wait(&p->request, MPI_STATUS_IGNORE);
}

void MpiComm::start_allreduce_sum(float* data, int64_t n) {
  if (!active() || n == 0) return;
  auto p = std::make_unique<Pending>();
  MPI_Iallreduce(MPI_IN_PLACE, data, mpi_count(n, "an all-reduce"), MPI_FLOAT, MPI_SUM, world_.comm(), &p->request);
  pending_.push_back(std::move(p));
}

void MpiComm::start_reduce_scatter_sum(float* data, const std::vector<int64_t>& offsets) {
  check_offsets(offsets, size(), "reduce-scatter");
  if (!active() || offsets.back() == 0) return;
  mpi_count(offsets.back(), "a reduce-scatter");
  auto p = std::make_unique<Pending>();
  for (int r = 0; r < size(); ++r) p->counts.push_back(int(offsets[size_t(r) + 1] - offsets[size_t(r)]));
  p->received.resize(size_t(std::max(p->counts[size_t(rank())], 1)));
  p->destination = data + offsets[size_t(rank())];
  MPI_Ireduce_scatter(data, p->received.data(), p->counts.data(), MPI_FLOAT, MPI_SUM, world_.comm(), &p->request);
  pending_.push_back(std::move(p));
}

void MpiComm::start_allgather(float* data, const std::vector<int64_t>& offsets) {
  check_offsets(offsets, size(), "all-gather");
  if (!active() || offsets.back() == 0) return;
  mpi_count(offsets.back(), "an all-gather");
  auto p = std::make_unique<Pending>();
  for (int r = 0; r < size(); ++r) {
    p->displs.push_back(int(offsets[size_t(r)]));
    p->counts.push_back(int(offsets[size_t(r) + 1] - offsets[size_t(r)]));
  }
  MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, p->counts.data(), p->displs.data(), MPI_FLOAT,
                  world_.comm(), &p->request);
  pending_.push_back(std::move(p));
}

void MpiComm::progress() {
  for (auto& p : pending_) {
    if (p->request == MPI_REQUEST_NULL) continue;
    int done = 0;
    MPI_Test(&p->request, &done, MPI_STATUS_IGNORE);
    if (!done) break;  // one MPI_Test runs the progress engine for every outstanding operation
  }
}

void MpiComm::wait_all() {
  for (auto& p : pending_) {
    if (p->request != MPI_REQUEST_NULL) MPI_Wait(&p->request, MPI_STATUS_IGNORE);
    if (p->destination) std::memcpy(p->destination, p->received.data(), sizeof(float) * size_t(p->counts[size_t(rank())]));
  }
  pending_.clear();
}

void MpiComm::allreduce_sum_host(double* data, size_t n) { world_.allreduce_sum(data, n); }

std::unique_ptr<Communicator> make_communicator(const World& world, Device device, void* compute_stream) {
  if (device.is_cpu() || world.size() == 1) return std::make_unique<MpiComm>(world);
#if SINKLAB_HAVE_CUDA
  return std::make_unique<NcclComm>(world, device.index, static_cast<CUstream_st*>(compute_stream));
#else
  (void)compute_stream;
  SL_FAIL("--device cuda: this sinklab was built without CUDA");
#endif
}

}  // namespace sinklab::parallel
