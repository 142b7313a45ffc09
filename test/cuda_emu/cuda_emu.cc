/*
 * cuda_emu.cc: the CPU emulator of CUDA and cuBLAS described in cuda_emu.h.
 * Kernel threads are ucontext coroutines scheduled round-robin by one
 * scheduler per block; streams, events and graphs are host objects.
 */
#include "cuda_emu.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <ucontext.h>

#include <map>
#include <vector>

#define EMU_MAX_THREADS 1024
#define EMU_STACK (64 * 1024)

namespace cuda_emu
{
	dim3		thread_idx;
	dim3		block_idx;
	dim3		grid_dim;
	dim3		block_dim;
}

struct CUstream_st
{
	bool		capturing;
	bool		invalid;		/* an illegal call during the capture */
	cudaGraph_t graph;
};

struct CUevent_st
{
	double		t;				/* host seconds when last recorded */
};

struct CUgraph_st
{
	std::vector<std::function<void()>> ops;
};

struct CUgraphExec_st
{
	std::vector<std::function<void()>> ops;
};

struct cublasContext
{
	cudaStream_t stream;
};

/* ------------------------------------------------------------ diagnostics */
static cudaError_t last_error = cudaSuccess;
static int	n_capturing = 0;	/* streams capturing now */
static bool device_lost = false;	/* a sticky fault: every call fails */

static bool fail_captures = false;
static int	fail_copies_2d = 0;	/* 2-D copies still to refuse */

extern "C" void
cuda_emu_fail_captures(int on)
{
	fail_captures = on != 0;
}

extern "C" void
cuda_emu_fail_copies_2d(int n)
{
	fail_copies_2d = n;
}

extern "C" void
cuda_emu_fail_device(void)
{
	device_lost = true;
	last_error = cudaErrorIllegalAddress;
}

/* A programming error the device would also reject: report it and stop the test. */
[[noreturn]] static void
Fatal(const char *what)
{
	fprintf(stderr, "cuda_emu: %s\n", what);
	fflush(stderr);
	abort();
}

static cudaError_t
SetError(cudaError_t e)
{
	if (device_lost)
		return last_error = cudaErrorIllegalAddress;
	if (e != cudaSuccess && last_error == cudaSuccess)
		last_error = e;
	return e;
}

/* A call that is illegal while any stream captures: invalidate those captures. */
static bool
IllegalDuringCapture(void)
{
	return n_capturing > 0;
}

/* ------------------------------------------------------- kernel execution */
namespace
{
	enum ThreadState
	{
		T_RUN,
		T_BAR_BLOCK,
		T_BAR_WARP,
		T_DONE
	};

	struct EmuThread
	{
		ucontext_t	ctx;
		ThreadState state;
		dim3		idx;
	};

	ucontext_t	sched_ctx;
	EmuThread  *threads;
	char	   *stacks;
	int			n_threads;
	int			cur;
	const std::function<void()> *body;
	std::vector<unsigned char> dyn;
	uint64_t	slots[EMU_MAX_THREADS];
	bool		in_kernel;
}

/* Coroutine entry: run the kernel body for the current thread, then finish. */
static void
ThreadEntry(void)
{
	(*body) ();
	threads[cur].state = T_DONE;
	swapcontext(&threads[cur].ctx, &sched_ctx);
}

/* Give control back to the block scheduler in state st. */
static void
Yield(ThreadState st)
{
	if (!in_kernel)
		Fatal("a barrier outside a kernel");
	threads[cur].state = st;
	swapcontext(&threads[cur].ctx, &sched_ctx);
}

void
cuda_emu::syncthreads(void)
{
	Yield(T_BAR_BLOCK);
}

void
cuda_emu::syncwarp(void)
{
	Yield(T_BAR_WARP);
}

void *
cuda_emu::dyn_shared(void)
{
	return dyn.empty() ? NULL : dyn.data();
}

