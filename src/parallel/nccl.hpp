// NCCL data-parallel communicator over the MPI world (CUDA builds only; without CUDA this header
// declares nothing, so host code may include it unconditionally and test SINKLAB_HAVE_CUDA).
//
// Bootstrap: every rank selects its GPU (World::local_gpu, cudaSetDevice), rank 0 creates the ncclUniqueId and
// MPI-broadcasts it, then all ranks ncclCommInitRank(size, id, rank).
//
// Streams (the parallel::Communicator contract): collectives run on a communication stream of their own.
// Each start_* records an event on the compute stream and makes the communication stream wait for it,
// so a collective reads what the compute stream wrote before the call and runs beside what it computes
// after; wait_all makes the compute stream wait for the communication stream. The host never waits.
// reduce-scatter and all-gather over pieces of any size are grouped ncclReduce / ncclBroadcast calls,
// one per rank with a non-empty piece (ncclReduceScatter / ncclAllGather need equal pieces).
// Failures throw sinklab::Error naming the NCCL/CUDA call and its error string.
#pragma once

#if SINKLAB_HAVE_CUDA

#include <cstddef>

#include "parallel/comm.hpp"
#include "parallel/mpi.hpp"

struct CUstream_st;  // cudaStream_t is CUstream_st*
struct CUevent_st;   // cudaEvent_t is CUevent_st*
struct ncclComm;     // ncclComm_t is ncclComm*

namespace sinklab::parallel {

class NcclComm final : public Communicator {
 public:
  // Collective over `world`: every rank must construct it. device < 0 means world.local_gpu().
  // `compute_stream`: the stream the backend computes on (the CUDA backend's stream).
  NcclComm(const World& world, int device, CUstream_st* compute_stream);
  ~NcclComm() override;
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int device() const { return device_; }
  int rank() const override { return world_.rank(); }
  int size() const override { return world_.size(); }
  void start_allreduce_sum(float* data, int64_t n) override;
  void start_reduce_scatter_sum(float* data, const std::vector<int64_t>& offsets) override;
  void start_allgather(float* data, const std::vector<int64_t>& offsets) override;
  void wait_all() override;
  void allreduce_sum_host(double* data, size_t n) override { world_.allreduce_sum(data, n); }

 private:
  void follow_compute_stream();  // the communication stream waits for the compute stream's work so far
  const World& world_;
  ncclComm* comm_ = nullptr;
  int device_ = 0;
  CUstream_st* compute_ = nullptr;
  CUstream_st* comm_stream_ = nullptr;
  CUevent_st* compute_done_ = nullptr;
  CUevent_st* comm_done_ = nullptr;
};

}  // namespace sinklab::parallel

#endif  // SINKLAB_HAVE_CUDA
