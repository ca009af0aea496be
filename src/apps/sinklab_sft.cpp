// sinklab-sft: fine-tunes a sinklab checkpoint on data_prep's SFT data (assistant-only loss, packed
// conversations) with the pre-training loop (train/trainer.hpp), a fresh optimizer, the model of the
// checkpoint, and the stability monitor (train/monitor.hpp) written every step (paper App. D, Fig. 30).
// Run under mpirun/srun for data parallelism.
//   sinklab-sft --config jobs/sft/ultrachat_1b_softmax.ini [--flag=value ...]
#include "train/trainer.hpp"

int main(int argc, char** argv) { return sinklab::train::training_main("sinklab-sft", argc, argv, /*sft=*/true); }