uint64_t *
cuda_emu::warp_slots(void)
{
	return slots;
}

int
cuda_emu::linear_tid(void)
{
	return (int) (thread_idx.x + block_dim.x * (thread_idx.y + block_dim.y * thread_idx.z));
}

/* Run one block: round-robin over runnable threads, releasing barriers when all have arrived. */
static void
RunBlock(void)
{
	volatile int n_done = 0;	/* volatile: swapcontext returns twice */

	for (int i = 0; i < n_threads; i++)
	{
		EmuThread  *t = &threads[i];

		t->state = T_RUN;
		t->idx = dim3(i % cuda_emu::block_dim.x, i / cuda_emu::block_dim.x % cuda_emu::block_dim.y,
					  i / (cuda_emu::block_dim.x * cuda_emu::block_dim.y));
		getcontext(&t->ctx);
		t->ctx.uc_stack.ss_sp = stacks + (size_t) i * EMU_STACK;
		t->ctx.uc_stack.ss_size = EMU_STACK;
		t->ctx.uc_link = NULL;
		makecontext(&t->ctx, ThreadEntry, 0);
	}
	while (n_done < n_threads)
	{
		bool		ran = false,
					released = false;
		int			at_block = 0;

		for (int i = 0; i < n_threads; i++)
			if (threads[i].state == T_RUN)
			{
				cur = i;
				cuda_emu::thread_idx = threads[i].idx;
				swapcontext(&sched_ctx, &threads[i].ctx);
				ran = true;
				if (threads[i].state == T_DONE)
					n_done++;
			}
		if (ran)
			continue;
		/* nobody can run: release full warp barriers, else the block barrier */
		for (int w = 0; w * 32 < n_threads; w++)
		{
			int			waiting = 0,
						live = 0;

			for (int i = w * 32; i < n_threads && i < w * 32 + 32; i++)
			{
				live += threads[i].state != T_DONE;
				waiting += threads[i].state == T_BAR_WARP;
			}
			if (waiting > 0 && waiting == live)
			{
				for (int i = w * 32; i < n_threads && i < w * 32 + 32; i++)
					if (threads[i].state == T_BAR_WARP)
						threads[i].state = T_RUN;
				released = true;
			}
		}
		if (released)
			continue;
		for (int i = 0; i < n_threads; i++)
			at_block += threads[i].state == T_BAR_BLOCK;
		if (at_block > 0 && at_block == n_threads - n_done)
		{
			for (int i = 0; i < n_threads; i++)
				if (threads[i].state == T_BAR_BLOCK)
					threads[i].state = T_RUN;
			continue;
		}
		Fatal("deadlock: the threads of a block wait at different barriers");
	}
}

/* Run every block of a grid, one after another. */
static void
RunKernel(dim3 grid, dim3 block, size_t shmem, const std::function<void()> &fn)
{
	int			nt = (int) (block.x * block.y * block.z);

	if (nt < 1 || nt > EMU_MAX_THREADS || grid.x < 1 || grid.y < 1 || grid.z < 1 ||
		grid.y > 65535 || grid.z > 65535)
	{
		SetError(cudaErrorInvalidConfiguration);
		return;
	}
	if (stacks == NULL)
	{
		stacks = (char *) malloc((size_t) EMU_MAX_THREADS * EMU_STACK);
		threads = (EmuThread *) calloc(EMU_MAX_THREADS, sizeof(EmuThread));
		if (stacks == NULL || threads == NULL)
			Fatal("out of memory for the kernel threads");
	}
	dyn.assign(shmem, 0xff);
	body = &fn;
	n_threads = nt;
	cuda_emu::block_dim = block;
	cuda_emu::grid_dim = grid;
	in_kernel = true;
	for (unsigned z = 0; z < grid.z; z++)
		for (unsigned y = 0; y < grid.y; y++)
			for (unsigned x = 0; x < grid.x; x++)
			{
				cuda_emu::block_idx = dim3(x, y, z);
				RunBlock();
			}
	in_kernel = false;
}

