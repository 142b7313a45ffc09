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
	CBLLM_REQ_DETOKENIZE,		/* int32 token ids in, text out */
	CBLLM_REQ_CHAT,				/* chat messages in (CBLLM_CHAT_PAYLOAD), text pieces out */
	CBLLM_REQ_RENDER			/* chat messages in, the prompt the chat template makes out */
} cbllm_request_kind;

/* Whether a request of this kind generates (and so has sampling parameters). */
#define CBLLM_KIND_GENERATES(k) ((k) == CBLLM_REQ_GENERATE || (k) == CBLLM_REQ_CHAT)

/*
 * CBLLM_CHAT_PAYLOAD: the input of CHAT and RENDER requests is two JSON texts
 * separated by one NUL byte: the messages (an array of {"role", "content",
 * ...} objects), then an object of template variables (add_generation_prompt,
 * enable_thinking, tools, ...), "{}" for none.
 */

/*
 * Sampling options a request leaves to the model: where the caller gave none,
 * the defaults of the model's generation_config.json apply (generation_config.h).
 */
#define CBLLM_DEFAULT_TEMPERATURE	(1u << 0)
#define CBLLM_DEFAULT_TOP_P			(1u << 1)
#define CBLLM_DEFAULT_TOP_K			(1u << 2)
#define CBLLM_DEFAULT_ALL			(CBLLM_DEFAULT_TEMPERATURE | CBLLM_DEFAULT_TOP_P | CBLLM_DEFAULT_TOP_K)

#define CBLLM_MAX_STOP 8		/* stop strings of one request */
#define CBLLM_MAX_LOGIT_BIAS 1024	/* logit_bias entries of one request */
#define CBLLM_MAX_TOP_LOGPROBS 20	/* alternatives reported at each generated token */
#define CBLLM_MAX_REPETITION_PENALTY 100	/* the largest repetition_penalty */
#define CBLLM_MAX_BIAS 100		/* logit_bias values lie in [-CBLLM_MAX_BIAS, CBLLM_MAX_BIAS] */
#define CBLLM_MAX_FREQ_PENALTY 2	/* frequency and presence penalties lie in [-2, 2] */

#endif
