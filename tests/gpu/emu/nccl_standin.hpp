// The NCCL stand-in of the CPU emulation (tests/gpu/emu; shadow header nccl.h): the calls sinklab makes
// (src/parallel/nccl.cu) with NCCL's documented semantics, carried out over MPI_COMM_WORLD between the emulated
// ranks' "device" buffers (host memory):
//   - counts are elements of the datatype; every buffer range [ptr, ptr + count) must lie inside one device
//     allocation of the calling rank;
//   - ncclAllReduce(send, recv, count, type, op): recv = op over the ranks' send (in place when send == recv);
//   - ncclReduce(..., root): only root's recv receives; ncclBroadcast(send, recv, count, type, root): every
//     rank's recv gets root's send;
//   - between ncclGroupStart and ncclGroupEnd the calls are queued and run, in order, at ncclGroupEnd
//     (every rank must make the same calls in the same order, as NCCL requires; the counts of one call must
//     agree across ranks: checked, a mismatch is an error here where NCCL would hang or corrupt);
//   - ncclCommInitRank(comm, nranks, id, rank): nranks and rank must be MPI's (or 1 and 0 without MPI).
// Sums are MPI's (MPI_SUM over MPI_FLOAT); NCCL's ring order differs in the last bits for > 2 ranks.
#pragma once

#include <cstddef>

#include "cuda_emu.hpp"

enum ncclResult_t {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
};
enum ncclDataType_t { ncclInt8 = 0, ncclInt32 = 2, ncclFloat16 = 6, ncclFloat32 = 7, ncclFloat64 = 8, ncclBfloat16 = 9 };
enum ncclRedOp_t { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3 };
struct ncclUniqueId {
  char internal[128];
};
struct ncclComm;
using ncclComm_t = ncclComm*;

ncclResult_t ncclGetUniqueId(ncclUniqueId* id);
ncclResult_t ncclGetVersion(int* version);  // the emulation says 22800 (2.28.0)
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error);
const char* ncclGetErrorString(ncclResult_t r);
ncclResult_t ncclGroupStart();
ncclResult_t ncclGroupEnd();
ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op, int root,
                        ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                           cudaStream_t stream);
