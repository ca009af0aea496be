// sinklab-gpuinfo: the device probe. Prints what a GPU is (name, compute capability, memory, driver and
// runtime, cuBLASLt / cuDNN / NCCL versions) and what it measures through sinklab's own op API: a bf16
// GEMM's TFLOP/s at n^3 (default 8192^3: MFU's realistic ceiling on this device) and a device-to-device
// copy's bandwidth (HBM). A CUDA training run stores the same facts and its GEMM figure beside its MFU.
//   sinklab-gpuinfo [--device-index N] [--gemm-size 8192] [--copy-mib 1024] [--reps 5] [--no-measure]
#include <cstdio>

#include "backend/device_probe.hpp"
#include "core/error.hpp"
#include "core/options.hpp"

using namespace sinklab;
namespace po = boost::program_options;

int main(int argc, char** argv) {
  return run_main("sinklab-gpuinfo", [&] {
    int index = 0, reps = 5;
    int64_t gemm_size = 8192, copy_mib = 1024;
    bool no_measure = false;
    po::options_description desc("sinklab-gpuinfo options");
    desc.add_options()
        ("help", "print the options")
        ("device-index", po::value(&index)->default_value(0), "the CUDA device to describe")
        ("gemm-size", po::value(&gemm_size)->default_value(8192), "n of the measured bf16 GEMM (n x n times n x n)")
        ("copy-mib", po::value(&copy_mib)->default_value(1024), "MiB of the measured device copy")
        ("reps", po::value(&reps)->default_value(5), "timed repetitions of each measurement (the median is printed)")
        ("no-measure", po::bool_switch(&no_measure), "print the facts only, measure nothing");
    po::variables_map vm;
    if (!parse_options(argc, argv, desc, vm)) return 0;
    SL_CHECK(gemm_size >= 1 && copy_mib >= 1 && reps >= 1, "--gemm-size, --copy-mib and --reps must be positive");
    const DeviceFacts facts = cuda_device_facts(index);  // throws one line without a usable device
    std::fputs(device_facts_text(facts).c_str(), stdout);
    if (no_measure) return 0;
    const Device device = Device::cuda(index);
    std::printf("bf16 GEMM %lld^3: %.1f TFLOP/s (median of %d)\n", (long long)gemm_size,
                measure_gemm_tflops(device, DType::bf16, gemm_size, reps), reps);
    std::printf("device copy of %lld MiB: %.0f GB/s read + write (median of %d)\n", (long long)copy_mib,
                measure_copy_gbps(device, copy_mib << 20, reps), reps);
    return 0;
  });
}
