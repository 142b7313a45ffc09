/*
 * test_utf8.c: the engine's one UTF-8 decoder and encoder (base/utf8.h).
 * Named edge cases first: the boundaries of each length, overlong forms,
 * surrogates, code points above U+10FFFF, truncated characters, stray and
 * missing continuation bytes, prefixes of a character still arriving, and
 * the first bad offset of a string.  Then every sequence of one to three
 * bytes, and every four-byte one of a lead F0..FF with a spread of later
 * bytes, against utf8proc's decoder (an implementation of its own); and
 * every scalar value encoded, against utf8proc's encoder, and read back.
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <utf8proc.h>

#include "base/utf8.h"
#include "tap.h"

/* Whether s[0..n) (a C literal) decodes as one character of len bytes and code point cp. */
static bool
Decodes(const char *s, size_t n, int len, uint32_t cp)
{
	uint32_t	got = 0xFFFFFFFF;
	int			k = utf8_decode(s, n, &got);

	if (k != len || got != cp || utf8_len(s, n) != len)
		TAP_DIAG("decoding %zu bytes: length %d (want %d), U+%04X (want U+%04X)", n, k, len,
				 (unsigned) got, (unsigned) cp);
	return k == len && got == cp && utf8_len(s, n) == len;
}

/* Whether no character starts s[0..n), and utf8_decode leaves *cp as it was. */
static bool
Refused(const char *s, size_t n)
{
	uint32_t	got = 0x5EED;

	return utf8_decode(s, n, &got) == 0 && got == 0x5EED && utf8_len(s, n) == 0;
}

/* The boundaries of each encoded length decode to their code points. */
static void
TestBoundaries(void)
{
	TAP_OK(Decodes("\x00", 1, 1, 0) && Decodes("A", 1, 1, 'A') && Decodes("\x7F", 1, 1, 0x7F),
		   "U+0000, 'A' and U+007F are one byte each");
	TAP_OK(Decodes("\xC2\x80", 2, 2, 0x80) && Decodes("\xC3\xA9", 2, 2, 0xE9) &&
		   Decodes("\xDF\xBF", 2, 2, 0x7FF), "U+0080, U+00E9 and U+07FF are two bytes");
	TAP_OK(Decodes("\xE0\xA0\x80", 3, 3, 0x800) && Decodes("\xE2\x82\xAC", 3, 3, 0x20AC) &&
		   Decodes("\xEF\xBF\xBF", 3, 3, 0xFFFF), "U+0800, U+20AC and U+FFFF are three bytes");
	TAP_OK(Decodes("\xED\x9F\xBF", 3, 3, 0xD7FF) && Decodes("\xEE\x80\x80", 3, 3, 0xE000),
		   "U+D7FF and U+E000, either side of the surrogates, decode");
	TAP_OK(Decodes("\xF0\x90\x80\x80", 4, 4, 0x10000) && Decodes("\xF0\x9F\x98\x80", 4, 4, 0x1F600) &&
		   Decodes("\xF4\x8F\xBF\xBF", 4, 4, 0x10FFFF), "U+10000, U+1F600 and U+10FFFF are four bytes");
	TAP_OK(Decodes("\xC3\xA9xyz", 5, 2, 0xE9) && Decodes("a\xFF", 2, 1, 'a'),
		   "a character followed by more bytes decodes alone, whatever follows");
}

