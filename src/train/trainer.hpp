// The pre-training loop of sinklab-pretrain: data-parallel over MPI ranks (gradients all-reduced,
// optionally ZeRO-1 optimizer sharding), AdamW with warmup + constant/cosine schedule and clipping,
// HDF5 logging of every step, evaluation + sink probe every --eval-every steps, atomic checkpoints,
// bit-exact --resume, and a clean stop on SIGTERM/SIGUSR1.
#pragma once

#include "dist/mpi.hpp"
#include "train/train_config.hpp"

namespace sinklab::train {

// Runs the configured training to the end (or to a requested stop). Returns the process exit status.
int run_pretraining(const TrainConfig& cfg, dist::World& world);

}  // namespace sinklab::train
