// sinklab-pretrain: pre-trains a LLaMA-style model on token shards, logging loss and the attention-sink
// metric into HDF5 (see train/trainer.hpp). Run under mpirun/srun for data parallelism.
//   sinklab-pretrain --config jobs/pretrain/60m_default.ini [--flag=value ...]
//   sinklab-pretrain --config jobs/pretrain/60m_default.ini --describe   (what it builds and holds, as JSON)
#include <cstdio>

#include "core/error.hpp"
#include "dist/mpi.hpp"
#include "train/describe.hpp"
#include "train/train_config.hpp"
#include "train/trainer.hpp"

int main(int argc, char** argv) {
  auto world = sinklab::dist::World::init(argc, argv);
  return sinklab::run_main(
      "sinklab-pretrain",
      [&] {
        sinklab::train::TrainConfig cfg;
        if (!sinklab::train::parse_train_config(argc, argv, cfg, world.size())) return 0;
        if (cfg.dry_run) {
          if (world.rank() == 0) std::fputs(cfg.config_text.c_str(), stdout);
          return 0;
        }
        if (cfg.describe) {
          if (world.rank() == 0) std::fputs(sinklab::train::describe_json(cfg).c_str(), stdout);
          return 0;
        }
        return sinklab::train::run_training(cfg, world);
      },
      world.abort_hook());
}