/* What is not a character is refused. */
static void
TestRefused(void)
{
	TAP_OK(Refused("\xC0\x80", 2) && Refused("\xC1\xBF", 2) && Refused("\xE0\x80\x80", 3) &&
		   Refused("\xE0\x9F\xBF", 3) && Refused("\xF0\x80\x80\x80", 4) &&
		   Refused("\xF0\x8F\xBF\xBF", 4) && Refused("\xC0\xAF", 2),
		   "overlong forms (C0 80 for U+0000, C0 AF for '/', E0 9F BF, F0 8F BF BF) are refused");
	TAP_OK(Refused("\xED\xA0\x80", 3) && Refused("\xED\xAF\xBF", 3) && Refused("\xED\xB0\x80", 3) &&
		   Refused("\xED\xBF\xBF", 3) && Refused("\xED\xA0\xBD\xED\xB8\x80", 6),
		   "surrogates U+D800..U+DFFF are refused, a pair of them (CESU-8) too");
	TAP_OK(Refused("\xF4\x90\x80\x80", 4) && Refused("\xF5\x80\x80\x80", 4) &&
		   Refused("\xF7\xBF\xBF\xBF", 4) && Refused("\xF8\x88\x80\x80\x80", 5) &&
		   Refused("\xFE", 1) && Refused("\xFF", 1),
		   "code points above U+10FFFF (F4 90 80 80, F5.., F8..) and the bytes FE, FF are refused");
	TAP_OK(Refused("", 0) && Refused("\xC3", 1) && Refused("\xE2\x82", 2) && Refused("\xF0\x9F\x98", 3) &&
		   Refused("\xE2\x82\xAC", 2),
		   "a character cut short is refused: nothing, C3, E2 82, F0 9F 98, and E2 82 AC read as 2 bytes");
	TAP_OK(Refused("\x80", 1) && Refused("\xBF", 1) && Refused("\xBF" "A", 2),
		   "a stray continuation byte starts no character");
	TAP_OK(Refused("\xC3(", 2) && Refused("\xE2(\xA1", 3) && Refused("\xE2\x82(", 3) &&
		   Refused("\xF0\x9F\x98(", 4) && Refused("\xC3\xC3\xA9", 3),
		   "a lead byte without its continuation bytes is refused");
}

/* utf8_prefix says how long a character still arriving will be, or that it cannot be one. */
static void
TestPrefix(void)
{
	const uint8_t euro[] = {0xE2, 0x82, 0xAC, 0x20},
				emoji[] = {0xF0, 0x9F, 0x98, 0x80},
				bad[][2] = {{0xE0, 0x9F}, {0xED, 0xA0}, {0xF0, 0x8F}, {0xF4, 0x90}, {0xC0, 0x80},
	{0xE2, 0x28}};
	bool		bad_ok = true;

	TAP_OK(utf8_prefix(euro, 1) == 3 && utf8_prefix(euro, 2) == 3 && utf8_prefix(euro, 3) == 3 &&
		   utf8_prefix(euro, 4) == 0,
		   "E2, E2 82 and E2 82 AC are a 3-byte character arriving; a fourth byte is past its end");
	TAP_OK(utf8_prefix(emoji, 1) == 4 && utf8_prefix(emoji, 3) == 4 && utf8_prefix(emoji, 4) == 4,
		   "F0 9F 98 80 arriving is 4 bytes long from its first byte");
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		bad_ok = bad_ok && utf8_prefix(bad[i], 2) == 0;
	TAP_OK(bad_ok && utf8_prefix((const uint8_t *) "\x80", 1) == 0 &&
		   utf8_prefix((const uint8_t *) "\xF5", 1) == 0,
		   "a prefix no character continues is 0 at once: E0 9F, ED A0, F0 8F, F4 90, C0, E2 28, 80, F5");
}

/* utf8_valid_prefix finds the first byte that starts no character; utf8_is_cont the continuation bytes. */
static void
TestStrings(void)
{
	const char	s[] = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80z";
	bool		cont = true;

	TAP_OK(utf8_valid_prefix(s, sizeof(s) - 1) == sizeof(s) - 1 && utf8_valid(s, sizeof(s) - 1) &&
		   utf8_valid("", 0), "a string of 1-, 2-, 3- and 4-byte characters is valid, and so is nothing");
	TAP_OK(utf8_valid_prefix("a\xC3\xA9\xE2\x82", 5) == 3 && utf8_valid_prefix("ab\xFF", 3) == 2 &&
		   utf8_valid_prefix("\xED\xA0\x80x", 4) == 0 && !utf8_valid("ab\xFF", 3),
		   "the first bad offset: 3 in a\\xC3\\xA9\\xE2\\x82 (cut short), 2 in ab\\xFF, 0 for a surrogate");
	TAP_OK(utf8_valid_prefix("ab", 1) == 1, "only the n bytes given are read");
	for (int b = 0; b < 256; b++)
		cont = cont && utf8_is_cont((uint8_t) b) == (b >= 0x80 && b <= 0xBF);
	TAP_OK(cont, "utf8_is_cont holds for 80..BF and no other byte");
}

