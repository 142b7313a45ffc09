/*
 * cuda_runtime_ops.cu: the CUDA runtime as the backend needs it: devices,
 * memory, copies, streams, events and graphs, each call checked and turned
 * into a status code with a message that names it.
 */
#include <cuda_runtime.h>

#include <stdio.h>
#include <stdlib.h>

#include "backend/cuda/cuda_ops.h"

/* Turn a CUDA error into a status; what names the call. */
static int
Check(cudaError_t e, const char *what, cbllm_err *err)
{
	if (e == cudaSuccess)
		return CBLLM_OK;
	(void) cudaGetLastError();	/* clear a non-sticky error */
	return cbllm_fail(err, CBLLM_ERR_DEVICE, "CUDA %s failed: %s", what, cudaGetErrorString(e));
}

extern "C" int
cuda_device_count(void)
{
	int			n = 0;

	if (cudaGetDeviceCount(&n) != cudaSuccess)
	{
		(void) cudaGetLastError();	/* clear it: no device or no driver */
		return 0;
	}
	return n;
}

extern "C" void
cuda_device_describe(char *buf, size_t len)
{
	cudaDeviceProp p;
	int			dev = 0;

	if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&p, dev) != cudaSuccess)
	{
		(void) cudaGetLastError();
		snprintf(buf, len, "no CUDA device");
		return;
	}
	snprintf(buf, len, "%s, %zu MiB", p.name, (size_t) (p.totalGlobalMem >> 20));
}

extern "C" int
cuda_device_ok(void)
{
	if (cudaDeviceSynchronize() == cudaSuccess)
		return 1;
	(void) cudaGetLastError();	/* a non-sticky error clears; a sticky one stays */
	return cudaDeviceSynchronize() == cudaSuccess;
}

extern "C" int
cuda_mem_info(size_t *free_b, size_t *total_b, cbllm_err *err)
{
	return Check(cudaMemGetInfo(free_b, total_b), "memory query", err);
}

extern "C" int
cuda_alloc(void **d_ptr, size_t bytes, cbllm_err *err)
{
	size_t		free_b = 0,
				total_b = 0;
	cudaError_t e = cudaMalloc(d_ptr, bytes ? bytes : 4);

	if (e == cudaSuccess)
		return CBLLM_OK;
	*d_ptr = NULL;
	(void) cudaGetLastError();
	(void) cudaMemGetInfo(&free_b, &total_b);
	return cbllm_fail(err, CBLLM_ERR_NOMEM,
					  "CUDA out of memory: %zu MiB needed, %zu MiB free of %zu MiB (%s)",
					  bytes >> 20, free_b >> 20, total_b >> 20, cudaGetErrorString(e));
}

extern "C" void
cuda_free(void *d_ptr)
{
	if (d_ptr != NULL)
		(void) cudaFree(d_ptr);
}

extern "C" int
cuda_host_alloc(void **h_ptr, size_t bytes, cbllm_err *err)
{
	cudaError_t e = cudaMallocHost(h_ptr, bytes ? bytes : 4);

	if (e == cudaSuccess)
		return CBLLM_OK;
	*h_ptr = NULL;
	(void) cudaGetLastError();
	return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of page-locked host memory for %zu MiB (%s)",
					  bytes >> 20, cudaGetErrorString(e));
}

extern "C" void
cuda_host_free(void *h_ptr)
{
	if (h_ptr != NULL)
		(void) cudaFreeHost(h_ptr);
}

extern "C" int
cuda_host_register(void *p, size_t bytes, cbllm_err *err)
{
	if (p == NULL || bytes == 0)
		return CBLLM_OK;
	return Check(cudaHostRegister(p, bytes, cudaHostRegisterDefault), "page-locking of host memory",
				 err);
}

extern "C" void
cuda_host_unregister(void *p)
{
	if (p != NULL)
		(void) cudaHostUnregister(p);
}

/*
 * cudaMemcpy from pageable memory may return before the data reaches the
 * device, and a device-to-device cudaMemcpy always may; kernels on other
 * streams are not ordered after it.  So the synchronous copies wait.
 */
extern "C" int
cuda_upload(void *d_dst, const void *src, size_t bytes, cbllm_err *err)
{
	int			rc = Check(cudaMemcpy(d_dst, src, bytes, cudaMemcpyHostToDevice), "upload", err);

	return rc ? rc : Check(cudaStreamSynchronize(0), "upload", err);
}

extern "C" int
cuda_download(void *dst, const void *d_src, size_t bytes, cbllm_err *err)
{
	return Check(cudaMemcpy(dst, d_src, bytes, cudaMemcpyDeviceToHost), "download", err);
}

extern "C" int
cuda_copy(void *d_dst, const void *d_src, size_t bytes, cbllm_err *err)
{
	int			rc = Check(cudaMemcpy(d_dst, d_src, bytes, cudaMemcpyDeviceToDevice), "copy", err);

	return rc ? rc : Check(cudaStreamSynchronize(0), "copy", err);
}

extern "C" int
cuda_copy_async(void *dst, const void *src, size_t bytes, cuda_stream s, cbllm_err *err)
{
	if (bytes == 0)
		return CBLLM_OK;
	return Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s), "asynchronous copy", err);
}

