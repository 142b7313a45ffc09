/*
 * request_kind.h: what a request asks of the engine, and how many stop
 * strings it may have: facts the PostgreSQL side, the engine process and
 * the engine API all read (request_params.h, ipc.h, cbllm.h).
 */
#ifndef CBLLM_REQUEST_KIND_H
#define CBLLM_REQUEST_KIND_H

/* What a request asks of the engine. */
typedef enum cbllm_request_kind
{
	CBLLM_REQ_GENERATE = 0,		/* prompt text in, text pieces out */
	CBLLM_REQ_TOKENIZE,			/* text in, int32 token ids out (as the engine reads a prompt) */
	CBLLM_REQ_TOKEN_COUNT,		/* text in, one int32 count out */
	CBLLM_REQ_DETOKENIZE		/* int32 token ids in, text out */
} cbllm_request_kind;

#define CBLLM_MAX_STOP 8		/* stop strings of one request */

#endif
