/*
 * join_names.h: a list of names as prose for messages, "A, B and C" or
 * "\"cpu\" or \"auto\"": the one joiner of the types safetensors names, the
 * architectures cbllm runs and the devices a backend may take.
 */
#ifndef CBLLM_JOIN_NAMES_H
#define CBLLM_JOIN_NAMES_H

#include <stddef.h>

#ifdef __cplusplus
extern "C"
{
#endif

/*
 * Into buf (len bytes), names[0, n) in order, each between two quotes (""
 * for none), joined by ", " and, before the last, by " conjunction "
 * ("and", "or").  Cut at the buffer's end as snprintf cuts, always
 * terminated; nothing is written when len is 0.
 */
void		cbllm_join_names(char *buf, size_t len, const char *const *names, int n,
							 const char *conjunction, const char *quote);

#ifdef __cplusplus
}
#endif

#endif
