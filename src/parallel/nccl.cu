#include "parallel/nccl.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>

#include "core/error.hpp"

namespace sinklab::parallel {
namespace {

void cuda_check(cudaError_t e, const char* call) {
  if (e != cudaSuccess) SL_FAIL("%s failed: %s", call, cudaGetErrorString(e));
}
void nccl_check(ncclComm_t comm, ncclResult_t r, const char* call) {
  if (r == ncclSuccess) return;
  ncclResult_t async = ncclSuccess;
  if (comm) ncclCommGetAsyncError(comm, &async);
  if (async != ncclSuccess) SL_FAIL("%s failed: %s (asynchronous: %s)", call, ncclGetErrorString(r), ncclGetErrorString(async));
  SL_FAIL("%s failed: %s", call, ncclGetErrorString(r));
}

}  // namespace

NcclComm::NcclComm(const World& world, int device, CUstream_st* compute_stream)
    : world_(world), compute_(compute_stream) {
  int count = 0;
  cuda_check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  device_ = device >= 0 ? device : world.local_gpu(count);
  SL_CHECK(count > 0, "NCCL: no CUDA device on this node (rank %d)", world.rank());
  SL_CHECK(device_ < count, "NCCL: rank %d wants GPU %d but this node has %d (more ranks per node than GPUs?)",
           world.rank(), device_, count);
  cuda_check(cudaSetDevice(device_), "cudaSetDevice");
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (world.rank() == 0) nccl_check(nullptr, ncclGetUniqueId(&id), "ncclGetUniqueId");
  if (world.mpi_active()) MPI_Bcast(&id, int(sizeof id), MPI_BYTE, 0, world.comm());  // a job of one: no MPI
  ncclComm_t comm = nullptr;
  nccl_check(nullptr, ncclCommInitRank(&comm, world.size(), id, world.rank()), "ncclCommInitRank");
  comm_ = comm;
  cuda_check(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  cuda_check(cudaEventCreateWithFlags(&compute_done_, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  cuda_check(cudaEventCreateWithFlags(&comm_done_, cudaEventDisableTiming), "cudaEventCreateWithFlags");
}

NcclComm::~NcclComm() {
  if (comm_stream_) cudaStreamSynchronize(comm_stream_);
  if (comm_done_) cudaEventDestroy(comm_done_);
  if (compute_done_) cudaEventDestroy(compute_done_);
  if (comm_stream_) cudaStreamDestroy(comm_stream_);
  if (comm_) ncclCommDestroy(comm_);
}

void NcclComm::follow_compute_stream() {
  cuda_check(cudaEventRecord(compute_done_, compute_), "cudaEventRecord(compute)");
  cuda_check(cudaStreamWaitEvent(comm_stream_, compute_done_, 0), "cudaStreamWaitEvent(communication)");
}

void NcclComm::start_allreduce_sum(float* data, int64_t n) {
  if (n == 0) return;
  follow_compute_stream();
  nccl_check(comm_, ncclAllReduce(data, data, size_t(n), ncclFloat32, ncclSum, comm_, comm_stream_), "ncclAllReduce");
}

void NcclComm::start_reduce_scatter_sum(float* data, const std::vector<int64_t>& offsets) {
  SL_CHECK(offsets.size() == size_t(size()) + 1, "reduce-scatter: %zu piece offsets for %d ranks", offsets.size(), size());
  follow_compute_stream();
  nccl_check(comm_, ncclGroupStart(), "ncclGroupStart");
  for (int r = 0; r < size(); ++r) {
    const int64_t first = offsets[size_t(r)], count = offsets[size_t(r) + 1] - first;
    if (count > 0)  // in place: the root's buffer receives the sum, the others' stay as they were
      nccl_check(comm_, ncclReduce(data + first, data + first, size_t(count), ncclFloat32, ncclSum, r, comm_, comm_stream_),
                 "ncclReduce");
  }
  nccl_check(comm_, ncclGroupEnd(), "ncclGroupEnd(reduce-scatter)");
}

void NcclComm::start_allgather(float* data, const std::vector<int64_t>& offsets) {
  SL_CHECK(offsets.size() == size_t(size()) + 1, "all-gather: %zu piece offsets for %d ranks", offsets.size(), size());
  follow_compute_stream();
  nccl_check(comm_, ncclGroupStart(), "ncclGroupStart");
  for (int r = 0; r < size(); ++r) {
    const int64_t first = offsets[size_t(r)], count = offsets[size_t(r) + 1] - first;
    if (count > 0)
      nccl_check(comm_, ncclBroadcast(data + first, data + first, size_t(count), ncclFloat32, r, comm_, comm_stream_),
                 "ncclBroadcast");
  }
  nccl_check(comm_, ncclGroupEnd(), "ncclGroupEnd(all-gather)");
}

void NcclComm::wait_all() {
  cuda_check(cudaEventRecord(comm_done_, comm_stream_), "cudaEventRecord(communication)");
  cuda_check(cudaStreamWaitEvent(compute_, comm_done_, 0), "cudaStreamWaitEvent(compute)");
}

}  // namespace sinklab::parallel
