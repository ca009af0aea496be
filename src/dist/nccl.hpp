// NCCL data-parallel communicator over the MPI world (CUDA builds only; without CUDA this header
// declares nothing, so host code may include it unconditionally and test SINKLAB_HAVE_CUDA).
//
// Bootstrap: every rank selects GPU local_rank (cudaSetDevice), rank 0 creates the ncclUniqueId and
// MPI-broadcasts it, then all ranks ncclCommInitRank(size, id, rank). Collectives are enqueued on the
// caller's stream and return at once (stream-ordered), like every op of the CUDA backend.
// Failures throw sinklab::Error naming the NCCL/CUDA call and its error string.
#pragma once

#if SINKLAB_HAVE_CUDA

#include <cstddef>

#include "dist/mpi.hpp"

struct CUstream_st;      // cudaStream_t is CUstream_st*
struct ncclComm;         // ncclComm_t is ncclComm*

namespace sinklab::dist {

class NcclComm {
 public:
  // Collective over `world`: every rank must construct it. device < 0 means world.local_rank().
  explicit NcclComm(const World& world, int device = -1);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int device() const { return device_; }
  int rank() const { return rank_; }
  int size() const { return size_; }

  // In-place all-reduce of n f32 values in device memory on `stream` (nullptr = legacy default stream).
  void allreduce_sum(float* data, size_t n, CUstream_st* stream);
  // In-place average over ranks (ncclAvg): the data-parallel gradient reduction.
  void allreduce_mean(float* data, size_t n, CUstream_st* stream);
  // Blocks until `stream` has finished (surfacing asynchronous NCCL errors as sinklab::Error).
  void synchronize(CUstream_st* stream);

 private:
  ncclComm* comm_ = nullptr;
  int device_ = 0, rank_ = 0, size_ = 1;
};

}  // namespace sinklab::dist

#endif  // SINKLAB_HAVE_CUDA
