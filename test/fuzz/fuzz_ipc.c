/*
 * fuzz_ipc.c: the frames of the channel between the supervisor and the
 * engine process, as either side decodes what the other wrote (a side that
 * died mid-write or is corrupt must never make the reader misbehave).  The
 * input is laid out as a ring's raw state: 8 bytes of head, 8 of tail, then
 * the data bytes; the harness takes every message the ring yields and runs
 * the checks each side applies before it uses one.  Promised: a message
 * handed out lies within the bytes written, its length is at least its
 * header, the tail advances by it exactly, and a command or event that the
 * checks accept has lengths that add up to its payload; an accepted
 * generation command translates to the engine's sampling (no conversion out
 * of range, no read outside the message).
 */
#include "fuzz.h"
#include "ipc/ipc.h"

#define RING_CAP 4096
#define N_SLOTS 8

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static _Alignas(64) char mem[sizeof(cbllm_ring) + RING_CAP];
	static char msg[RING_CAP];
	cbllm_ring *r = (cbllm_ring *) mem;
	uint64_t	head,
				tail;

	if (size < 16)
		return 0;
	memcpy(&head, data, 8);
	memcpy(&tail, data + 8, 8);
	cbllm_ring_init(r, RING_CAP);
	memset(mem + sizeof(cbllm_ring), 0, RING_CAP);
	memcpy(mem + sizeof(cbllm_ring), data + 16, size - 16 < RING_CAP ? size - 16 : RING_CAP);
	atomic_store(&r->head, head);
	atomic_store(&r->tail, tail);

	for (int n = 0; n < 1000; n++)
	{
		uint64_t	t0 = atomic_load(&r->tail);
		uint32_t	type;
		size_t		len;
		int			got = cbllm_ring_get(r, msg, sizeof(msg), &type, &len);
		const char *payload = msg + sizeof(cbllm_msg_header);
		size_t		plen;

		if (got <= 0)
			break;
		FUZZ_CHECK(len >= sizeof(cbllm_msg_header) && len <= sizeof(msg), "a message within bounds");
		FUZZ_CHECK(len <= head - t0, "a message within the bytes written");
		FUZZ_CHECK(atomic_load(&r->tail) == t0 + len, "the tail advances by the message");
		plen = len - sizeof(cbllm_msg_header);
		if (type == CBLLM_CMD_SUBMIT && plen >= sizeof(cbllm_cmd_submit))
		{
			cbllm_cmd_submit c;

			memcpy(&c, payload, sizeof(c));
			if (cbllm_cmd_submit_check(&c, plen, N_SLOTS) == NULL)
			{
				int64_t		sum = c.params.prompt_len;

				for (int k = 0; k < c.params.n_stop; k++)
					sum += c.params.stop_len[k];
				sum += c.params.constraint_len + (int64_t) c.params.n_bias * 8;	/* id and bias */
				FUZZ_CHECK(c.slot >= 0 && c.slot < N_SLOTS && c.params.n_stop >= 0 &&
						   c.params.n_stop <= CBLLM_MAX_STOP, "an accepted submit names a slot");
				FUZZ_CHECK((size_t) sum + sizeof(c) == plen, "an accepted submit's lengths add up");
				if (CBLLM_KIND_GENERATES(c.params.kind))
				{
					cbllm_request_input in;
					cbllm_sampling sp;
					char	   *held;

					/* what the engine does next: no undefined conversion, stop strings within it */
					if (cbllm_request_params_to_engine(&c.params, payload + sizeof(c), &in, &sp,
													   &held) == CBLLM_OK)
						FUZZ_CHECK(sp.n_stop == c.params.n_stop && in.text_len == (size_t) c.params.prompt_len,
								   "an accepted submit translates whole");
					free(held);
				}
			}
		}
		else if (type == CBLLM_EVT_OUTPUT && plen >= sizeof(cbllm_evt_output))
		{
			cbllm_evt_output e;

			memcpy(&e, payload, sizeof(e));
			if (cbllm_evt_output_check(&e, plen, N_SLOTS) == NULL)
				FUZZ_CHECK(e.text_len >= 0 && e.error_len >= 0 && e.logprobs_len >= 0 &&
						   sizeof(e) + (size_t) e.text_len + (size_t) e.error_len +
						   (size_t) e.logprobs_len == plen,
						   "an accepted event's lengths add up");
		}
	}
	return 0;
}
