#include "probe/shared_options.hpp"

#include <boost/program_options.hpp>

#include "probe/sink_metrics.hpp"

namespace sinklab::probe {

namespace po = boost::program_options;

DeviceKind SharedOptions::device_kind() const { return parse_device_kind(device, "--device"); }

ops::AttnKernel SharedOptions::attention_kernel() const { return ops::parse_attn_kernel(attn_kernel); }

std::vector<double> SharedOptions::thresholds() const { return parse_sink_eps(sink_eps); }

po::options_description shared_options(SharedOptions& values) {
  po::options_description desc("options sinklab-pretrain, sinklab-sft, sinklab-survey and sinklab-probe share");
  desc.add_options()
      ("help", "print this help")
      ("config", po::value(&values.config_file), "ini file with any of these options (`name = value` lines); flags "
       "override it")
      ("device", po::value(&values.device)->default_value(kDefaultDevice),
       "cpu | cuda (under MPI rank r of a node takes the node's GPU r, a single process GPU 0; the sink "
       "measurements read the activations on the host)")
      ("attn-kernel", po::value(&values.attn_kernel)->default_value(kDefaultAttnKernel),
       "attention kernel: auto (cuDNN when the attention fits, then the flash kernel, then the GEMM path with bf16 "
       "tensors, then the reference) | cudnn | flash | gemm | reference; cudnn, flash and gemm compute in bf16, the "
       "reference in f32 (a GPU run, survey or probe that must match the CPU to f32 rounding asks for reference); "
       "on the CPU only auto and reference, both the CPU reference kernel")
      ("sink-eps", po::value(&values.sink_eps)->default_value(kDefaultSinkEps),
       "thresholds eps of Sink_k^eps, comma-separated");
  return desc;
}

}  // namespace sinklab::probe