/* Whether utf8_decode and utf8proc agree on s[0..n). */
static bool
AgreesWithUtf8proc(const uint8_t *s, size_t n)
{
	utf8proc_int32_t ref = -1;
	utf8proc_ssize_t k = utf8proc_iterate(s, (utf8proc_ssize_t) n, &ref);
	uint32_t	cp = 0;
	int			len = utf8_decode((const char *) s, n, &cp);

	if (k <= 0)
		return len == 0;
	return len == k && cp == (uint32_t) ref;
}

/* Every 1-, 2- and 3-byte sequence, and 4-byte ones of every lead F0..FF, decode as utf8proc reads them. */
static void
TestAgainstUtf8proc(void)
{
	static const uint8_t later[] = {0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC2, 0xFF};
	long		bad = 0,
				valid = 0;

	for (uint32_t x = 0; x < (1u << 24); x++)
	{
		uint8_t		s[3] = {(uint8_t) (x >> 16), (uint8_t) (x >> 8), (uint8_t) x};

		if (!AgreesWithUtf8proc(s, 3) || (x < (1u << 16) && !AgreesWithUtf8proc(s + 1, 2)) ||
			(x < 256 && !AgreesWithUtf8proc(s + 2, 1)))
			bad++;
		valid += utf8_len((const char *) s, 3) == 3;
	}
	TAP_OK(bad == 0 && valid == 0xFFFF - 0x800 + 1 - 0x800,
		   "all 16.8M 3-byte sequences (and every 1- and 2-byte one) decode as utf8proc's: %ld differ, "
		   "%ld are one 3-byte character", bad, valid);
	bad = valid = 0;
	for (int lead = 0xF0; lead <= 0xFF; lead++)
		for (int b1 = 0; b1 < 256; b1++)
			for (size_t b2 = 0; b2 < sizeof(later); b2++)
				for (size_t b3 = 0; b3 < sizeof(later); b3++)
				{
					uint8_t		s[4] = {(uint8_t) lead, (uint8_t) b1, later[b2], later[b3]};

					for (size_t n = 1; n <= 4; n++)
						bad += !AgreesWithUtf8proc(s, n);
					valid += utf8_len((const char *) s, 4) == 4;
				}
	TAP_OK(bad == 0 && valid > 0,
		   "4-byte sequences of every lead F0..FF, every second byte and a spread of later ones, whole "
		   "and cut short, decode as utf8proc's: %ld differ (%ld characters among them)", bad, valid);
}

/* Every scalar value encodes as utf8proc encodes it and decodes back; a surrogate encodes but never decodes. */
static void
TestEncode(void)
{
	long		bad = 0;
	char		b[UTF8_MAX_LEN];
	uint8_t		ref[UTF8_MAX_LEN];
	uint32_t	cp = 0;

	for (uint32_t c = 0; c <= UTF8_MAX_CP; c++)
	{
		int			n = utf8_encode(c, b);

		if (c >= 0xD800 && c <= 0xDFFF)
		{
			bad += n != 3 || utf8_len(b, 3) != 0;
			continue;
		}
		bad += n != (int) utf8proc_encode_char((utf8proc_int32_t) c, ref) || memcmp(b, ref, (size_t) n) != 0 ||
			utf8_decode(b, (size_t) n, &cp) != n || cp != c || utf8_len(b, (size_t) n - 1) != 0;
	}
	TAP_OK(bad == 0, "all 1,112,064 scalar values encode as utf8proc's, read back whole, and not cut short; "
		   "surrogates encode to 3 bytes that do not decode (%ld wrong)", bad);
}

int
main(void)
{
	TestBoundaries();
	TestRefused();
	TestPrefix();
	TestStrings();
	TestAgainstUtf8proc();
	TestEncode();
	return tap_done();
}
