/*
 * fuzz_safetensors_index.c: model.safetensors.index.json through
 * st_parse_index, which OpenSharded runs before opening each shard.  The
 * shard names it hands out must be plain file names (no '/', so a shard
 * stays inside the model directory), each given once.
 */
#include "fuzz.h"
#include "formats/safetensors.h"

#define MAX_SEEN 4096

typedef struct seen_names
{
	char	   *name[MAX_SEEN];
	int			n;
} seen_names;

/* Record one shard name (an st_shard_fn); fail after a few to test the early stop. */
static int
NoteShard(void *arg, const char *file, cbllm_err *err)
{
	seen_names *s = arg;

	FUZZ_CHECK(strchr(file, '/') == NULL, "a shard name holds no '/'");
	for (int i = 0; i < s->n; i++)
		FUZZ_CHECK(strcmp(s->name[i], file) != 0, "each shard is named once");
	if (s->n == MAX_SEEN || (s->name[s->n] = strdup(file)) == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	s->n++;
	if (strcmp(file, "stop.safetensors") == 0)
		return cbllm_fail(err, CBLLM_ERR_IO, "%s: cannot open", file);
	return CBLLM_OK;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char	   *text = fuzz_text(data, size);
	seen_names *s = calloc(1, sizeof(seen_names));
	cbllm_err	err;

	if (text != NULL && s != NULL)
		(void) st_parse_index(text, "model.safetensors.index.json", NoteShard, s, &err);
	for (int i = 0; s != NULL && i < s->n; i++)
		free(s->name[i]);
	free(s);
	free(text);
	return 0;
}
