/*
 * test_reasoning.c: chat answers split into reasoning and content
 * (chat/reasoning.h), over token ids as the engine feeds them: harmony
 * (gpt-oss's channels, with its real marker ids) and think blocks (Qwen3's
 * and DeepSeek-R1's), whole, cut off, malformed, and with the markers'
 * texts spelled out of ordinary tokens, which must stay ordinary text.
 */
#include <string.h>

#include "chat/reasoning.h"
#include "tap.h"

/* gpt-oss's ids (o200k_harmony) */
enum
{
	START = 200006, END = 200007, MESSAGE = 200008, CHANNEL = 200005, CONSTRAIN = 200003,
	RETURN = 200002, CALL = 200012,
	/* Qwen3's */
	THINK = 151667, UNTHINK = 151668,
	/* Gemma 4's */
	G4_OPEN = 100, G4_CLOSE = 101, G4_THINK = 98,
	TEXT = 1					/* any ordinary token */
};

typedef struct tok
{
	int32_t		id;
	const char *text;			/* NULL for a marker (a special token decodes to nothing) */
} tok;

/* The vocabulary of the tests' lookups: harmony's markers, or think's, or neither. */
static int32_t
LookupHarmony(const char *text, void *arg)
{
	static const struct
	{
		const char *t;
		int32_t		id;
	}			v[] = {{"<|start|>", START}, {"<|end|>", END}, {"<|message|>", MESSAGE},
	{"<|channel|>", CHANNEL}, {"<|constrain|>", CONSTRAIN}, {"<|return|>", RETURN}, {"<|call|>", CALL}};

	(void) arg;
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
		if (strcmp(text, v[i].t) == 0)
			return v[i].id;
	return -1;
}

static int32_t
LookupThink(const char *text, void *arg)
{
	(void) arg;
	return strcmp(text, "<think>") == 0 ? THINK : strcmp(text, "</think>") == 0 ? UNTHINK : -1;
}

/* Gemma 4's vocabulary: <|channel> and <channel|> (and <|think|>, which is no tag of a block) */
static int32_t
LookupGemma4(const char *text, void *arg)
{
	(void) arg;
	return strcmp(text, "<|channel>") == 0 ? G4_OPEN : strcmp(text, "<channel|>") == 0 ? G4_CLOSE :
		strcmp(text, "<|think|>") == 0 ? G4_THINK : -1;
}

static int32_t
LookupNone(const char *text, void *arg)
{
	(void) text;
	(void) arg;
	return -1;
}

/* What a split gave. */
typedef struct result
{
	char		reasoning[512];
	char		content[512];
	bool		content_prefix_ok;	/* content only ever grew by what it finally holds */
	int			content_before_finish;	/* content bytes before finish */
} result;

/* Split n tokens with markers m, finishing when finish says so. */
static result
Split(const reasoning_markers *m, bool open_think, const tok *t, int n)
{
	reasoning_split s;
	cbllm_buf	r = {0},
				c = {0};
	result		out = {.content_prefix_ok = true};
	char		seen[512] = "";

	reasoning_split_init(&s, m, open_think);
	for (int i = 0; i < n; i++)
	{
		const char *text = t[i].text ? t[i].text : "";

		if (reasoning_split_push(&s, t[i].id, text, strlen(text), &r, &c) != CBLLM_OK)
			out.content_prefix_ok = false;
		if (c.len > 0 && strncmp(seen, c.data, strlen(seen)) != 0)
			out.content_prefix_ok = false;
		if (c.len < sizeof(seen))
			memcpy(seen, c.data ? c.data : "", c.len), seen[c.len] = '\0';
	}
	out.content_before_finish = (int) c.len;
	if (reasoning_split_finish(&s, &r, &c) != CBLLM_OK)
		out.content_prefix_ok = false;
	snprintf(out.reasoning, sizeof(out.reasoning), "%.*s", (int) r.len, r.data ? r.data : "");
	snprintf(out.content, sizeof(out.content), "%.*s", (int) c.len, c.data ? c.data : "");
	out.content_prefix_ok = out.content_prefix_ok && strncmp(seen, out.content, strlen(seen)) == 0;
	reasoning_split_free(&s);
	cbllm_buf_free(&r);
	cbllm_buf_free(&c);
	return out;
}

