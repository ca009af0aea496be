// Shadow of the cuBLAS header for the CPU emulation (tests/gpu/emu/cublas_standin.hpp).
#pragma once
#include "cublas_standin.hpp"
