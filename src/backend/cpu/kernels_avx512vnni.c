/*
 * kernels_avx512vnni.c: the AVX-512 kernels with AVX512-VNNI, whose vpdpbusd
 * forms the integer lane sums of the quantized products in one instruction.
 * The sums are exact either way, so its results equal kernels_avx512.c's.
 */
#define KERNELS_VNNI 1
#define KERNELS_NAME cpu_kernels_avx512vnni
#define KERNELS_ISA "avx512vnni"

#include "backend/cpu/kernels_avx512.c"
