// Shadow of nccl.h for the CPU emulation (tests/gpu/emu/nccl_standin.hpp).
#pragma once
#include "nccl_standin.hpp"
