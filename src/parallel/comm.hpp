// The collectives of data-parallel training over flat f32 buffers, one interface for both backends:
// MpiComm on host buffers (the CPU backend) and NcclComm on device buffers (the CUDA backend,
// parallel/nccl.hpp). The bucketing, ordering and ZeRO-1 logic above it (train/grad_sync.hpp) is written
// once against this interface, so the 2-rank CPU tests exercise the code path the GPUs run.
//
// Every start_* call starts an operation and returns at once; its result may be read only after
// wait_all(), and its buffer must not be touched until then. Every rank starts the same operations in
// the same order, as with any collective.
//
// Pieces. reduce-scatter and all-gather split a buffer [0, n) into size() consecutive pieces: rank r owns
// [offsets[r], offsets[r+1]) (offsets has size()+1 entries, offsets[0] = 0, offsets[size()] = n, pieces
// may be empty). The pieces need not be equal: a ZeRO-1 shard boundary falls anywhere inside a bucket.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor.hpp"
#include "parallel/mpi.hpp"

namespace sinklab::parallel {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // data[0, n) becomes its sum over ranks, on every rank.
  virtual void start_allreduce_sum(float* data, int64_t n) = 0;
  // Each rank's own piece of data becomes that piece's sum over ranks; the rest of data keeps this rank's
  // values. The sum for a piece is formed the same way as by start_allreduce_sum where the library
  // guarantees it (two ranks: a + b either way).
  virtual void start_reduce_scatter_sum(float* data, const std::vector<int64_t>& offsets) = 0;
  // Every rank's piece of data is copied to every rank, in place.
  virtual void start_allgather(float* data, const std::vector<int64_t>& offsets) = 0;
  // Lets started operations advance while the caller computes: MPI advances non-blocking collectives
  // only inside MPI calls, so the trainer calls this between layers of backward. NCCL needs nothing.
  virtual void progress() {}
  // Completes every started operation. MPI: the results are in host memory when it returns. NCCL: work
  // enqueued next on the compute stream sees them (the stream waits for the communication stream's
  // event; the host does not wait).
  virtual void wait_all() = 0;
  // A blocking sum over ranks of a few host doubles (the gradient norm's pieces).
  virtual void allreduce_sum_host(double* data, size_t n) = 0;
};

// The pieces' offsets for `size` ranks from each rank's first element (begins[r], non-decreasing)
// inside [0, n): offsets[r] = clamp(begins[r], 0, n), offsets[size] = n.
std::vector<int64_t> piece_offsets(const std::vector<int64_t>& begins, int64_t n);

// MPI's non-blocking collectives (MPI_Iallreduce, MPI_Ireduce_scatter, MPI_Iallgatherv) on host buffers
// over the world; a job of one rank (no MPI) makes every operation the identity.
class MpiComm final : public Communicator {
 public:
  explicit MpiComm(const World& world);
  ~MpiComm() override;
  int rank() const override { return world_.rank(); }
  int size() const override { return world_.size(); }
  void start_allreduce_sum(float* data, int64_t n) override;
  void start_reduce_scatter_sum(float* data, const std::vector<int64_t>& offsets) override;
  void start_allgather(float* data, const std::vector<int64_t>& offsets) override;
  void progress() override;
  void wait_all() override;
  void allreduce_sum_host(double* data, size_t n) override;

 private:
  struct Pending;  // one started operation: its request and what must outlive it
  bool active() const { return world_.mpi_active() && world_.size() > 1; }
  const World& world_;
  std::vector<std::unique_ptr<Pending>> pending_;
};

// The data-parallel communicator of a job on `device`: MPI on host buffers on the CPU (and for a job of
// one rank, which needs no collective), NCCL on a GPU's buffers, ordered with the backend's
// `compute_stream` (Backend::compute_stream(); CUDA builds only, else refused naming --device).
std::unique_ptr<Communicator> make_communicator(const World& world, Device device, void* compute_stream);

}  // namespace sinklab::parallel
