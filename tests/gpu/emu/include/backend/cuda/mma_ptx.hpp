// Shadow of src/backend/cuda/mma_ptx.hpp for the CPU emulation (tests/gpu/emu/emu_ptx.hpp).
#pragma once
#include "emu_ptx.hpp"
