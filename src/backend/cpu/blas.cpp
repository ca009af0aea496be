#include <omp.h>

#include "backend/backend.hpp"
#include "backend/cpu/blas.hpp"
#include "core/text.hpp"

namespace sinklab {

std::string cpu_blas_description() {
#if SINKLAB_BLAS_OPENBLAS
  // openblas_get_config() starts with "OpenBLAS <version> ..."; the core name is the kernel set in use.
  std::string config = openblas_get_config();
  std::string version = config.substr(0, config.find(' ', config.find(' ') + 1));
  return strfmt("%s (%s kernels, %d threads)", version.c_str(), openblas_get_corename(), omp_get_max_threads());
#else
  return strfmt("BLIS (%d threads)", omp_get_max_threads());
#endif
}

}  // namespace sinklab
