/*
 * cuda_emu.h: a CPU emulator of the part of CUDA and cuBLAS that cbllm's
 * kernels use, so that CI (which has no GPU) runs the CUDA backend's code:
 * every kernel, the backend table, streams, graph capture and replay, and
 * cuBLAS GEMMs, on small inputs.  It checks logic, not speed.
 *
 * How a kernel runs: the blocks of a grid run one after another; inside a
 * block every thread is a coroutine with its own stack.  A thread runs until
 * it reaches __syncthreads() (all live threads of the block must arrive) or
 * a warp operation (the 32 lanes of its warp must arrive), so barriers and
 * shuffles behave as on the device, and a block whose threads disagree about
 * a barrier is reported as a deadlock.  __shared__ variables are static:
 * blocks never overlap, so one copy serves each block in turn.  Dynamic
 * shared memory and new allocations start filled with 0xff bytes (NaN as
 * floats), so reading what was never written shows.
 *
 * Streams run their work at once, in order, except while they capture a
 * graph: then launches, copies and GEMMs are recorded (arguments by value,
 * as the device does) and run at each cudaGraphLaunch.  Operations that are
 * illegal during a capture (synchronous copies, allocation, work on the
 * legacy stream) fail the capture as the driver would.
 *
 * The device has CBLLM_EMU_DEVICE_MB of memory (default 4096), so that
 * out-of-memory paths can be tested.  Not emulated: concurrency between
 * blocks or streams, timing, and warp divergence inside one shuffle.
 */
#ifndef CBLLM_CUDA_EMU_H
#define CBLLM_CUDA_EMU_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <functional>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)

#define CBLLM_CUDA_EMU 1

struct dim3
{
	unsigned	x,
				y,
				z;
	dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

typedef enum cudaError
{
	cudaSuccess = 0,
	cudaErrorInvalidValue = 1,
	cudaErrorMemoryAllocation = 2,
	cudaErrorInvalidConfiguration = 9,
	cudaErrorNoDevice = 100,
	cudaErrorInvalidResourceHandle = 400,
	cudaErrorIllegalAddress = 700,
	cudaErrorStreamCaptureUnsupported = 900,
	cudaErrorStreamCaptureInvalidated = 901,
	cudaErrorStreamCaptureImplicit = 906
} cudaError_t;

enum cudaMemcpyKind
{
	cudaMemcpyHostToHost = 0,
	cudaMemcpyHostToDevice = 1,
	cudaMemcpyDeviceToHost = 2,
	cudaMemcpyDeviceToDevice = 3,
	cudaMemcpyDefault = 4
};

enum cudaStreamCaptureMode
{
	cudaStreamCaptureModeGlobal = 0,
	cudaStreamCaptureModeThreadLocal = 1,
	cudaStreamCaptureModeRelaxed = 2
};

enum cudaStreamCaptureStatus
{
	cudaStreamCaptureStatusNone = 0,
	cudaStreamCaptureStatusActive = 1,
	cudaStreamCaptureStatusInvalidated = 2
};

enum cudaFuncAttribute
{
	cudaFuncAttributeMaxDynamicSharedMemorySize = 8
};

#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventDisableTiming 0x02
#define cudaHostRegisterDefault 0x00
#define cudaHostAllocDefault 0x00

typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
typedef struct CUgraph_st *cudaGraph_t;
typedef struct CUgraphExec_st *cudaGraphExec_t;

struct cudaDeviceProp
{
	char		name[256];
	size_t		totalGlobalMem;
	size_t		sharedMemPerBlockOptin;
	int			multiProcessorCount;
	int			major;
	int			minor;
};

/* ---------------------------------------------------------------- runtime */
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaSetDevice(int dev);
cudaError_t cudaGetDevice(int *dev);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int dev);
const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocHost(void **p, size_t bytes);
cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaHostRegister(void *p, size_t bytes, unsigned flags);
cudaError_t cudaHostUnregister(void *p);
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
							cudaStream_t s = 0);
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
							  size_t width, size_t height, cudaMemcpyKind kind, cudaStream_t s = 0);
cudaError_t cudaMemset(void *p, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s = 0);
cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags = 0);
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g);
cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus *st);
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *x, cudaGraph_t g, unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t x, cudaStream_t s);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t x);
cudaError_t cudaGraphDestroy(cudaGraph_t g);

template <typename F>
cudaError_t
cudaFuncSetAttribute(F *, cudaFuncAttribute, int)
{
	return cudaSuccess;
}

/* Make the device fail for good, as after an illegal address: every later call fails (tests). */
extern "C" void cuda_emu_fail_device(void);

/* Make every graph capture fail at its end, as an illegal call inside it would (tests). */
extern "C" void cuda_emu_fail_captures(int on);

/* Make the next n 2-D copies (the swap copies) fail without copying, a non-sticky error (tests). */
extern "C" void cuda_emu_fail_copies_2d(int n);

/* --------------------------------------------------------- kernel threads */
namespace cuda_emu
{
	extern dim3 thread_idx;
	extern dim3 block_idx;
	extern dim3 block_dim;
	extern dim3 grid_dim;

	void		launch(dim3 grid, dim3 block, size_t shmem, cudaStream_t s,
					   std::function<void()> body);
	void		syncthreads(void);
	void		syncwarp(void);
	void	   *dyn_shared(void);
	uint64_t   *warp_slots(void);	/* (1024) one exchange word per thread */
	int			linear_tid(void);
	/* run fn now, or record it when s captures a graph */
	cudaError_t enqueue(cudaStream_t s, std::function<void()> fn);

