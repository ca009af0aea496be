#include <chrono>
#include <cstdio>
#include <exception>
#include <thread>

#include "core/error.hpp"
#include "parallel/mpi.hpp"
#include "train/describe.hpp"
#include "train/train_config.hpp"
#include "train/trainer.hpp"

namespace sinklab::train {

namespace {

// Under MPI every rank meets most errors (a bad flag, a missing file, a refused --out-dir) at the same
// point. Rank 0 reports at once and its abort (World::abort_hook) ends the job while the other ranks wait
// here, so the job prints the line once; an error of another rank alone is reported after the wait.
void let_rank0_report_first(const parallel::World& world) {
  if (world.size() > 1 && world.rank() != 0) std::this_thread::sleep_for(std::chrono::seconds(5));
}

}  // namespace

int training_main(const char* program, int argc, char** argv, bool sft) {
  auto world = parallel::World::init(argc, argv);
  return run_main(
      program,
      [&] {
        try {
          TrainConfig cfg;
          if (!parse_train_config(argc, argv, cfg, world.size(), sft)) return 0;
          if (cfg.dry_run) {
            if (world.rank() == 0) std::fputs(cfg.config_text.c_str(), stdout);
            return 0;
          }
          if (cfg.describe) {  // what the run builds and holds, as JSON (analysis.plan reads it)
            if (world.rank() == 0) std::fputs(describe_json(cfg).c_str(), stdout);
            return 0;
          }
          return run_training(cfg, world);
        } catch (const std::exception&) {
          let_rank0_report_first(world);
          throw;
        }
      },
      world.abort_hook());
}

}  // namespace sinklab::train