cudaError_t
cuda_emu::enqueue(cudaStream_t s, std::function<void()> fn)
{
	if (device_lost)
		return SetError(cudaErrorIllegalAddress);
	if (s != NULL && s->capturing)
	{
		s->graph->ops.push_back(std::move(fn));
		return cudaSuccess;
	}
	if (s == NULL && IllegalDuringCapture())
		return SetError(cudaErrorStreamCaptureImplicit);
	fn();
	return cudaSuccess;
}

void
cuda_emu::launch(dim3 grid, dim3 block, size_t shmem, cudaStream_t s, std::function<void()> fn)
{
	if (shmem > 227 * 1024)
	{
		SetError(cudaErrorInvalidValue);
		return;
	}
	enqueue(s, [grid, block, shmem, fn]() { RunKernel(grid, block, shmem, fn); });
}

/* ---------------------------------------------------------------- memory */
static std::map<void *, size_t> device_allocs;
static size_t device_used = 0;

/* The emulated device's memory in bytes. */
static size_t
DeviceBytes(void)
{
	const char *mb = getenv("CBLLM_EMU_DEVICE_MB");

	return (size_t) (mb != NULL && atol(mb) > 0 ? atol(mb) : 4096) << 20;
}

cudaError_t
cudaMalloc(void **p, size_t bytes)
{
	void	   *m;

	if (IllegalDuringCapture())
		return SetError(cudaErrorStreamCaptureUnsupported);
	if (device_used + bytes > DeviceBytes() || (m = aligned_alloc(256, (bytes + 255) / 256 * 256 + 256)) == NULL)
		return SetError(cudaErrorMemoryAllocation);
	memset(m, 0xff, bytes);
	device_allocs[m] = bytes;
	device_used += bytes;
	*p = m;
	return cudaSuccess;
}

cudaError_t
cudaFree(void *p)
{
	std::map<void *, size_t>::iterator it;

	if (p == NULL)
		return cudaSuccess;
	it = device_allocs.find(p);
	if (it == device_allocs.end())
		Fatal("cudaFree of a pointer cudaMalloc did not return");
	device_used -= it->second;
	device_allocs.erase(it);
	free(p);
	return cudaSuccess;
}

cudaError_t
cudaMallocHost(void **p, size_t bytes)
{
	*p = malloc(bytes ? bytes : 1);
	return *p ? cudaSuccess : SetError(cudaErrorMemoryAllocation);
}

cudaError_t
cudaHostAlloc(void **p, size_t bytes, unsigned flags)
{
	(void) flags;
	return cudaMallocHost(p, bytes);
}

cudaError_t
cudaFreeHost(void *p)
{
	free(p);
	return cudaSuccess;
}

cudaError_t
cudaHostRegister(void *p, size_t bytes, unsigned flags)
{
	(void) p;
	(void) bytes;
	(void) flags;
	return cudaSuccess;
}

cudaError_t
cudaHostUnregister(void *p)
{
	(void) p;
	return cudaSuccess;
}

cudaError_t
cudaMemGetInfo(size_t *free_b, size_t *total_b)
{
	*total_b = DeviceBytes();
	*free_b = *total_b - device_used;
	return cudaSuccess;
}

cudaError_t
cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind)
{
	(void) kind;
	if (device_lost)
		return SetError(cudaErrorIllegalAddress);
	if (IllegalDuringCapture())
		return SetError(cudaErrorStreamCaptureImplicit);
	if (bytes > 0)
		memcpy(dst, src, bytes);
	return cudaSuccess;
}

cudaError_t
cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s)
{
	(void) kind;
	return cuda_emu::enqueue(s, [dst, src, bytes]() {
		if (bytes > 0)
			memcpy(dst, src, bytes);
	});
}

