/*
 * json_schema_format.c: the patterns of the string formats a JSON Schema
 * may name (date, time, date-time, uuid, ipv4, email), exact as
 * json_schema.c's opening comment says: month lengths and leap years,
 * RFC 3339 times, dotted decimals without a leading zero.
 */
#include "constrain/json_schema_internal.h"

#include <string.h>

/* the formats */
#define RE_YEAR "(?:[0-9]{3}[1-9]|[0-9]{2}[1-9]0|[0-9][1-9]00|[1-9]000)"
#define RE_LEAP_YEAR "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)"
#define RE_MONTH_DAY "(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])" \
	"|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))"
#define RE_DATE "(?:" RE_YEAR "-" RE_MONTH_DAY "|" RE_LEAP_YEAR "-02-29)"
#define RE_HOUR_MIN "(?:[01][0-9]|2[0-3]):[0-5][0-9]"
#define RE_TIME RE_HOUR_MIN ":[0-5][0-9](?:\\.[0-9]{1,9})?(?:Z|[+-]" RE_HOUR_MIN ")"
#define RE_HEX "[0-9a-fA-F]"
#define RE_UUID RE_HEX "{8}-" RE_HEX "{4}-" RE_HEX "{4}-" RE_HEX "{4}-" RE_HEX "{12}"
#define RE_OCTET "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9][0-9]|[0-9])"
#define RE_IPV4 RE_OCTET "\\." RE_OCTET "\\." RE_OCTET "\\." RE_OCTET
#define RE_EMAIL "[A-Za-z0-9_%+-]+(?:\\.[A-Za-z0-9_%+-]+)*@" \
	"(?:[A-Za-z0-9]+(?:-+[A-Za-z0-9]+)*\\.)+[A-Za-z]{2,}"

/* Append a string of a format. */
int
js_gen_format(js_ctx *c, const char *name, cbllm_buf *out)
{
	static const char *const formats[][2] = {
		{"date", RE_DATE}, {"time", RE_TIME}, {"date-time", RE_DATE "T" RE_TIME},
		{"uuid", RE_UUID}, {"ipv4", RE_IPV4}, {"email", RE_EMAIL},
	};

	for (size_t i = 0; i < sizeof(formats) / sizeof(formats[0]); i++)
		if (strcmp(formats[i][0], name) == 0)
		{
			int			rc = js_emits(c, out, "\"(?:");

			if (rc == CBLLM_OK)
				rc = js_emits(c, out, formats[i][1]);
			return rc != CBLLM_OK ? rc : js_emits(c, out, ")\"");
		}
	return js_fail(c, CBLLM_ERR_UNSUPPORTED, "unsupported format \"%s\"", name);
}