extern "C" int
cuda_copy_2d_async(void *dst, size_t dst_pitch, const void *src, size_t src_pitch, size_t width,
				   size_t rows, cuda_stream s, cbllm_err *err)
{
	if (width == 0 || rows == 0)
		return CBLLM_OK;
	return Check(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows, cudaMemcpyDefault,
								   s), "asynchronous 2-D copy", err);
}

extern "C" int
cuda_stream_create(cuda_stream *s, cbllm_err *err)
{
	return Check(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking), "stream creation", err);
}

extern "C" void
cuda_stream_destroy(cuda_stream s)
{
	if (s != NULL)
		(void) cudaStreamDestroy(s);
}

extern "C" int
cuda_stream_sync(cuda_stream s, cbllm_err *err)
{
	return Check(cudaStreamSynchronize(s), "stream synchronisation", err);
}

extern "C" int
cuda_event_create(cuda_event *e, cbllm_err *err)
{
	return Check(cudaEventCreateWithFlags(e, cudaEventDisableTiming), "event creation", err);
}

extern "C" void
cuda_event_destroy(cuda_event e)
{
	if (e != NULL)
		(void) cudaEventDestroy(e);
}

extern "C" int
cuda_event_record(cuda_event e, cuda_stream s, cbllm_err *err)
{
	return Check(cudaEventRecord(e, s), "event record", err);
}

extern "C" int
cuda_stream_wait(cuda_stream s, cuda_event e, cbllm_err *err)
{
	return Check(cudaStreamWaitEvent(s, e, 0), "stream wait", err);
}

extern "C" int
cuda_event_sync(cuda_event e, cbllm_err *err)
{
	return Check(cudaEventSynchronize(e), "event synchronisation", err);
}

extern "C" int
cuda_capture_begin(cuda_stream s, cbllm_err *err)
{
	return Check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "graph capture", err);
}

extern "C" int
cuda_capture_end(cuda_stream s, cuda_graph *g, cbllm_err *err)
{
	cudaGraph_t graph = NULL;
	cudaGraphExec_t exec = NULL;
	int			rc = Check(cudaStreamEndCapture(s, &graph), "end of graph capture", err);

	if (rc == CBLLM_OK)
		rc = Check(cudaGraphInstantiate(&exec, graph, 0), "graph instantiation", err);
	if (graph != NULL)
		(void) cudaGraphDestroy(graph);
	*g = rc == CBLLM_OK ? exec : NULL;
	return rc;
}

extern "C" int
cuda_graph_launch(cuda_graph g, cuda_stream s, cbllm_err *err)
{
	return Check(cudaGraphLaunch(g, s), "graph launch", err);
}

extern "C" void
cuda_graph_destroy(cuda_graph g)
{
	if (g != NULL)
		(void) cudaGraphExecDestroy(g);
}

static int
CmpFloat(const void *a, const void *b)
{
	float		x = *(const float *) a,
				y = *(const float *) b;

	return (x > y) - (x < y);
}

extern "C" int
cuda_copy_bandwidth(size_t bytes, int iters, double *gbps, cbllm_err *err)
{
	void	   *a = NULL,
			   *b = NULL;
	cudaEvent_t e0 = NULL,
				e1 = NULL;
	float	   *ms;
	int			rc;

	iters = iters > 0 ? iters : 1;
	ms = (float *) calloc(iters, sizeof(float));
	if (ms == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	if ((rc = cuda_alloc(&a, bytes, err)) == CBLLM_OK && (rc = cuda_alloc(&b, bytes, err)) == CBLLM_OK &&
		(rc = Check(cudaEventCreate(&e0), "event creation", err)) == CBLLM_OK &&
		(rc = Check(cudaEventCreate(&e1), "event creation", err)) == CBLLM_OK &&
		(rc = Check(cudaMemset(a, 1, bytes), "memset", err)) == CBLLM_OK &&
		(rc = cuda_copy(b, a, bytes, err)) == CBLLM_OK)	/* warm-up */
	{
		for (int i = 0; i < iters && rc == CBLLM_OK; i++)
		{
			rc = Check(cudaEventRecord(e0, 0), "event record", err);
			if (rc == CBLLM_OK)
				rc = Check(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, 0), "copy", err);
			if (rc == CBLLM_OK)
				rc = Check(cudaEventRecord(e1, 0), "event record", err);
			if (rc == CBLLM_OK)
				rc = Check(cudaEventSynchronize(e1), "event synchronisation", err);
			if (rc == CBLLM_OK)
				rc = Check(cudaEventElapsedTime(&ms[i], e0, e1), "event timing", err);
		}
		if (rc == CBLLM_OK)
		{
			qsort(ms, iters, sizeof(float), CmpFloat);
			*gbps = 2.0 * bytes / (ms[iters / 2] * 1e-3) / 1e9;
		}
	}
	if (e0 != NULL)
		(void) cudaEventDestroy(e0);
	if (e1 != NULL)
		(void) cudaEventDestroy(e1);
	cuda_free(a);
	cuda_free(b);
	free(ms);
	return rc;
}
