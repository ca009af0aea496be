// The step ledger (docs/DESIGN.md, "The step ledger"): while it is open (SINKLAB_LEDGER=<file>), every
// top-level ops:: call is written to the file as one JSON line: the op, the scope it ran in (the trainer
// and the model name theirs: "step/micro/forward/layer", ...), each tensor operand's dtype and shape,
// the bytes the call reads and writes, its matrix-product and attention FLOPs, whether it converts a
// dtype, and what the device did meanwhile (kernel launches with their thread counts, library calls,
// copies, host synchronisations, allocations), when a device counter is registered: the CUDA emulation
// (tests/gpu/emu) registers one; a real device build has none and writes "device": null. Under
// SINKLAB_PROFILE=1 each entry also has the op's measured wall time ("seconds"). What happened
// between two ops (the trainer's own copies, an allocation) is written as an entry of op "(host)".
// bench/step_model.py turns a ledger into a roofline model of the step for a named GPU.
//
// SINKLAB_LEDGER_LAST=<scope> ends the process when that outermost scope closes ("step1": after the
// second training step), the file complete. The ledger costs nothing when closed: ops.cpp asks active()
// (one load) per call.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.hpp"

namespace sinklab::ops {
struct AttentionSpec;
}

namespace sinklab::ledger {

// What a device did since the counter was last read.
struct DeviceEvents {
  int64_t launches = 0, library_calls = 0, copies = 0, host_syncs = 0, allocations = 0;
  struct Launch {
    std::string kernel;
    int64_t threads = 0;
  };
  std::vector<Launch> kernels;  // every launch, in order
};
// Returns the events since its previous call and forgets them.
using DeviceCounter = DeviceEvents (*)();
// Registers the device's counter (the emulation does, at start-up); null removes it.
void set_device_counter(DeviceCounter counter);

// True while a ledger file is open: opened at the first call when SINKLAB_LEDGER names a file.
bool active();

// Names the scope of the ops inside it ("step", "micro", "forward", ...), nested by "/". A scope may
// carry an index ("micro" 1 -> "micro1").
class Scope {
 public:
  explicit Scope(const char* name, int64_t index = -1);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  bool pushed_ = false;
};

// What an op call's arguments say beyond its tensors: its booleans (matmul's transposes) and its
// attention spec.
struct CallFacts {
  std::vector<Tensor> tensors;  // the tensor operands in argument order (undefined ones included)
  std::vector<bool> flags;      // the bool arguments in order
  const ops::AttentionSpec* attention = nullptr;
};

// The depth guard and writer of ops.cpp's entry points: records the call when it is a top-level one
// (an op that calls other ops records only itself).
class OpCall {
 public:
  OpCall(const char* op, const CallFacts& facts);
  ~OpCall();
  OpCall(const OpCall&) = delete;
  OpCall& operator=(const OpCall&) = delete;

 private:
  const char* op_ = nullptr;
  const CallFacts* facts_ = nullptr;
  bool top_ = false;
};

// The wall time of the op call being recorded (SINKLAB_PROFILE=1 times every op, each synchronised): its
// entry gets "seconds", what bench/step_model.py --compare sets beside the model on a real GPU.
void note_seconds(double seconds);

// Matrix-product and attention FLOPs of one call (2 per multiply-add; attention: QK^T and PV, and their
// backward's four products, each over the keys the mask lets a query see), 0 for other ops.
double op_flops(const std::string& op, const CallFacts& facts);
// Bytes a call moves: every defined tensor operand once (read or written; an accumulated output once).
double op_bytes(const CallFacts& facts);

}  // namespace sinklab::ledger
