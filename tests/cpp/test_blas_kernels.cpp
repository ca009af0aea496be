// The BLAS kernel set in use. Every CPU test also runs with OPENBLAS_CORETYPE=Haswell (the ".blas_haswell"
// copies of tests/cpp/CMakeLists.txt): OpenBLAS picks its kernels per CPU at run time, and the AVX2
// kernels give other last bits than the AVX-512 ones for the same GEMM (and, for different GEMM shapes
// or thread partitions, other bits than each other). An AVX-512 machine thereby runs every bit-identity
// claim on the AVX2 kernels too. ForcedCoreTypeIsInEffect fails when the forced kernel set is not the one
// in use, so the copies can never pass by silently running the native kernels.
//
// The start-up check of cpu/blas_kernels.hpp: this file also runs as "test_blas_kernels.prescott"
// (OPENBLAS_CORETYPE=Prescott, the SSE3 kernels OpenBLAS 0.3.21 falls back to on CPUs it does not know,
// and SINKLAB_TEST_STARTED_PRE_AVX2=1) and under mpiexec -np 2 with the same variables:
// NoPreAvx2KernelsOnAnAvx2Cpu then proves that the program re-executed itself onto the CPU's own kernel
// set, also as an MPI rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>

#include "backend/backend.hpp"
#include "backend/cpu/blas_kernels.hpp"
#include "core/error.hpp"

