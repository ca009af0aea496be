// The training loop of sinklab-pretrain and sinklab-sft: data-parallel over MPI ranks (gradients
// all-reduced, optionally ZeRO-1 optimizer sharding), AdamW with warmup + constant/cosine schedule and
// clipping, HDF5 logging of every step with the stability monitor (train/monitor.hpp), evaluation +
// sink probe every --eval-every steps, atomic checkpoints, bit-exact --resume, and a clean stop on
// SIGTERM/SIGUSR1. Fine-tuning (cfg.sft) differs only in where it starts (the weights of --init-from,
// a fresh optimizer), its data (SftSampler: the assistant-only loss mask) and an evaluation at step 0
// (the base model's sink, before fine-tuning).
//
// The loss is the mean over the targets counted in the whole global batch: the sum of the per-token
// losses of every rank and micro-batch divided by their global count (every target in pre-training,
// the assistant tokens in SFT). The count is data, known before any backward pass, so each micro-batch's
// gradient is scaled by 1 / (global count) and the all-reduced sum is the gradient of that one mean:
// every assistant token weighs the same whatever the split over ranks and micro-batches (-np 2 equals
// -np 1), unlike a mean per micro-batch or per row, which would weigh a token by how many others share
// its row.
#pragma once

#include <string>

#include "parallel/mpi.hpp"
#include "train/train_config.hpp"

namespace sinklab::train {

// A GPU's dense bf16 peak in FLOP/s from its product name (cudaDeviceProp::name) by the vendor's data
// sheet (H100/H200 SXM 989.4 TFLOP/s, H100 NVL 835, H100 PCIe 756, A100 312), 0 for one not listed:
// MFU's denominator unless --peak-tflops gives it.
double gpu_dense_bf16_peak_flops(const std::string& gpu_name);

// Runs the configured training to the end (or to a requested stop). Returns the process exit status.
int run_training(const TrainConfig& cfg, parallel::World& world);

// The whole program of sinklab-pretrain (sft false) and sinklab-sft (true): MPI, the options, --dry-run,
// the training; an error ends the job with one line, printed once per job (training_main.cpp).
int training_main(const char* program, int argc, char** argv, bool sft);

}  // namespace sinklab::train