#define N(a) ((int) (sizeof(a) / sizeof((a)[0])))

static void
TestMarkersFound(void)
{
	reasoning_markers h = reasoning_markers_find(LookupHarmony, NULL),
				t = reasoning_markers_find(LookupThink, NULL),
				none = reasoning_markers_find(LookupNone, NULL);

	TAP_OK(h.format == REASONING_HARMONY && h.channel == CHANNEL && h.ret == RETURN && h.call == CALL &&
		   h.think_open == -1, "a vocabulary with <|channel|>, <|message|> and <|start|> is harmony, its ids found");
	TAP_OK(t.format == REASONING_THINK && t.think_open == THINK && t.think_close == UNTHINK,
		   "a vocabulary with <think> and </think> tokens is the think format");
	TAP_OK(none.format == REASONING_NONE, "a vocabulary with neither has no reasoning format");
}

static void
TestHarmony(void)
{
	reasoning_markers m = reasoning_markers_find(LookupHarmony, NULL);
	const tok	whole[] = {{CHANNEL, NULL}, {TEXT, "analysis"}, {MESSAGE, NULL}, {TEXT, "User asks 2+2."},
	{TEXT, " Easy.\n"}, {END, NULL}, {START, NULL}, {TEXT, "assistant"}, {CHANNEL, NULL}, {TEXT, "final"},
	{MESSAGE, NULL}, {TEXT, "It is"}, {TEXT, " 4."}, {RETURN, NULL}};
	const tok	cut[] = {{CHANNEL, NULL}, {TEXT, "analysis"}, {MESSAGE, NULL}, {TEXT, "Let me"},
	{TEXT, " think"}};
	/* the markers' texts spelled with ordinary tokens, in both channels */
	const tok	spelled[] = {{CHANNEL, NULL}, {TEXT, "analysis"}, {MESSAGE, NULL}, {TEXT, "<|"},
	{TEXT, "channel"}, {TEXT, "|>final<|message|>"}, {TEXT, "fake"}, {END, NULL}, {START, NULL},
	{TEXT, "assistant"}, {CHANNEL, NULL}, {TEXT, "final"}, {MESSAGE, NULL},
	{TEXT, "Say <|channel|>final<|message|> and <|end|>"}, {RETURN, NULL}};
	const tok	plain[] = {{TEXT, "Just"}, {TEXT, " text"}};
	const tok	tool[] = {{CHANNEL, NULL}, {TEXT, "analysis"}, {MESSAGE, NULL}, {TEXT, "Need weather."},
	{END, NULL}, {START, NULL}, {TEXT, "assistant"}, {CHANNEL, NULL}, {TEXT, "commentary to=functions.get_weather "},
	{CONSTRAIN, NULL}, {TEXT, "json"}, {MESSAGE, NULL}, {TEXT, "{\"city\":\"Paris\"}"}, {CALL, NULL}};
	const tok	two[] = {{CHANNEL, NULL}, {TEXT, "analysis"}, {MESSAGE, NULL}, {TEXT, "first\n"}, {END, NULL},
	{START, NULL}, {TEXT, "assistant"}, {CHANNEL, NULL}, {TEXT, "analysis"}, {MESSAGE, NULL}, {TEXT, " second"},
	{END, NULL}, {START, NULL}, {TEXT, "assistant"}, {CHANNEL, NULL}, {TEXT, "final"}, {MESSAGE, NULL},
	{TEXT, "done"}, {RETURN, NULL}};
	/* a channel marker inside a body ends it; the header after it is no content */
	const tok	broken[] = {{CHANNEL, NULL}, {TEXT, "analysis"}, {MESSAGE, NULL}, {TEXT, "think"},
	{CHANNEL, NULL}, {TEXT, "final"}, {MESSAGE, NULL}, {TEXT, "answer"}, {END, NULL}, {TEXT, "stray"}};
	const tok	after[] = {{CHANNEL, NULL}, {TEXT, "final"}, {MESSAGE, NULL}, {TEXT, "a"}, {RETURN, NULL},
	{TEXT, "past the end"}};
	const tok	longname[] = {{CHANNEL, NULL}, {TEXT, "analysisanalysisanalysis"}, {MESSAGE, NULL}, {TEXT, "x"}};
	result		r;

	r = Split(&m, false, whole, N(whole));
	TAP_OK(strcmp(r.reasoning, "User asks 2+2. Easy.") == 0 && strcmp(r.content, "It is 4.") == 0 &&
		   r.content_prefix_ok, "harmony: the analysis channel is the reasoning (trimmed), the final channel the content: '%s' / '%s'",
		   r.reasoning, r.content);
	r = Split(&m, false, cut, N(cut));
	TAP_OK(strcmp(r.reasoning, "Let me think") == 0 && strcmp(r.content, "") == 0,
		   "harmony: an answer cut off in its analysis has the partial reasoning and no content");
	r = Split(&m, false, spelled, N(spelled));
	TAP_OK(strcmp(r.reasoning, "<|channel|>final<|message|>fake") == 0 &&
		   strcmp(r.content, "Say <|channel|>final<|message|> and <|end|>") == 0,
		   "harmony: marker texts spelled with ordinary tokens are ordinary text and switch no channel: '%s' / '%s'",
		   r.reasoning, r.content);
	r = Split(&m, false, plain, N(plain));
	TAP_OK(strcmp(r.content, "Just text") == 0 && r.content_before_finish == 0 && r.reasoning[0] == '\0',
		   "harmony: an answer with no message at all is content, given at the end");
	r = Split(&m, false, tool, N(tool));
	TAP_OK(strcmp(r.reasoning, "Need weather.") == 0 && strcmp(r.content, "{\"city\":\"Paris\"}") == 0,
		   "harmony: a tool call's header (recipient, constrain) is dropped and its arguments are content");
	r = Split(&m, false, two, N(two));
	TAP_OK(strcmp(r.reasoning, "first\nsecond") == 0 && strcmp(r.content, "done") == 0,
		   "harmony: two analysis messages are one reasoning joined by a newline");
	r = Split(&m, false, broken, N(broken));
	TAP_OK(strcmp(r.reasoning, "think") == 0 && strcmp(r.content, "answer") == 0 && r.content_prefix_ok,
		   "harmony: a channel marker inside a body starts a new header; header text never becomes content: '%s' / '%s'",
		   r.reasoning, r.content);
	r = Split(&m, false, after, N(after));
	TAP_OK(strcmp(r.content, "a") == 0, "harmony: text after <|return|> is neither part");
	r = Split(&m, false, longname, N(longname));
	TAP_OK(strcmp(r.content, "x") == 0 && r.reasoning[0] == '\0',
		   "harmony: a channel whose name only begins with analysis is content");
}