cudaError_t
cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
				  size_t height, cudaMemcpyKind kind, cudaStream_t s)
{
	(void) kind;
	if (width > dpitch || width > spitch)
		return SetError(cudaErrorInvalidValue);
	if (fail_copies_2d > 0)
	{
		fail_copies_2d--;		/* an injected, non-sticky failure: nothing is copied */
		return SetError(cudaErrorInvalidValue);
	}
	return cuda_emu::enqueue(s, [=]() {
		for (size_t r = 0; r < height; r++)
			memcpy((char *) dst + r * dpitch, (const char *) src + r * spitch, width);
	});
}

cudaError_t
cudaMemset(void *p, int value, size_t bytes)
{
	if (IllegalDuringCapture())
		return SetError(cudaErrorStreamCaptureImplicit);
	memset(p, value, bytes);
	return cudaSuccess;
}

cudaError_t
cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s)
{
	return cuda_emu::enqueue(s, [p, value, bytes]() { memset(p, value, bytes); });
}

/* ----------------------------------------------------------------- device */
cudaError_t
cudaGetDeviceCount(int *n)
{
	*n = 1;
	return cudaSuccess;
}

cudaError_t
cudaSetDevice(int dev)
{
	return dev == 0 ? cudaSuccess : SetError(cudaErrorInvalidValue);
}

cudaError_t
cudaGetDevice(int *dev)
{
	*dev = 0;
	return cudaSuccess;
}

cudaError_t
cudaGetDeviceProperties(cudaDeviceProp *p, int dev)
{
	(void) dev;
	memset(p, 0, sizeof(*p));
	snprintf(p->name, sizeof(p->name), "CPU emulator");
	p->totalGlobalMem = DeviceBytes();
	p->sharedMemPerBlockOptin = 227 * 1024;
	p->multiProcessorCount = 1;
	p->major = 9;
	p->minor = 0;
	return cudaSuccess;
}

const char *
cudaGetErrorString(cudaError_t e)
{
	switch (e)
	{
		case cudaSuccess:
			return "no error";
		case cudaErrorInvalidValue:
			return "invalid argument";
		case cudaErrorMemoryAllocation:
			return "out of memory";
		case cudaErrorInvalidConfiguration:
			return "invalid configuration argument";
		case cudaErrorNoDevice:
			return "no CUDA-capable device is detected";
		case cudaErrorInvalidResourceHandle:
			return "invalid resource handle";
		case cudaErrorIllegalAddress:
			return "an illegal memory access was encountered";
		case cudaErrorStreamCaptureUnsupported:
			return "operation not permitted when stream is capturing";
		case cudaErrorStreamCaptureInvalidated:
			return "operation failed due to a previous error during capture";
		case cudaErrorStreamCaptureImplicit:
			return "operation would make the legacy stream depend on a capturing blocking stream";
	}
	return "unknown error";
}

cudaError_t
cudaGetLastError(void)
{
	cudaError_t e = last_error;

	if (!device_lost)
		last_error = cudaSuccess;
	return e;
}

cudaError_t
cudaPeekAtLastError(void)
{
	return last_error;
}

cudaError_t
cudaDeviceSynchronize(void)
{
	if (device_lost)
		return SetError(cudaErrorIllegalAddress);
	if (IllegalDuringCapture())
		return SetError(cudaErrorStreamCaptureUnsupported);
	return cudaSuccess;
}

/* ---------------------------------------------------------------- streams */
cudaError_t
cudaStreamCreate(cudaStream_t *s)
{
	*s = new CUstream_st();
	return cudaSuccess;
}

cudaError_t
cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
	(void) flags;
	return cudaStreamCreate(s);
}

cudaError_t
cudaStreamDestroy(cudaStream_t s)
{
	if (s != NULL && s->capturing)
		n_capturing--;
	if (s != NULL)
		delete s->graph;
	delete s;
	return cudaSuccess;
}

