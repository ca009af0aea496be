// The MPI world of a sinklab job: start-up/shut-down, rank facts and the few host collectives the
// binaries need. A process that no launcher started (no mpirun/srun variables) runs as rank 0 of 1
// without initialising MPI at all; its collectives are the identity (SINKLAB_MPI=1/0 overrides).
//
//   int main(int argc, char** argv) {
//     auto world = sinklab::parallel::World::init(argc, argv);
//     return sinklab::run_main("sinklab-x", [&] { ...; return 0; }, world.abort_hook());
//   }
//
// Collectives are blocking and over MPI_COMM_WORLD; every rank must call them in the same order.
// Errors from MPI are fatal (MPI's default handler), so these calls do not throw on MPI failure.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace sinklab::parallel {

class World {
 public:
  // MPI_Init_thread(MPI_THREAD_FUNNELED) when a launcher started the process (unless MPI is already
  // initialised: then this World neither initialises nor finalises it), rank facts, and
  // log::set_rank(rank, size). Without a launcher: rank 0 of 1, no MPI.
  // mpi_active() says which; comm() may be used only when it is true.
  static World init(int& argc, char**& argv);
  // Finalises MPI when this World initialised it (after a barrier-free MPI_Finalize).
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;
  World(World&& o) noexcept
      : owns_mpi_(o.owns_mpi_), mpi_active_(o.mpi_active_), rank_(o.rank_), size_(o.size_), local_rank_(o.local_rank_), local_size_(o.local_size_) {
    o.owns_mpi_ = false;
  }
  World& operator=(World&&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool is_root() const { return rank_ == 0; }
  bool mpi_active() const { return mpi_active_; }
  // Rank among the processes of this node (MPI_Comm_split_type SHARED; falls back to
  // OMPI_COMM_WORLD_LOCAL_RANK / SLURM_LOCALID) and the number of them: the GPU index of this rank.
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  // The GPU this rank drives among the `visible` ones: its local rank when the node's ranks all see
  // every GPU (mpirun, srun --gpu-bind=none), GPU 0 when each rank sees one of its own (srun
  // --gpus-per-task=1 with binding, CUDA_VISIBLE_DEVICES per rank). Fails with one line naming the
  // counts when neither holds (more ranks on the node than GPUs). visible = 0: local_rank (the CUDA
  // backend then reports that there is no device).
  static int gpu_for(int local_rank, int local_size, int visible);
  int local_gpu(int visible) const { return gpu_for(local_rank_, local_size_, visible); }
  MPI_Comm comm() const { return MPI_COMM_WORLD; }

  void barrier() const;

  // In-place sums over all ranks (every rank gets the result). Buffers of any length (split into
  // MPI-int-sized pieces).
  void allreduce_sum(float* data, size_t n) const;
  void allreduce_sum(double* data, size_t n) const;
  void allreduce_sum(int64_t* data, size_t n) const;
  double allreduce_sum(double value) const;
  int64_t allreduce_sum(int64_t value) const;
  // In-place maxima over all ranks; a NaN on any rank makes that element NaN on every rank (MPI's max
  // of a NaN depends on the order the ranks are combined in, so NaNs travel as flags beside the values).
  void allreduce_max(double* data, size_t n) const;
  double allreduce_max(double value) const;

  // root's bytes/string replace everyone's (sizes need not be known in advance).
  void broadcast(std::vector<uint8_t>& bytes, int root = 0) const;
  void broadcast(std::string& text, int root = 0) const;

  // Variable-length blobs from every rank, in rank order, on root (empty vector on other ranks).
  std::vector<std::string> gather(const std::string& blob, int root = 0) const;

  // Ends the whole job now (MPI_Abort) with exit status `code`.
  [[noreturn]] void abort(int code) const;
  // For sinklab::run_main: in a multi-rank job one rank's error aborts every rank (the error line is
  // already printed); a single-process run just returns its status.
  std::function<void(int)> abort_hook() const;

 private:
  World() = default;
  bool owns_mpi_ = false;
  bool mpi_active_ = false;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
};

}  // namespace sinklab::parallel