	/* The value of lane src of this thread's warp; own value when src is outside [0, width). */
	template <typename T>
	T
	shfl(T v, int src, int width)
	{
		int			tid = linear_tid(),
					lane = tid % 32,
					seg = lane - lane % width;
		uint64_t	w = 0;
		T			r;

		memcpy(&w, &v, sizeof(T));
		warp_slots()[tid] = w;
		syncwarp();
		if (src >= 0 && src < width)
			w = warp_slots()[tid - lane + seg + src];
		syncwarp();
		memcpy(&r, &w, sizeof(T));
		return r;
	}
}

#define threadIdx (cuda_emu::thread_idx)
#define blockIdx (cuda_emu::block_idx)
#define blockDim (cuda_emu::block_dim)
#define gridDim (cuda_emu::grid_dim)
#define warpSize 32

static inline void
__syncthreads(void)
{
	cuda_emu::syncthreads();
}

static inline void
__syncwarp(unsigned mask = 0xffffffffu)
{
	(void) mask;
	cuda_emu::syncwarp();
}

template <typename T>
static inline T
__shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32)
{
	(void) mask;
	return cuda_emu::shfl(v, (cuda_emu::linear_tid() % width) ^ lane_mask, width);
}

template <typename T>
static inline T
__shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32)
{
	(void) mask;
	return cuda_emu::shfl(v, (int) (cuda_emu::linear_tid() % width + delta), width);
}

template <typename T>
static inline T
__shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32)
{
	(void) mask;
	return cuda_emu::shfl(v, (int) (cuda_emu::linear_tid() % width) - (int) delta, width);
}

template <typename T>
static inline T
__shfl_sync(unsigned mask, T v, int src, int width = 32)
{
	(void) mask;
	return cuda_emu::shfl(v, src % width, width);
}

/* ------------------------------------------------------ device arithmetic */
static inline float
rsqrtf(float x)
{
	return 1.0f / sqrtf(x);
}

static inline float
__fdividef(float a, float b)
{
	return a / b;
}

static inline int
min(int a, int b)
{
	return a < b ? a : b;
}

static inline int
max(int a, int b)
{
	return a > b ? a : b;
}

/* Rounded arithmetic that the device never contracts into a fused multiply-add (nor does g++ here). */
static inline float
__fmul_rn(float a, float b)
{
	return a * b;
}

static inline float
__fadd_rn(float a, float b)
{
	return a + b;
}

static inline float
__fsub_rn(float a, float b)
{
	return a - b;
}

static inline unsigned
__float_as_uint(float f)
{
	unsigned	u;

	memcpy(&u, &f, 4);
	return u;
}

static inline float
__uint_as_float(unsigned u)
{
	float		f;

	memcpy(&f, &u, 4);
	return f;
}

template <typename T>
static inline T
__ldg(const T *p)
{
	return *p;
}

/* Atomics are plain read-modify-writes: threads never run at the same time. */
template <typename T>
static inline T
atomicAdd(T *p, T v)
{
	T			old = *p;

	*p = old + v;
	return old;
}

template <typename T>
static inline T
atomicMax(T *p, T v)
{
	T			old = *p;

	*p = old > v ? old : v;
	return old;
}

/* ------------------------------------------------------------ half types */
struct __half
{
	uint16_t	x;
};

struct __nv_bfloat16
{
	uint16_t	x;
};

static inline float
__bfloat162float(__nv_bfloat16 b)
{
	uint32_t	u = (uint32_t) b.x << 16;
	float		f;

	memcpy(&f, &u, 4);
	return f;
}

static inline __nv_bfloat16
__float2bfloat16(float f)
{
	uint32_t	u;
	__nv_bfloat16 b;

	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		b.x = (uint16_t) ((u >> 16) | 0x40);	/* quiet NaN */
	else
		b.x = (uint16_t) ((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
	return b;
}

float		cuda_emu_half_to_float(uint16_t h);
uint16_t	cuda_emu_float_to_half(float f);

static inline float
__half2float(__half h)
{
	return cuda_emu_half_to_float(h.x);
}

static inline __half
__ushort_as_half(unsigned short u)
{
	__half		h;

	h.x = u;
	return h;
}

static inline __half
__float2half(float f)
{
	__half		h;

	h.x = cuda_emu_float_to_half(f);
	return h;
}

/* ------------------------------------------------------------------ cuBLAS */
typedef struct cublasContext *cublasHandle_t;

typedef enum
{
	CUBLAS_STATUS_SUCCESS = 0,
	CUBLAS_STATUS_NOT_INITIALIZED = 1,
	CUBLAS_STATUS_ALLOC_FAILED = 3,
	CUBLAS_STATUS_INVALID_VALUE = 7,
	CUBLAS_STATUS_EXECUTION_FAILED = 13,
	CUBLAS_STATUS_NOT_SUPPORTED = 15
} cublasStatus_t;

typedef enum
{
	CUBLAS_OP_N = 0,
	CUBLAS_OP_T = 1
} cublasOperation_t;

typedef enum
{
	CUDA_R_32F = 0,
	CUDA_R_16F = 2,
	CUDA_R_16BF = 14
} cudaDataType_t;

typedef enum
{
	CUBLAS_COMPUTE_32F = 68
} cublasComputeType_t;

typedef enum
{
	CUBLAS_GEMM_DEFAULT = -1,
	CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99
} cublasGemmAlgo_t;

cublasStatus_t cublasCreate(cublasHandle_t *h);
cublasStatus_t cublasDestroy(cublasHandle_t h);
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s);
cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *ws, size_t bytes);
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
							int m, int n, int k, const void *alpha,
							const void *A, cudaDataType_t at, int lda,
							const void *B, cudaDataType_t bt, int ldb,
							const void *beta, void *C, cudaDataType_t ct, int ldc,
							cublasComputeType_t compute, cublasGemmAlgo_t algo);

#endif
