#include "dist/nccl.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>

#include "core/error.hpp"

namespace sinklab::dist {
namespace {

void cuda_check(cudaError_t e, const char* call) {
  if (e != cudaSuccess) SL_FAIL("%s failed: %s", call, cudaGetErrorString(e));
}
void nccl_check(ncclResult_t r, const char* call) {
  if (r != ncclSuccess) SL_FAIL("%s failed: %s", call, ncclGetErrorString(r));
}

}  // namespace

NcclComm::NcclComm(const World& world, int device) : rank_(world.rank()), size_(world.size()) {
  int count = 0;
  cuda_check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  device_ = device >= 0 ? device : world.local_rank();
  SL_CHECK(count > 0, "NCCL: no CUDA device on this node (rank %d)", rank_);
  SL_CHECK(device_ < count, "NCCL: rank %d wants GPU %d but this node has %d (more ranks per node than GPUs?)",
           rank_, device_, count);
  cuda_check(cudaSetDevice(device_), "cudaSetDevice");
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (world.rank() == 0) nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  if (world.mpi_active()) MPI_Bcast(&id, int(sizeof id), MPI_BYTE, 0, world.comm());  // a job of one: no MPI
  ncclComm_t comm = nullptr;
  nccl_check(ncclCommInitRank(&comm, size_, id, rank_), "ncclCommInitRank");
  comm_ = comm;
}

NcclComm::~NcclComm() {
  if (comm_) ncclCommDestroy(comm_);
}

void NcclComm::allreduce_sum(float* data, size_t n, CUstream_st* stream) {
  if (n == 0) return;
  nccl_check(ncclAllReduce(data, data, n, ncclFloat32, ncclSum, comm_, stream), "ncclAllReduce(sum)");
}

void NcclComm::allreduce_mean(float* data, size_t n, CUstream_st* stream) {
  if (n == 0) return;
  nccl_check(ncclAllReduce(data, data, n, ncclFloat32, ncclAvg, comm_, stream), "ncclAllReduce(avg)");
}

void NcclComm::synchronize(CUstream_st* stream) {
  cudaError_t e = cudaStreamSynchronize(stream);
  if (e != cudaSuccess) {
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm_, &async);
    if (async != ncclSuccess) SL_FAIL("NCCL asynchronous error: %s", ncclGetErrorString(async));
    cuda_check(e, "cudaStreamSynchronize");
  }
}

}  // namespace sinklab::dist
