// Which kernel set the CPU BLAS runs, and sinklab's correction of a wrong choice.
//
// OpenBLAS (a DYNAMIC_ARCH build such as Debian's) picks its kernels once, when the library loads, from
// the CPU's family/model numbers. A model newer than the library (Debian 12's 0.3.21 on a 2023 Xeon,
// CPUID family 6 model 207) gets the SSE3 "Prescott" kernels: a third of the speed. Every sinklab program
// therefore checks the choice before main() and, when a pre-AVX2 kernel set runs on a CPU with AVX2 or
// AVX-512, re-executes itself (same PID, so mpirun and srun keep their bookkeeping) with
// OPENBLAS_CORETYPE naming the kernel set OpenBLAS itself would pick for that instruction set.
// Kernel sets of AVX2 level or above are never changed, forced or not: the identity tests force the AVX2
// kernels (OPENBLAS_CORETYPE=Haswell) on AVX-512 machines. SINKLAB_KEEP_BLAS_KERNELS (set to anything)
// keeps OpenBLAS's choice, only to measure what the correction is worth. The measurements: bench/README.md, "Which
// kernels".
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace sinklab::cpu {

// The widest x86 vector instruction set usable here (CPUID and the OS's saved register state).
enum class VectorIsa { sse, avx, avx2, avx512 };
const char* vector_isa_name(VectorIsa isa);  // "SSE", "AVX", "AVX2", "AVX-512"

struct CpuVectorFeatures {
  VectorIsa isa = VectorIsa::sse;
  bool avx512_bf16 = false;
};
CpuVectorFeatures cpu_vector_features();

// The instruction set of an OpenBLAS kernel set by its core name (openblas_get_corename(), any case);
// nullopt for a name not in OpenBLAS 0.3.21's list of pre-AVX2 sets and AVX2 / AVX-512 sets.
std::optional<VectorIsa> openblas_core_isa(std::string_view core_name);

// The OPENBLAS_CORETYPE to re-execute with, or "" when the kernel set in use stays: only a known pre-AVX2
// set on a CPU with AVX2 or AVX-512 is replaced (by Haswell, SkylakeX, or Cooperlake when the CPU has
// AVX512_BF16, as OpenBLAS's own choice for the newest CPUs it knows).
std::string openblas_core_to_force(std::string_view core_in_use, const CpuVectorFeatures& cpu);

// What the start-up check did, for the log line: "" when OpenBLAS's own choice stands, else e.g.
// "sinklab chose them: OpenBLAS had picked Prescott (SSE) on this AVX-512 CPU".
const std::string& blas_kernel_choice_note();

}  // namespace sinklab::cpu