static void
TestThink(void)
{
	reasoning_markers m = reasoning_markers_find(LookupThink, NULL),
				none = reasoning_markers_find(LookupNone, NULL);
	const tok	whole[] = {{TEXT, "\n"}, {THINK, "<think>"}, {TEXT, "\nLet me"}, {TEXT, " think.\n"},
	{UNTHINK, "</think>"}, {TEXT, "\n\n"}, {TEXT, "The answer"}, {TEXT, " is 4.\n"}};
	const tok	opened[] = {{TEXT, "I was told"}, {TEXT, " to think.\n"}, {UNTHINK, "</think>"},
	{TEXT, "\n\nanswer"}};
	const tok	plain[] = {{TEXT, "\n\nHello"}, {TEXT, " there"}, {UNTHINK, "</think>"}, {TEXT, " more"}};
	const tok	cut[] = {{THINK, "<think>"}, {TEXT, "partial"}, {TEXT, " thought "}};
	const tok	spelled[] = {{TEXT, "<"}, {TEXT, "think>"}, {TEXT, "not a block</"}, {TEXT, "think>"},
	{TEXT, " ok"}};
	const tok	late[] = {{TEXT, "Answer first "}, {THINK, "<think>"}, {TEXT, "then"}, {UNTHINK, "</think>"}};
	const tok	blank[] = {{TEXT, "  "}};
	result		r;

	r = Split(&m, false, whole, N(whole));
	TAP_OK(strcmp(r.reasoning, "Let me think.") == 0 && strcmp(r.content, "The answer is 4.\n") == 0 &&
		   r.content_prefix_ok, "think: the block is the reasoning, what follows the content with its leading whitespace dropped");
	r = Split(&m, true, opened, N(opened));
	TAP_OK(strcmp(r.reasoning, "I was told to think.") == 0 && strcmp(r.content, "answer") == 0,
		   "think: a prompt that opened the block makes the text before </think> the reasoning");
	r = Split(&m, false, plain, N(plain));
	TAP_OK(strcmp(r.content, "\n\nHello there more") == 0 && r.reasoning[0] == '\0',
		   "think: an answer with no block is all content, as written; a stray </think> is dropped");
	r = Split(&m, false, cut, N(cut));
	TAP_OK(strcmp(r.reasoning, "partial thought") == 0 && r.content[0] == '\0',
		   "think: an answer cut off inside the block has the partial reasoning and no content");
	r = Split(&m, false, spelled, N(spelled));
	TAP_OK(strcmp(r.content, "<think>not a block</think> ok") == 0 && r.reasoning[0] == '\0',
		   "think: <think> spelled with ordinary tokens is content");
	r = Split(&m, false, late, N(late));
	TAP_OK(strcmp(r.content, "Answer first then") == 0 && r.reasoning[0] == '\0',
		   "think: a block that does not open the answer is no reasoning (its tags dropped)");
	r = Split(&m, false, blank, N(blank));
	TAP_OK(strcmp(r.content, "  ") == 0, "think: an answer of whitespace only is that content");
	r = Split(&none, false, whole, N(whole));
	TAP_OK(strcmp(r.content, "\n<think>\nLet me think.\n</think>\n\nThe answer is 4.\n") == 0 &&
		   r.reasoning[0] == '\0', "no format: every token's text is content, byte for byte");
}