cudaError_t
cudaStreamSynchronize(cudaStream_t s)
{
	if (device_lost)
		return SetError(cudaErrorIllegalAddress);
	if (s != NULL && s->capturing)
	{
		s->invalid = true;
		return SetError(cudaErrorStreamCaptureUnsupported);
	}
	return cudaSuccess;
}

cudaError_t
cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags)
{
	(void) s;
	(void) flags;
	return e != NULL ? cudaSuccess : SetError(cudaErrorInvalidResourceHandle);
}

cudaError_t
cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode)
{
	(void) mode;
	if (s == NULL || s->capturing)
		return SetError(cudaErrorStreamCaptureUnsupported);
	s->capturing = true;
	s->invalid = false;
	s->graph = new CUgraph_st();
	n_capturing++;
	return cudaSuccess;
}

cudaError_t
cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g)
{
	if (s == NULL || !s->capturing)
		return SetError(cudaErrorInvalidValue);
	s->capturing = false;
	n_capturing--;
	if (s->invalid || fail_captures)
	{
		delete s->graph;
		s->graph = NULL;
		*g = NULL;
		return SetError(cudaErrorStreamCaptureInvalidated);
	}
	*g = s->graph;
	s->graph = NULL;
	return cudaSuccess;
}

cudaError_t
cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus *st)
{
	*st = s != NULL && s->capturing ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
	return cudaSuccess;
}

/* ----------------------------------------------------------------- events */
static double
Now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

cudaError_t
cudaEventCreate(cudaEvent_t *e)
{
	*e = new CUevent_st();
	return cudaSuccess;
}

cudaError_t
cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
	(void) flags;
	return cudaEventCreate(e);
}

cudaError_t
cudaEventDestroy(cudaEvent_t e)
{
	delete e;
	return cudaSuccess;
}

cudaError_t
cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
	if (e == NULL)
		return SetError(cudaErrorInvalidResourceHandle);
	return cuda_emu::enqueue(s, [e]() { e->t = Now(); });
}

cudaError_t
cudaEventSynchronize(cudaEvent_t e)
{
	if (IllegalDuringCapture())
		return SetError(cudaErrorStreamCaptureUnsupported);
	return e != NULL ? cudaSuccess : SetError(cudaErrorInvalidResourceHandle);
}

cudaError_t
cudaEventQuery(cudaEvent_t e)
{
	return e != NULL ? cudaSuccess : SetError(cudaErrorInvalidResourceHandle);
}

cudaError_t
cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
	*ms = (float) ((b->t - a->t) * 1e3);
	return cudaSuccess;
}

/* ----------------------------------------------------------------- graphs */
cudaError_t
cudaGraphInstantiate(cudaGraphExec_t *x, cudaGraph_t g, unsigned long long flags)
{
	(void) flags;
	if (g == NULL)
		return SetError(cudaErrorInvalidValue);
	*x = new CUgraphExec_st();
	(*x)->ops = g->ops;
	return cudaSuccess;
}

cudaError_t
cudaGraphLaunch(cudaGraphExec_t x, cudaStream_t s)
{
	if (device_lost)
		return SetError(cudaErrorIllegalAddress);
	if (x == NULL)
		return SetError(cudaErrorInvalidResourceHandle);
	if (s != NULL && s->capturing)
		Fatal("a graph launched into a capturing stream");
	if (s == NULL && IllegalDuringCapture())
		return SetError(cudaErrorStreamCaptureImplicit);
	for (const std::function<void()> &op : x->ops)
		op();
	return cudaSuccess;
}

cudaError_t
cudaGraphExecDestroy(cudaGraphExec_t x)
{
	delete x;
	return cudaSuccess;
}

cudaError_t
cudaGraphDestroy(cudaGraph_t g)
{
	delete g;
	return cudaSuccess;
}

