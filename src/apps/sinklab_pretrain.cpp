// sinklab-pretrain: pre-trains a LLaMA-style model on token shards, logging loss and the attention-sink
// metric into HDF5 (see train/trainer.hpp). Run under mpirun/srun for data parallelism.
//   sinklab-pretrain --config jobs/pretrain/60m_default.ini [--flag=value ...]
//   sinklab-pretrain --config jobs/pretrain/60m_default.ini --describe   (what it builds and holds, as JSON)
#include "train/trainer.hpp"

int main(int argc, char** argv) { return sinklab::train::training_main("sinklab-pretrain", argc, argv, /*sft=*/false); }
