/*
 * tokenizer_gguf_pre.c: the byte-level pre-tokenizers of GGUF files, by the
 * name in tokenizer.ggml.pre.
 *
 * A GGUF file names its pre-tokenizer instead of describing it; this table
 * gives each name what a tokenizer.json would say: the regexes of its Split
 * steps (run in order, each match and each gap a piece, as HuggingFace's
 * Isolated behaviour and llama.cpp's regex splitting both do, before the
 * ByteLevel step), whether NFC comes first, ignore_merges, whether a BOS is
 * added by default and the decode clean-up.  The regexes are written as
 * PCRE2 reads them in UTF mode with Unicode properties (tokenizer_pretok.c):
 * \p{L}, \p{N}, \p{P}, \p{M}, \s, (?i:...), \x{...} for characters beyond
 * ASCII.  A name that is not here is refused, naming it.
 */
#include "tokenizer/tokenizer_gguf_pre.h"

#include <string.h>

static const char *const re_llama3[] = {
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
	NULL
};
static const char *const re_qwen2[] = {
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
	NULL
};
static const char *const re_tekken[] = {
	"[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
	NULL
};
static const char *const re_gpt4o[] = {
	"[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
	NULL
};
/* GPT-2's words, after digits were split off one by one (StarCoder, SmolLM) */
static const char *const re_digits_gpt2[] = {
	"\\p{N}",
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
	NULL
};
/* llama.cpp's fallback for a BPE file without a pre-tokenizer name */
static const char *const re_default[] = {
	"[\\p{P}\\$\\+<=>\\^~\\|]+",
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
	"\\p{N}+",
	"[0-9][0-9][0-9]",
	NULL
};
/* Qwen2's, with combining marks (\p{M}) kept in words: Qwen3.5 */
static const char *const re_qwen35[] = {
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
	NULL
};
/* GPT-2's words between runs of punctuation and symbols, then digits in threes: Falcon */
static const char *const re_falcon[] = {
	"[\\p{P}\\$\\+<=>\\^~\\|`]+",
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
	"[0-9][0-9][0-9]",
	NULL
};
/* the CJK ideographs (and what lies below them from U+0800) and Hangul that DeepSeek keeps in runs */
#define RE_DEEPSEEK_CJK "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"
/* DeepSeek Coder: each line break alone, letters, punctuation, CJK runs, single digits */
static const char *const re_deepseek_coder[] = {
	"[\\r\\n]",
	"\\s?\\p{L}+",
	"\\s?\\p{P}+",
	RE_DEEPSEEK_CJK,
	"\\p{N}",
	NULL
};
/*
 * DeepSeek LLM: each line break alone, runs of cased letters (the letters
 * of categories Lu, Ll and Lt, listed as ranges so that they do not grow
 * with the regex library's Unicode version), runs of ASCII and full-width
 * punctuation, trailing spaces, CJK runs, and runs of digits.
 */
static const char *const re_deepseek_llm[] = {
	"[\\r\\n]",
	"\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}"
	"\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}"
	"\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}"
	"\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}"
	"\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}"
	"\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}"
	"\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}"
	"\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}"
	"\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}"
	"\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}"
	"\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}"
	"\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}"
	"\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}"
	"\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+",
	"\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
	"\\s+$",
	RE_DEEPSEEK_CJK,
	"\\p{N}+",
	NULL
};

/*
 * The known names.  Rows with the same regexes and flags share them; the
 * flags follow llama.cpp's defaults for the name (clean_up: its
 * clean_spaces), the regexes the models' tokenizer.json files.
 */
static const gg_pre pre_tokenizers[] = {
	{.name = "default", .regex = re_default, .clean_up = true},
	{.name = "llama-bpe", .regex = re_llama3, .ignore_merges = true, .add_bos = true, .clean_up = true},
	{.name = "llama3", .regex = re_llama3, .ignore_merges = true, .add_bos = true, .clean_up = true},
	{.name = "llama-v3", .regex = re_llama3, .ignore_merges = true, .add_bos = true, .clean_up = true},
	{.name = "falcon3", .regex = re_llama3, .ignore_merges = true, .add_bos = true, .clean_up = true},
	{.name = "pixtral", .regex = re_llama3, .ignore_merges = true, .add_bos = true, .clean_up = true},
	{.name = "dbrx", .regex = re_llama3, .clean_up = true},
	{.name = "smaug-bpe", .regex = re_llama3, .clean_up = true},
	{.name = "qwen2", .regex = re_qwen2, .nfc = true},
	{.name = "deepseek-r1-qwen", .regex = re_qwen2, .nfc = true},
	{.name = "stablelm2", .regex = re_qwen2, .clean_up = true},
	{.name = "qwen35", .regex = re_qwen35},	/* no NFC: llama.cpp's vectors keep "e" + U+0301 apart */
	{.name = "gpt-2", .regex = NULL, .clean_up = true},
	{.name = "gpt2", .regex = NULL, .clean_up = true},
	{.name = "phi-2", .regex = NULL, .clean_up = true},
	{.name = "mpt", .regex = NULL, .clean_up = true},
	{.name = "olmo", .regex = NULL, .clean_up = true},
	{.name = "falcon", .regex = re_falcon, .clean_up = true},
	{.name = "starcoder", .regex = re_digits_gpt2, .clean_up = true},
	{.name = "refact", .regex = re_digits_gpt2, .clean_up = true},
	{.name = "smollm", .regex = re_digits_gpt2, .clean_up = true},
	{.name = "codeshell", .regex = re_digits_gpt2, .clean_up = true},
	{.name = "command-r", .regex = re_digits_gpt2},
	{.name = "deepseek-coder", .regex = re_deepseek_coder},
	{.name = "deepseek-llm", .regex = re_deepseek_llm},
	{.name = "tekken", .regex = re_tekken},
	{.name = "gpt-4o", .regex = re_gpt4o},
};

#define N_PRE	(sizeof(pre_tokenizers) / sizeof(pre_tokenizers[0]))

/* The pre-tokenizer named name[0..len), or NULL when it is not known. */
const gg_pre *
tok_gguf_pre_find(const char *name, size_t len)
{
	for (size_t i = 0; i < N_PRE; i++)
		if (strlen(pre_tokenizers[i].name) == len && memcmp(pre_tokenizers[i].name, name, len) == 0)
			return &pre_tokenizers[i];
	return NULL;
}