namespace sinklab {
namespace {

using cpu::CpuVectorFeatures;
using cpu::VectorIsa;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

// "OpenBLAS 0.3.21 (Haswell kernels, 2 threads)" -> "Haswell"; "" for another BLAS.
std::string core_in_use() {
  const std::string description = cpu_blas_description();
  if (description.rfind("OpenBLAS", 0) != 0) return "";
  const size_t open = description.find('(') + 1;
  return description.substr(open, description.find(" kernels") - open);
}

TEST(BlasKernels, DescriptionNamesTheKernelsInUse) {
  const std::string description = cpu_blas_description();
  std::printf("  %s\n  summary: %s\n", description.c_str(), cpu_blas_summary().c_str());
  EXPECT_NE(description.find("threads"), std::string::npos) << description;
  EXPECT_EQ(cpu_blas_summary().rfind(description, 0), 0u) << cpu_blas_summary();
}

TEST(BlasKernels, ForcedCoreTypeIsInEffect) {
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  if (!forced || !*forced) GTEST_SKIP() << "OPENBLAS_CORETYPE not set (the .blas_haswell copy checks it)";
  if (core_in_use().empty()) GTEST_SKIP() << "not OpenBLAS: " << cpu_blas_description();
  // (When the start-up check replaced a forced pre-AVX2 set, it set OPENBLAS_CORETYPE to its choice.)
  EXPECT_EQ(lower(core_in_use()), lower(forced)) << "OPENBLAS_CORETYPE=" << forced << " is not in effect: "
                                                 << cpu_blas_description();
}

// The f32 GEMM is oneDNN's (SINKLAB_SGEMM=onednn): the .blas_haswell copies also set
// ONEDNN_MAX_CPU_ISA=AVX2, and its description must then name AVX2, so an AVX-512 machine runs the
// bit-identity claims on oneDNN's AVX2 kernels as well.
TEST(BlasKernels, OneDnnIsaLimitIsInEffect) {
  const std::string description = cpu_blas_description();
  if (description.find("f32 GEMM oneDNN") == std::string::npos) GTEST_SKIP() << "f32 GEMM not oneDNN: " << description;
  const char* limit = std::getenv("ONEDNN_MAX_CPU_ISA");
  if (!limit || !*limit) GTEST_SKIP() << "ONEDNN_MAX_CPU_ISA not set (the .blas_haswell copy checks it)";
  EXPECT_NE(description.find(strfmt("(%s)", limit)), std::string::npos)
      << "ONEDNN_MAX_CPU_ISA=" << limit << " is not in effect: " << description;
}

// The acceptance check of the kernel choice: on a CPU with AVX2 or AVX-512, the BLAS never multiplies
// with a pre-AVX2 kernel set, whatever OpenBLAS picked or OPENBLAS_CORETYPE said.
TEST(BlasKernels, NoPreAvx2KernelsOnAnAvx2Cpu) {
  const std::string core = core_in_use();
  if (core.empty()) GTEST_SKIP() << "not OpenBLAS: " << cpu_blas_description();
  const CpuVectorFeatures cpu = cpu::cpu_vector_features();
  std::printf("  CPU: %s; kernels: %s; %s\n", cpu::vector_isa_name(cpu.isa), core.c_str(), cpu_blas_summary().c_str());
  if (cpu.isa < VectorIsa::avx2) GTEST_SKIP() << "this CPU has no AVX2";
  if (std::getenv("SINKLAB_KEEP_BLAS_KERNELS")) GTEST_SKIP() << "SINKLAB_KEEP_BLAS_KERNELS: OpenBLAS's choice kept";
  const auto isa = cpu::openblas_core_isa(core);
  ASSERT_TRUE(isa.has_value()) << "kernel set '" << core << "' is not in the known list";
  EXPECT_GE(*isa, VectorIsa::avx2) << "pre-AVX2 kernels (" << core << ") on a " << cpu::vector_isa_name(cpu.isa)
                                   << " CPU: " << cpu_blas_summary();
  if (std::getenv("SINKLAB_TEST_STARTED_PRE_AVX2")) {  // the .prescott copies: the check re-executed us
    EXPECT_NE(cpu::blas_kernel_choice_note().find("sinklab chose them"), std::string::npos) << cpu_blas_summary();
    EXPECT_EQ(cpu::blas_kernel_choice_note().find("did not take effect"), std::string::npos) << cpu_blas_summary();
  }
}

// SINKLAB_KEEP_BLAS_KERNELS keeps OpenBLAS's choice (the .prescott_kept copy: to measure it) and says so.
TEST(BlasKernels, KeptOnRequest) {
  if (!std::getenv("SINKLAB_KEEP_BLAS_KERNELS") || !std::getenv("SINKLAB_TEST_STARTED_PRE_AVX2"))
    GTEST_SKIP() << "the .prescott_kept copy checks it";
  EXPECT_EQ(lower(core_in_use()), "prescott") << cpu_blas_summary();
  EXPECT_NE(cpu::blas_kernel_choice_note().find("kept (SINKLAB_KEEP_BLAS_KERNELS)"), std::string::npos)
      << cpu_blas_summary();
}

TEST(BlasKernels, CoreNamesByInstructionSet) {
  EXPECT_EQ(cpu::openblas_core_isa("Prescott"), VectorIsa::sse);
  EXPECT_EQ(cpu::openblas_core_isa("NEHALEM"), VectorIsa::sse);
  EXPECT_EQ(cpu::openblas_core_isa("Opteron_SSE3"), VectorIsa::sse);
  EXPECT_EQ(cpu::openblas_core_isa("Sandybridge"), VectorIsa::avx);
  EXPECT_EQ(cpu::openblas_core_isa("Excavator"), VectorIsa::avx);
  EXPECT_EQ(cpu::openblas_core_isa("Haswell"), VectorIsa::avx2);
  EXPECT_EQ(cpu::openblas_core_isa("Zen"), VectorIsa::avx2);
  EXPECT_EQ(cpu::openblas_core_isa("SkylakeX"), VectorIsa::avx512);
  EXPECT_EQ(cpu::openblas_core_isa("cooperlake"), VectorIsa::avx512);
  EXPECT_EQ(cpu::openblas_core_isa("SapphireRapids"), VectorIsa::avx512);
  EXPECT_FALSE(cpu::openblas_core_isa("Zen5").has_value());  // a newer library's set: left alone
  EXPECT_FALSE(cpu::openblas_core_isa("").has_value());
}

TEST(BlasKernels, WhichKernelSetIsForced) {
  const CpuVectorFeatures sse{VectorIsa::sse, false}, avx{VectorIsa::avx, false}, avx2{VectorIsa::avx2, false};
  const CpuVectorFeatures avx512{VectorIsa::avx512, false}, avx512_bf16{VectorIsa::avx512, true};
  // The case: OpenBLAS 0.3.21 on a family 6 model 207 Xeon (AVX-512 with BF16) picks Prescott.
  EXPECT_EQ(cpu::openblas_core_to_force("Prescott", avx512_bf16), "Cooperlake");
  EXPECT_EQ(cpu::openblas_core_to_force("Prescott", avx512), "SkylakeX");
  EXPECT_EQ(cpu::openblas_core_to_force("Prescott", avx2), "Haswell");
  EXPECT_EQ(cpu::openblas_core_to_force("Nehalem", avx2), "Haswell");
  EXPECT_EQ(cpu::openblas_core_to_force("Sandybridge", avx512), "SkylakeX");
  // CPUs without AVX2 keep whatever OpenBLAS picked.
  EXPECT_EQ(cpu::openblas_core_to_force("Prescott", sse), "");
  EXPECT_EQ(cpu::openblas_core_to_force("Prescott", avx), "");
  // AVX2 and AVX-512 sets stay, forced or not: the identity tests force Haswell on AVX-512 machines.
  EXPECT_EQ(cpu::openblas_core_to_force("Haswell", avx512_bf16), "");
  EXPECT_EQ(cpu::openblas_core_to_force("Zen", avx512), "");
  EXPECT_EQ(cpu::openblas_core_to_force("SkylakeX", avx2), "");
  EXPECT_EQ(cpu::openblas_core_to_force("SomethingNew", avx512), "");
}

}  // namespace
}  // namespace sinklab
