/* cublas_v2.h for the CPU emulator of the CUDA kernels (test/cuda_emu/cuda_emu.h). */
#include "../cuda_emu.h"
