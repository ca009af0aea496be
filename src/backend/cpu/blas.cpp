// The CPU BLAS: which library and kernel set multiply matrices here, and the start-up correction of
// OpenBLAS's kernel choice (blas_kernels.hpp).
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string_view>

#include "backend/backend.hpp"
#include "backend/cpu/blas.hpp"
#include "backend/cpu/blas_kernels.hpp"
#include "core/text.hpp"

namespace sinklab {

namespace {

#if SINKLAB_SGEMM_ONEDNN
// oneDNN's widest instruction set in use (the CPU's, or less under ONEDNN_MAX_CPU_ISA), in the spelling
// of that variable, for the description: its sgemm kernels, like OpenBLAS's, give other last bits per
// instruction set.
const char* onednn_isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_sse41: return "SSE41";
    case dnnl_cpu_isa_avx: return "AVX";
    case dnnl_cpu_isa_avx2: return "AVX2";
    case dnnl_cpu_isa_avx2_vnni: return "AVX2_VNNI";
    case dnnl_cpu_isa_avx512_core: return "AVX512_CORE";
    case dnnl_cpu_isa_avx512_core_vnni: return "AVX512_CORE_VNNI";
    case dnnl_cpu_isa_avx512_core_bf16: return "AVX512_CORE_BF16";
    case dnnl_cpu_isa_avx512_core_amx: return "AVX512_CORE_AMX";
    default: return "other";
  }
}
#endif

}  // namespace

std::string cpu_blas_description() {
#if SINKLAB_BLAS_OPENBLAS
  // openblas_get_config() starts with "OpenBLAS <version> ..."; the core name is the kernel set in use.
  std::string config = openblas_get_config();
  std::string version = config.substr(0, config.find(' ', config.find(' ') + 1));
  std::string blas = strfmt("%s (%s kernels, %d threads)", version.c_str(), openblas_get_corename(),
                            omp_get_max_threads());
#else
  std::string blas = strfmt("BLIS (%d threads)", omp_get_max_threads());
#endif
#if SINKLAB_SGEMM_ONEDNN
  const dnnl_version_t* v = dnnl_version();
  blas += strfmt("; f32 GEMM oneDNN %d.%d.%d (%s)", v->major, v->minor, v->patch,
                 onednn_isa_name(dnnl_get_effective_cpu_isa()));
#endif
  return blas;
}

std::string cpu_blas_summary() {
  const std::string& note = cpu::blas_kernel_choice_note();
  return note.empty() ? cpu_blas_description() : cpu_blas_description() + "; " + note;
}

namespace cpu {

const char* vector_isa_name(VectorIsa isa) {
  switch (isa) {
    case VectorIsa::sse: return "SSE";
    case VectorIsa::avx: return "AVX";
    case VectorIsa::avx2: return "AVX2";
    case VectorIsa::avx512: return "AVX-512";
  }
  return "?";
}

CpuVectorFeatures cpu_vector_features() {
  // libgcc's CPU model checks the OS's XCR0 as well as CPUID, so an instruction set whose registers the
  // OS does not save counts as absent (as in OpenBLAS's own support_avx2 / support_avx512).
  __builtin_cpu_init();
  CpuVectorFeatures f;
  // OpenBLAS's SkylakeX kernels need AVX-512 F, CD, BW, DQ and VL (its support_avx512() asks for F and
  // BW; every CPU with BW has the others).
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl")) {
    f.isa = VectorIsa::avx512;
    f.avx512_bf16 = __builtin_cpu_supports("avx512bf16");
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    f.isa = VectorIsa::avx2;
  } else if (__builtin_cpu_supports("avx")) {
    f.isa = VectorIsa::avx;
  }
  return f;
}

