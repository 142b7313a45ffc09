/*
 * utf8.h: UTF-8, defined once for the whole engine: which byte sequences
 * are characters, decoding one, encoding a code point, checking a string.
 *
 * A character is well-formed as Unicode's table of well-formed byte
 * sequences (The Unicode Standard, table 3-7) says: its shortest form only
 * (no overlong C0 80 for U+0000), no surrogate (U+D800..U+DFFF, ED A0..BF),
 * nothing above U+10FFFF (F4 90.., F5..FF).  The lead byte gives the length
 * and the second byte's range is the only one that depends on it:
 *
 *   lead      length   second byte
 *   00..7F    1        -
 *   C2..DF    2        80..BF
 *   E0        3        A0..BF
 *   E1..EC    3        80..BF
 *   ED        3        80..9F
 *   EE..EF    3        80..BF
 *   F0        4        90..BF
 *   F1..F3    4        80..BF
 *   F4        4        80..8F
 *
 * and every later byte is 80..BF.  The functions read only the bytes they
 * are given (a truncated character is not one).  What to do with bytes that
 * are not UTF-8 (refuse the text, write U+FFFD, let a byte stand for itself)
 * is each caller's choice.
 */
#ifndef CBLLM_UTF8_H
#define CBLLM_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define UTF8_MAX_LEN 4			/* bytes of the longest character */
#define UTF8_MAX_CP 0x10FFFF	/* the largest code point */

/* Whether byte b continues a character (10xxxxxx): never the first byte of one. */
static inline bool
utf8_is_cont(uint8_t b)
{
	return (b & 0xC0) == 0x80;
}

/*
 * Whether p[0..n) (1 <= n) is the start of a well-formed character: its
 * whole length (1 to 4) when it is, 0 when no character starts so (and
 * when n is more than the character's length).
 */
static inline int
utf8_prefix(const uint8_t *p, int n)
{
	int			need = p[0] < 0x80 ? 1 : p[0] < 0xC2 ? 0 : p[0] < 0xE0 ? 2 :
		p[0] < 0xF0 ? 3 : p[0] < 0xF5 ? 4 : 0;

	if (need == 0 || n > need)
		return 0;
	for (int i = 1; i < n; i++)
	{
		uint8_t		lo = 0x80, hi = 0xBF;

		if (i == 1 && p[0] == 0xE0)
			lo = 0xA0;			/* no overlong forms */
		else if (i == 1 && p[0] == 0xED)
			hi = 0x9F;			/* no surrogates */
		else if (i == 1 && p[0] == 0xF0)
			lo = 0x90;
		else if (i == 1 && p[0] == 0xF4)
			hi = 0x8F;			/* nothing above U+10FFFF */
		if (p[i] < lo || p[i] > hi)
			return 0;
	}
	return need;
}

/*
 * The length (1 to 4) of the well-formed character at s[0..n), or 0 when
 * s[0..n) does not start with one (n is 0, a byte is wrong, or the
 * character is cut short).
 */
static inline int
utf8_len(const char *s, size_t n)
{
	const uint8_t *p = (const uint8_t *) s;
	int			need = n > 0 ? utf8_prefix(p, 1) : 0;

	return need > 0 && (size_t) need <= n && utf8_prefix(p, need) == need ? need : 0;
}

/* utf8_len, with the character's code point in *cp (left as it was when 0). */
static inline int
utf8_decode(const char *s, size_t n, uint32_t *cp)
{
	const uint8_t *p = (const uint8_t *) s;
	int			len = utf8_len(s, n);
	uint32_t	c;

	if (len == 0)
		return 0;
	c = len == 1 ? p[0] : p[0] & (0x7Fu >> len);
	for (int i = 1; i < len; i++)
		c = c << 6 | (p[i] & 0x3Fu);
	*cp = c;
	return len;
}

/*
 * Encode code point cp (at most U+10FFFF) into out[0..4): the bytes
 * written, 1 to 4.  A surrogate is written as its three bytes (which no
 * decoder here reads back).
 */
static inline int
utf8_encode(uint32_t cp, char *out)
{
	if (cp < 0x80)
		return out[0] = (char) cp, 1;
	if (cp < 0x800)
	{
		out[0] = (char) (0xC0 | cp >> 6);
		out[1] = (char) (0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000)
	{
		out[0] = (char) (0xE0 | cp >> 12);
		out[1] = (char) (0x80 | (cp >> 6 & 0x3F));
		out[2] = (char) (0x80 | (cp & 0x3F));
		return 3;
	}
	out[0] = (char) (0xF0 | cp >> 18);
	out[1] = (char) (0x80 | (cp >> 12 & 0x3F));
	out[2] = (char) (0x80 | (cp >> 6 & 0x3F));
	out[3] = (char) (0x80 | (cp & 0x3F));
	return 4;
}

/* The offset of the first byte of s[0..n) that does not start a well-formed character, or n. */
static inline size_t
utf8_valid_prefix(const char *s, size_t n)
{
	size_t		i = 0;
	int			k;

	while (i < n && (k = utf8_len(s + i, n - i)) > 0)
		i += (size_t) k;
	return i;
}

/* Whether s[0..n) is well-formed UTF-8 throughout. */
static inline bool
utf8_valid(const char *s, size_t n)
{
	return utf8_valid_prefix(s, n) == n;
}

#endif
