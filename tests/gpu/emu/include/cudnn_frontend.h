// Shadow of cudnn_frontend.h for the CPU emulation (tests/gpu/emu/cudnn_standin.hpp).
#pragma once
#include "cudnn_standin.hpp"