std::optional<VectorIsa> openblas_core_isa(std::string_view core_name) {
  std::string name(core_name);
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  // OpenBLAS 0.3.21's x86-64 kernel sets (driver/others/dynamic.c), by the widest instructions they use.
  static constexpr std::string_view sse[] = {"unknown", "katmai", "coppermine", "northwood", "prescott",
                                             "banias",  "atom",   "core2",      "penryn",    "dunnington",
                                             "nehalem", "athlon", "opteron",    "opteron_sse3", "barcelona",
                                             "nano",    "bobcat"};
  static constexpr std::string_view avx[] = {"sandybridge", "bulldozer", "piledriver", "steamroller", "excavator"};
  static constexpr std::string_view avx2[] = {"haswell", "zen"};
  static constexpr std::string_view avx512[] = {"skylakex", "cooperlake", "sapphirerapids"};
  auto in = [&](const auto& list) { return std::find(std::begin(list), std::end(list), name) != std::end(list); };
  if (in(sse)) return VectorIsa::sse;
  if (in(avx)) return VectorIsa::avx;
  if (in(avx2)) return VectorIsa::avx2;
  if (in(avx512)) return VectorIsa::avx512;
  return std::nullopt;
}

std::string openblas_core_to_force(std::string_view core_in_use, const CpuVectorFeatures& cpu) {
  std::optional<VectorIsa> in_use = openblas_core_isa(core_in_use);
  if (!in_use || *in_use >= VectorIsa::avx2 || cpu.isa < VectorIsa::avx2) return "";
  if (cpu.isa == VectorIsa::avx512) return cpu.avx512_bf16 ? "Cooperlake" : "SkylakeX";
  return "Haswell";
}

namespace {
std::string& choice_note() {  // a function-local static: set before main(), when globals may not exist yet
  static std::string note;
  return note;
}
// Set in the environment of the re-executed program: "<core OpenBLAS picked> <the CPU's ISA>".
constexpr const char* kReexecMarker = "SINKLAB_BLAS_REEXEC";
}  // namespace

const std::string& blas_kernel_choice_note() { return choice_note(); }

}  // namespace cpu
}  // namespace sinklab

// Runs before main() in every program linked with sinklab (CMakeLists.txt keeps it linked with
// --undefined), before MPI_Init and before any BLAS call; glibc passes the program's argv.
extern "C" __attribute__((constructor)) void sinklab_check_blas_kernels(int, char** argv, char**) {
#if SINKLAB_BLAS_OPENBLAS
  using namespace sinklab;
  using namespace sinklab::cpu;
  const std::string in_use = openblas_get_corename();
  if (const char* marker = std::getenv(kReexecMarker)) {  // this is the re-executed program
    std::string picked(marker);
    std::string cpu_isa = picked.substr(picked.find(' ') + 1);
    picked = picked.substr(0, picked.find(' '));
    choice_note() = strfmt("sinklab chose them: OpenBLAS had picked %s on this %s CPU", picked.c_str(), cpu_isa.c_str());
    if (!openblas_core_to_force(in_use, cpu_vector_features()).empty())
      choice_note() += strfmt(", and OPENBLAS_CORETYPE=%s did not take effect", std::getenv("OPENBLAS_CORETYPE"));
    ::unsetenv(kReexecMarker);  // programs this one starts check for themselves
    return;
  }
  const CpuVectorFeatures cpu = cpu_vector_features();
  const std::string force = openblas_core_to_force(in_use, cpu);
  if (force.empty() || argv == nullptr) return;
  if (std::getenv("SINKLAB_KEEP_BLAS_KERNELS")) {  // to measure OpenBLAS's own choice (bench/README.md)
    choice_note() = strfmt("OpenBLAS picked %s on this %s CPU, kept (SINKLAB_KEEP_BLAS_KERNELS)", in_use.c_str(),
                           vector_isa_name(cpu.isa));
    return;
  }
  const std::string marker = in_use + " " + vector_isa_name(cpu.isa);
  const char* previous = std::getenv("OPENBLAS_CORETYPE");
  const std::string previous_value = previous ? previous : "";
  ::setenv(kReexecMarker, marker.c_str(), 1);
  ::setenv("OPENBLAS_CORETYPE", force.c_str(), 1);
  ::execv("/proc/self/exe", argv);
  // exec failed (no /proc?): run on as we are, and say how to get the right kernels.
  ::unsetenv(kReexecMarker);
  if (previous) ::setenv("OPENBLAS_CORETYPE", previous_value.c_str(), 1);
  else ::unsetenv("OPENBLAS_CORETYPE");
  choice_note() = strfmt("OpenBLAS picked %s on this %s CPU and sinklab could not re-execute itself: "
                         "OPENBLAS_CORETYPE=%s selects the right kernels", in_use.c_str(), vector_isa_name(cpu.isa),
                         force.c_str());
#endif
}
