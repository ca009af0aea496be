// Graceful stop for batch jobs: SIGTERM (Slurm's preemption/time-limit signal) and SIGUSR1 (sbatch
// --signal=USR1@<sec>, which signals the job steps; a "B:" prefix would signal only the batch shell) only
// set a flag; the training loop polls stop_requested() between steps, finishes the step, writes a
// checkpoint, flushes its outputs and exits 0 so Slurm can requeue.
// In a data-parallel job the loop must agree on stopping across ranks (an all-reduce of the flag), since
// the signal may reach the ranks at different steps.
#pragma once

namespace sinklab::train {

// Installs the handlers for SIGTERM and SIGUSR1 (idempotent). A second SIGTERM after the first still
// only sets the flag: the job ends at the next step boundary.
void install_stop_handlers();
// True once a handled signal arrived (or request_stop was called). Async-signal-safe to read.
bool stop_requested();
// The signal number that requested the stop (0 if none, -1 for request_stop()).
int stop_signal();
// For tests and for a loop that decides to stop on its own (e.g. a wall-clock budget).
void request_stop();
void clear_stop_request();

}  // namespace sinklab::train
