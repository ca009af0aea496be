// Shadow of the CUDA header for the CPU emulation (tests/gpu/emu/cuda_emu.hpp).
#pragma once
#include "cuda_emu.hpp"