/* ------------------------------------------------------------ half floats */
float
cuda_emu_half_to_float(uint16_t h)
{
	int			e = (h >> 10) & 0x1f,
				m = h & 0x3ff;
	float		v = e == 0 ? ldexpf((float) m, -24) :
		e == 31 ? (m ? NAN : INFINITY) : ldexpf((float) (m | 0x400), e - 25);

	return h & 0x8000 ? -v : v;
}

uint16_t
cuda_emu_float_to_half(float f)
{
	uint16_t	sign = signbit(f) ? 0x8000 : 0;
	float		a = fabsf(f);
	int			e;

	if (isnan(f))
		return 0x7e00;
	if (a >= 65520.0f)
		return sign | 0x7c00;	/* rounds to infinity */
	if (a < ldexpf(1.0f, -14))
	{
		/* subnormal: multiples of 2^-24, nearest even */
		return sign | (uint16_t) nearbyintf(a * 16777216.0f);
	}
	frexpf(a, &e);				/* a = f * 2^e, f in [0.5, 1) */
	{
		float		q = nearbyintf(ldexpf(a, 11 - e));	/* 11 significant bits */
		int			exp = e - 1 + 15;

		if (q >= 2048.0f)
		{
			q /= 2;
			exp++;
		}
		if (exp >= 31)
			return sign | 0x7c00;
		return sign | (uint16_t) (exp << 10) | ((uint16_t) q & 0x3ff);
	}
}

/* ----------------------------------------------------------------- cuBLAS */
cublasStatus_t
cublasCreate(cublasHandle_t *h)
{
	*h = new cublasContext();
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t
cublasDestroy(cublasHandle_t h)
{
	delete h;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t
cublasSetStream(cublasHandle_t h, cudaStream_t s)
{
	if (h == NULL)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	h->stream = s;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t
cublasSetWorkspace(cublasHandle_t h, void *ws, size_t bytes)
{
	(void) ws;
	(void) bytes;
	return h != NULL ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

/* Element (i, j) of a column-major matrix of type t. */
static float
Elem(const void *p, cudaDataType_t t, int64_t i, int64_t j, int ld)
{
	int64_t		k = i + j * (int64_t) ld;

	if (t == CUDA_R_32F)
		return ((const float *) p)[k];
	if (t == CUDA_R_16BF)
		return __bfloat162float(((const __nv_bfloat16 *) p)[k]);
	return __half2float(((const __half *) p)[k]);
}

cublasStatus_t
cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
			 const void *alpha, const void *A, cudaDataType_t at, int lda,
			 const void *B, cudaDataType_t bt, int ldb, const void *beta, void *C,
			 cudaDataType_t ct, int ldc, cublasComputeType_t compute, cublasGemmAlgo_t algo)
{
	float		al = *(const float *) alpha,
				be = *(const float *) beta;

	(void) algo;
	if (h == NULL)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (ct != CUDA_R_32F || compute != CUBLAS_COMPUTE_32F || m < 0 || n < 0 || k < 0 ||
		lda < (ta == CUBLAS_OP_N ? m : k) || ldb < (tb == CUBLAS_OP_N ? k : n) || ldc < m)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (cuda_emu::enqueue(h->stream, [=]() {
		for (int j = 0; j < n; j++)
			for (int i = 0; i < m; i++)
			{
				double		acc = 0;

				for (int l = 0; l < k; l++)
					acc += (double) (ta == CUBLAS_OP_N ? Elem(A, at, i, l, lda) : Elem(A, at, l, i, lda)) *
						(tb == CUBLAS_OP_N ? Elem(B, bt, l, j, ldb) : Elem(B, bt, j, l, ldb));
				float	   *c = (float *) C + i + (int64_t) j * ldc;

				*c = (float) (al * acc + (be != 0 ? be * *c : 0));
			}
	}) != cudaSuccess)
		return CUBLAS_STATUS_EXECUTION_FAILED;
	return CUBLAS_STATUS_SUCCESS;
}
