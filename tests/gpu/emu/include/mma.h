// Shadow of the CUDA header for the CPU emulation (tests/gpu/emu/emu_wmma.hpp).
#pragma once
#include "emu_wmma.hpp"
