/*
 * test_join_names: base/join_names.h, the one joiner of names into prose
 * ("A, B and C") used by the messages that list dtypes, architectures and
 * devices: each count of names, the quotes, and a buffer too short.
 */
#include <string.h>

#include "base/join_names.h"
#include "tap.h"

static void
CheckJoin(const char *const *names, int n, const char *conj, const char *quote,
		  const char *want)
{
	char		buf[128];

	memset(buf, 'x', sizeof(buf));
	cbllm_join_names(buf, sizeof(buf), names, n, conj, quote);
	TAP_OK(strcmp(buf, want) == 0, "%d name(s), \"%s\", quote '%s' give \"%s\" (got \"%s\")",
		   n, conj, quote, want, buf);
}

int
main(void)
{
	const char *three[] = {"float32", "bfloat16", "float16"};
	const char *devs[] = {"cpu", "cuda", "auto"};
	char		small[10];
	char		none[1] = {'x'};

	CheckJoin(three, 0, "and", "", "");
	CheckJoin(three, 1, "and", "", "float32");
	CheckJoin(three, 2, "and", "", "float32 and bfloat16");
	CheckJoin(three, 3, "and", "", "float32, bfloat16 and float16");
	CheckJoin(devs, 3, "or", "\"", "\"cpu\", \"cuda\" or \"auto\"");

	memset(small, 'x', sizeof(small));
	cbllm_join_names(small, sizeof(small), three, 3, "and", "");
	TAP_OK(strcmp(small, "float32, ") == 0,
		   "a buffer too short is cut as snprintf cuts and terminated (got \"%s\")", small);

	cbllm_join_names(none, 0, three, 3, "and", "");
	TAP_OK(none[0] == 'x', "a buffer of length 0 is left alone");
	return tap_done();
}
