// The BLAS kernel set in use. Every CPU test also runs with OPENBLAS_CORETYPE=Haswell (the ".blas_haswell"
// copies of tests/cpp/CMakeLists.txt): OpenBLAS picks its kernels per CPU at run time, and the AVX2
// kernels give other last bits than the AVX-512 ones for the same GEMM (and, for different GEMM shapes
// or thread partitions, other bits than each other). An AVX-512 machine thereby runs every bit-identity
// claim on the AVX2 kernels too. This test fails when the forced kernel set is not the one in use, so the
// copies can never pass by silently running the native kernels.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>

#include "backend/backend.hpp"

namespace sinklab {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

TEST(BlasKernels, DescriptionNamesTheKernelsInUse) {
  const std::string description = cpu_blas_description();
  std::printf("  %s\n", description.c_str());
  EXPECT_NE(description.find("threads"), std::string::npos) << description;
}

TEST(BlasKernels, ForcedCoreTypeIsInEffect) {
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  if (!forced || !*forced) GTEST_SKIP() << "OPENBLAS_CORETYPE not set (the .blas_haswell copy checks it)";
  const std::string description = cpu_blas_description();
  if (description.rfind("OpenBLAS", 0) != 0) GTEST_SKIP() << "not OpenBLAS: " << description;
  std::string expected = "(";  // "(haswell kernels" (built piecewise: GCC 12 misreads "(" + string)
  expected += lower(forced);
  expected += " kernels";
  EXPECT_NE(lower(description).find(expected), std::string::npos)
      << "OPENBLAS_CORETYPE=" << forced << " is not in effect: " << description;
}

}  // namespace
}  // namespace sinklab
