/* join_names.c: names joined as prose for messages (join_names.h). */
#include "base/join_names.h"

#include <stdbool.h>
#include <stdio.h>

/* Each name after its separator, until the names or the buffer run out. */
void
cbllm_join_names(char *buf, size_t len, const char *const *names, int n,
				 const char *conjunction, const char *quote)
{
	size_t		used = 0;

	if (len == 0)
		return;
	buf[0] = '\0';
	for (int i = 0; i < n && used < len; i++)
	{
		bool		last = i > 0 && i == n - 1;
		int			w = snprintf(buf + used, len - used, "%s%s%s%s%s%s",
								 i == 0 ? "" : last ? " " : ", ", last ? conjunction : "",
								 last ? " " : "", quote, names[i], quote);

		if (w < 0)
			return;
		used += (size_t) w;
	}
}
