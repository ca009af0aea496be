// sinklab-sft: fine-tunes a sinklab checkpoint on data_prep's SFT data (assistant-only loss, packed
// conversations) with the pre-training loop (train/trainer.hpp), a fresh optimizer, the model of the
// checkpoint, and the stability monitor (train/monitor.hpp) written every step (paper App. D, Fig. 30).
// Run under mpirun/srun for data parallelism.
//   sinklab-sft --config jobs/sft/ultrachat_1b_softmax.ini [--flag=value ...]
#include <cstdio>

#include "core/error.hpp"
#include "dist/mpi.hpp"
#include "train/train_config.hpp"
#include "train/trainer.hpp"

int main(int argc, char** argv) {
  auto world = sinklab::dist::World::init(argc, argv);
  return sinklab::run_main(
      "sinklab-sft",
      [&] {
        sinklab::train::TrainConfig cfg;
        if (!sinklab::train::parse_train_config(argc, argv, cfg, world.size(), /*sft=*/true)) return 0;
        if (cfg.dry_run) {
          if (world.rank() == 0) std::fputs(cfg.config_text.c_str(), stdout);
          return 0;
        }
        return sinklab::train::run_training(cfg, world);
      },
      world.abort_hook());
}
