/* cpu_features.c: choose the CPU kernels this processor can run. */
#include <string.h>

#include "backend/cpu/kernels.h"

/* True when the CPU and OS support the AVX-512 subsets the kernels use. */
static int
HasAvx512(void)
{
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
		__builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
		__builtin_cpu_supports("fma");
}

/* True when the CPU also has AVX512-VNNI (vpdpbusd). */
static int
HasAvx512Vnni(void)
{
	return HasAvx512() && __builtin_cpu_supports("avx512vnni");
}

/* True when the CPU supports AVX2, FMA and F16C. */
static int
HasAvx2(void)
{
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
		__builtin_cpu_supports("f16c");
}

/* The kernels named, or the best available for NULL/"auto". */
const cpu_kernels *
cpu_kernels_select(const char *name)
{
	if (name == NULL || name[0] == '\0' || strcmp(name, "auto") == 0)
		return HasAvx512Vnni() ? &cpu_kernels_avx512vnni :
			HasAvx512() ? &cpu_kernels_avx512 :
			HasAvx2() ? &cpu_kernels_avx2 : &cpu_kernels_generic;
	if (strcmp(name, "avx512vnni") == 0)
		return HasAvx512Vnni() ? &cpu_kernels_avx512vnni : NULL;
	if (strcmp(name, "avx512") == 0)
		return HasAvx512() ? &cpu_kernels_avx512 : NULL;
	if (strcmp(name, "avx2") == 0)
		return HasAvx2() ? &cpu_kernels_avx2 : NULL;
	if (strcmp(name, "generic") == 0)
		return &cpu_kernels_generic;
	return NULL;
}
