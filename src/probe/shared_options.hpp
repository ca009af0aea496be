// The options that sinklab-pretrain, sinklab-sft, sinklab-survey and sinklab-probe share, declared once
// with one default and one help text each: --help, --config, --device, --attn-kernel, --sink-eps. Each of
// those binaries adds this set to its own options (`desc.add(shared_options(values))`), and its --help
// prints it as one section.
//
// --attn-kernel's one default is auto. On the CPU auto is the reference kernel for every call (the CPU
// backend has no other, backend/attention_dispatch.hpp), so the survey and the probe, whose default was
// reference, measure what they measured. On a GPU auto takes cuDNN, the flash kernel or the GEMM path
// where they fit (bf16 inside); a GPU survey or probe that must match the CPU to f32 rounding asks for
// --attn-kernel reference (docs/DESIGN.md, "Probes on a GPU").
//
// Not shared, although the names match: --seed (the trainer's draws the weights and the data order, the
// survey's and the probe's the random and repeated inputs) and --dry-run (each binary prints its own).
#pragma once

#include <string>
#include <vector>

#include "backend/attention_dispatch.hpp"
#include "core/tensor.hpp"

namespace boost::program_options {
class options_description;
}

namespace sinklab::probe {

// The one defaults.
inline constexpr const char* kDefaultDevice = "cpu";
inline constexpr const char* kDefaultAttnKernel = "auto";
inline constexpr const char* kDefaultSinkEps = "0.2,0.3,0.4";

// The shared options as given (text), and their parsed values: each parse throws one line naming its flag.
struct SharedOptions {
  std::string config_file, device = kDefaultDevice, attn_kernel = kDefaultAttnKernel, sink_eps = kDefaultSinkEps;

  DeviceKind device_kind() const;            // --device
  ops::AttnKernel attention_kernel() const;  // --attn-kernel
  std::vector<double> thresholds() const;    // --sink-eps
};

// The set, bound to `values`, as one section of a binary's options.
boost::program_options::options_description shared_options(SharedOptions& values);

}  // namespace sinklab::probe
