// The NCCL stand-in (nccl_standin.hpp): NCCL's documented semantics over MPI_COMM_WORLD.
#include "nccl_standin.hpp"

#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

struct ncclComm {
  int nranks = 1, rank = 0;
  bool mpi = false;
};

namespace {

int g_group_depth = 0;
std::vector<std::function<ncclResult_t()>> g_queued;

size_t type_bytes(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return 1;
    case ncclInt32: return 4;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclFloat32: return 4;
    case ncclFloat64: return 8;
  }
  return 0;
}

ncclResult_t fail(const char* fmt, const char* what, size_t a = 0, size_t b = 0) {
  std::fprintf(stderr, "nccl stand-in: ");
  std::fprintf(stderr, fmt, what, a, b);
  std::fprintf(stderr, "\n");
  return ncclInvalidArgument;
}

// The same call, with the same count, on every rank (what NCCL assumes and cannot check).
ncclResult_t agree(ncclComm* c, const char* what, size_t count, int root) {
  if (!c->mpi) return ncclSuccess;
  unsigned long long mine[2] = {count, (unsigned long long)(root + 1)}, lo[2], hi[2];
  MPI_Allreduce(mine, lo, 2, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(mine, hi, 2, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  if (lo[0] != hi[0]) return fail("%s: the ranks pass different counts (%zu .. %zu)", what, lo[0], hi[0]);
  if (lo[1] != hi[1]) return fail("%s: the ranks pass different roots", what);
  return ncclSuccess;
}

ncclResult_t check_args(ncclComm* c, const void* send, const void* recv, size_t count, ncclDataType_t type, int root,
                        bool recv_needed, const char* what) {
  if (!c) return fail("%s: no communicator", what);
  if (type != ncclFloat32) return fail("%s: the stand-in reduces float32 only", what);
  if (root < -1 || root >= c->nranks) return fail("%s: root %zu out of range", what, size_t(root));
  const size_t bytes = count * type_bytes(type);
  emu::require_device_range(send, bytes, what);
  if (recv_needed) emu::require_device_range(recv, bytes, what);
  return ncclSuccess;
}

ncclResult_t run_or_queue(std::function<ncclResult_t()> f) {
  emu::count_library_call();  // the step ledger's count (cuda_emu.hpp)
  if (emu::count_only()) return ncclSuccess;
  if (g_group_depth > 0) {
    g_queued.push_back(std::move(f));
    return ncclSuccess;
  }
  return f();
}

}  // namespace

ncclResult_t ncclGetVersion(int* version) {
  *version = 22800;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::memset(id, 0, sizeof *id);
  std::snprintf(id->internal, sizeof id->internal, "sinklab-emu-nccl");
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  if (std::strcmp(id.internal, "sinklab-emu-nccl") != 0) return fail("%s: the unique id did not come from rank 0", "ncclCommInitRank");
  int initialized = 0;
  MPI_Initialized(&initialized);
  int size = 1, me = 0;
  if (initialized) {
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
  }
  if (nranks != size || rank != me) return fail("%s: nranks/rank disagree with MPI's", "ncclCommInitRank");
  *comm = new ncclComm{nranks, rank, initialized != 0 && size > 1};
  return ncclSuccess;
}
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  delete comm;
  return ncclSuccess;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t* async_error) {
  *async_error = ncclSuccess;
  return ncclSuccess;
}
const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclInvalidArgument: return "invalid argument (NCCL stand-in)";
    case ncclInvalidUsage: return "invalid usage (NCCL stand-in)";
    default: return "NCCL stand-in error";
  }
}
ncclResult_t ncclGroupStart() {
  ++g_group_depth;
  return ncclSuccess;
}
ncclResult_t ncclGroupEnd() {
  if (g_group_depth == 0) return ncclInvalidUsage;
  if (--g_group_depth > 0) return ncclSuccess;
  std::vector<std::function<ncclResult_t()>> calls;
  calls.swap(g_queued);
  for (auto& f : calls) {
    const ncclResult_t r = f();
    if (r != ncclSuccess) return r;
  }
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t) {
  if (ncclResult_t r = check_args(comm, send, recv, count, type, -1, true, "ncclAllReduce")) return r;
  if (op != ncclSum) return fail("%s: the stand-in sums only", "ncclAllReduce");
  return run_or_queue([=] {
    if (ncclResult_t r = agree(comm, "ncclAllReduce", count, -1)) return r;
    if (send != recv) std::memcpy(recv, send, count * sizeof(float));
    if (comm->mpi) MPI_Allreduce(MPI_IN_PLACE, recv, int(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    return ncclSuccess;
  });
}

ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op, int root,
                        ncclComm_t comm, cudaStream_t) {
  const bool is_root = comm && comm->rank == root;
  if (ncclResult_t r = check_args(comm, send, recv, count, type, root, is_root, "ncclReduce")) return r;
  if (op != ncclSum) return fail("%s: the stand-in sums only", "ncclReduce");
  return run_or_queue([=] {
    if (ncclResult_t r = agree(comm, "ncclReduce", count, root)) return r;
    if (!comm->mpi) {
      if (send != recv) std::memcpy(recv, send, count * sizeof(float));
      return ncclSuccess;
    }
    if (is_root) {
      if (send != recv) std::memcpy(recv, send, count * sizeof(float));
      MPI_Reduce(MPI_IN_PLACE, recv, int(count), MPI_FLOAT, MPI_SUM, root, MPI_COMM_WORLD);
    } else {
      MPI_Reduce(send, nullptr, int(count), MPI_FLOAT, MPI_SUM, root, MPI_COMM_WORLD);
    }
    return ncclSuccess;
  });
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                           cudaStream_t) {
  const bool is_root = comm && comm->rank == root;
  // send is read on the root only; recv is written everywhere.
  if (ncclResult_t r = check_args(comm, is_root ? send : recv, recv, count, type, root, true, "ncclBroadcast")) return r;
  return run_or_queue([=] {
    if (ncclResult_t r = agree(comm, "ncclBroadcast", count, root)) return r;
    if (is_root && send != recv) std::memcpy(recv, send, count * sizeof(float));
    if (comm->mpi) MPI_Bcast(recv, int(count), MPI_FLOAT, root, MPI_COMM_WORLD);
    return ncclSuccess;
  });
}