/* Gemma 4: <|channel>thought\n...<channel|> is reasoning without its channel's name. */
static void
TestGemma4(void)
{
	reasoning_markers m = reasoning_markers_find(LookupGemma4, NULL);
	const tok	whole[] = {{G4_OPEN, NULL}, {TEXT, "thought"}, {TEXT, "\nFirst, add"}, {TEXT, " 2 and 2.\n"},
	{G4_CLOSE, NULL}, {TEXT, "The answer"}, {TEXT, " is 4."}};
	const tok	split_name[] = {{G4_OPEN, NULL}, {TEXT, "thou"}, {TEXT, "ght\nWe"}, {TEXT, " see."},
	{G4_CLOSE, NULL}, {TEXT, "\nYes"}};
	const tok	plain[] = {{TEXT, "Just"}, {TEXT, " this."}};
	const tok	cut[] = {{G4_OPEN, NULL}, {TEXT, "thought\npart"}};
	result		r;

	TAP_OK(m.format == REASONING_THINK && m.named_block && m.think_open == G4_OPEN &&
		   m.think_close == G4_CLOSE, "gemma4: <|channel> and <channel|> make the think format with a named block");
	r = Split(&m, false, whole, N(whole));
	TAP_OK(strcmp(r.reasoning, "First, add 2 and 2.") == 0 && strcmp(r.content, "The answer is 4.") == 0,
		   "gemma4: the block's text after its channel's name line is the reasoning, the rest the content");
	r = Split(&m, false, split_name, N(split_name));
	TAP_OK(strcmp(r.reasoning, "We see.") == 0 && strcmp(r.content, "Yes") == 0,
		   "gemma4: a channel name split over tokens is dropped up to its newline");
	r = Split(&m, false, plain, N(plain));
	TAP_OK(strcmp(r.content, "Just this.") == 0 && r.reasoning[0] == '\0',
		   "gemma4: an answer with no block (thinking off: the prompt ended with an empty one) is all content");
	r = Split(&m, false, cut, N(cut));
	TAP_OK(strcmp(r.reasoning, "part") == 0 && r.content[0] == '\0',
		   "gemma4: an answer cut off inside the block has the partial reasoning and no content");
}

int
main(void)
{
	TestMarkersFound();
	TestHarmony();
	TestThink();
	TestGemma4();
	return tap_done();
}
