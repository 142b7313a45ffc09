/*
 * sql_text.c: text between the database and the model.  The model reads and
 * writes UTF-8; a database may use any server encoding.  Every SQL function
 * converts its text arguments with CbllmTextToModel and its text results
 * with CbllmTextFromModel, so generation, tokenization and counting all see
 * the same bytes.
 *
 *   into the model: converted strictly (a character with no UTF-8 form is an
 *     error); in a SQL_ASCII database the bytes must already be UTF-8.
 *   out of the model: a NUL byte or an invalid UTF-8 sequence becomes
 *     U+FFFD; a character the database encoding cannot hold becomes '?'.
 */
#include "cbllm_pg.h"

#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "mb/pg_wchar.h"
#include "utils/array.h"
#include "utils/builtins.h"

/*
 * len bytes of server-encoded text as UTF-8 (s itself when no conversion is
 * needed).  On failure returns NULL with the reason in errmsg_out.
 */
char *
CbllmTextToModel(const char *s, int len, int *out_len, char *errmsg_out)
{
	int			enc = GetDatabaseEncoding();
	Oid			proc;
	unsigned char *dst;
	int			done;

	*out_len = len;
	if (enc == PG_UTF8)
		return (char *) s;		/* the server has validated it */
	if (enc == PG_SQL_ASCII)
	{
		if (!pg_verify_mbstr(PG_UTF8, s, len, true))
		{
			strlcpy(errmsg_out, "the text is not valid UTF-8 (in a SQL_ASCII database the model reads the bytes as UTF-8)",
					CBLLM_ERROR_LEN);
			return NULL;
		}
		return (char *) s;
	}
	proc = FindDefaultConversionProc(enc, PG_UTF8);
	if (!OidIsValid(proc))
	{
		snprintf(errmsg_out, CBLLM_ERROR_LEN, "no conversion from %s to UTF8", GetDatabaseEncodingName());
		return NULL;
	}
	dst = palloc((Size) len * MAX_CONVERSION_GROWTH + 1);
	done = pg_do_encoding_conversion_buf(proc, enc, PG_UTF8, (unsigned char *) s, len, dst,
										 len * MAX_CONVERSION_GROWTH + 1, true);
	if (done < len)
	{
		snprintf(errmsg_out, CBLLM_ERROR_LEN, "the character at byte %d has no UTF-8 equivalent", done + 1);
		pfree(dst);
		return NULL;
	}
	*out_len = strlen((char *) dst);
	return (char *) dst;
}

/* A text argument as UTF-8, or an error. */
char *
CbllmTextToModelOrError(text *t, int *out_len)
{
	char		msg[CBLLM_ERROR_LEN];
	char	   *s = CbllmTextToModel(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t), out_len, msg);

	if (s == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_CHARACTER_NOT_IN_REPERTOIRE),
				 errmsg("cannot pass the text to the model: %s", msg)));
	return s;
}

/*
 * The strings of a one-dimensional text array in UTF-8, as CbllmTextToModel
 * makes them: *strs and *lens (palloc'd) hold them, and the element count is
 * returned.  what names the argument in the error for more dimensions ("stop
 * must be a one-dimensional text array"); a NULL element is the error
 * null_msg.  An array of more than max elements is counted but not read
 * (*strs and *lens NULL), so that the caller refuses the count first.
 */
int
CbllmTextArrayToModel(ArrayType *arr, const char *what, const char *null_msg, int max,
					  char ***strs, int **lens)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n;

	*strs = NULL;
	*lens = NULL;
	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a one-dimensional text array", what)));
	deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	if (n > max || n == 0)
		return n;
	*strs = palloc(sizeof(char *) * n);
	*lens = palloc(sizeof(int) * n);
	for (int k = 0; k < n; k++)
	{
		if (nulls[k])
			ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("%s", null_msg)));
		(*strs)[k] = CbllmTextToModelOrError(DatumGetTextPP(elems[k]), &(*lens)[k]);
	}
	return n;
}

/* UTF-8 from the model with every NUL and invalid sequence replaced by U+FFFD. */
static char *
Sanitize(const char *s, int len, int *out_len)
{
	StringInfoData b;
	int			i = 0;

	initStringInfo(&b);
	while (i < len)
	{
		unsigned char c = (unsigned char) s[i];
		int			n = c < 0x80 ? 1 : pg_utf_mblen((const unsigned char *) s + i);

		if (c == 0 || i + n > len || (n > 1 && !pg_utf8_islegal((const unsigned char *) s + i, n)))
		{
			appendBinaryStringInfo(&b, "\xEF\xBF\xBD", 3);
			i += 1;
			continue;
		}
		appendBinaryStringInfo(&b, s + i, n);
		i += n;
	}
	*out_len = b.len;
	return b.data;
}

/* UTF-8 text from the model as a text value in the database encoding. */
text *
CbllmTextFromModel(const char *s, int len)
{
	int			enc = GetDatabaseEncoding();
	int			n;
	char	   *clean = Sanitize(s, len, &n);
	Oid			proc;
	StringInfoData out;
	unsigned char *dst;
	int			pos = 0;
	text	   *result;

	if (enc == PG_UTF8 || enc == PG_SQL_ASCII)
	{
		result = cstring_to_text_with_len(clean, n);
		pfree(clean);
		return result;
	}
	proc = FindDefaultConversionProc(PG_UTF8, enc);
	if (!OidIsValid(proc))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_FUNCTION),
				 errmsg("no conversion from UTF8 to %s", GetDatabaseEncodingName())));
	initStringInfo(&out);
	dst = palloc((Size) n * MAX_CONVERSION_GROWTH + 1);
	while (pos < n)
	{
		int			done = pg_do_encoding_conversion_buf(proc, PG_UTF8, enc,
														 (unsigned char *) clean + pos, n - pos,
														 dst, (n - pos) * MAX_CONVERSION_GROWTH + 1,
														 true);

		appendStringInfoString(&out, (char *) dst);
		pos += done;
		if (pos < n)
		{
			/* a character this encoding cannot hold */
			appendStringInfoChar(&out, '?');
			pos += pg_utf_mblen((const unsigned char *) clean + pos);
		}
	}
	result = cstring_to_text_with_len(out.data, out.len);
	pfree(dst);
	pfree(out.data);
	pfree(clean);
	return result;
}
