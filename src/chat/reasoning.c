/*
 * reasoning.c: an answer's reasoning apart from its content (reasoning.h
 * has the formats and their rules).
 *
 * The splitter is a small state machine over generated tokens.  A harmony
 * answer moves between a header (text that names the role, the channel and
 * a recipient, up to <|message|>), a body (text that goes to the part its
 * channel chose, up to <|end|>, <|return|> or <|call|>) and done.  A marker
 * out of place (a <|channel|> or <|start|> inside a body) ends the body and
 * starts a header, so malformed output never makes header text into
 * content.  A think answer moves from its start (whitespace only so far)
 * into the block or straight into content, and from the block to content
 * at </think>.
 */
#include "chat/reasoning.h"

#include <string.h>

/* Where the answer is. */
enum
{
	H_HEADER,					/* harmony: in a header */
	H_BODY,						/* harmony: in a message body */
	H_DONE,						/* harmony: after <|return|> or <|call|> */
	T_START,					/* think: nothing but whitespace yet */
	T_INSIDE,					/* think: in the block */
	T_AFTER						/* think: in the content */
};

/* Where a body's text goes. */
enum
{
	PART_REASONING,
	PART_CONTENT
};

#define ANALYSIS "analysis"

/* Whether c is whitespace as the trimming rules read it. */
static bool
IsSpace(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Drop *text's leading whitespace; whether anything is left. */
static bool
SkipSpace(const char **text, size_t *len)
{
	while (*len > 0 && IsSpace(**text))
		(*text)++, (*len)--;
	return *len > 0;
}

/* The markers of a vocabulary (reasoning.h). */
reasoning_markers
reasoning_markers_find(reasoning_lookup lookup, void *arg)
{
	reasoning_markers m = {.format = REASONING_NONE};

	m.start = lookup("<|start|>", arg);
	m.end = lookup("<|end|>", arg);
	m.message = lookup("<|message|>", arg);
	m.channel = lookup(REASONING_CHANNEL_TEXT, arg);
	m.constrain = lookup("<|constrain|>", arg);
	m.ret = lookup("<|return|>", arg);
	m.call = lookup("<|call|>", arg);
	m.think_open = lookup("<think>", arg);
	m.think_close = lookup("</think>", arg);
	if (m.channel >= 0 && m.message >= 0 && m.start >= 0)
		m.format = REASONING_HARMONY;
	else if (m.think_open >= 0 && m.think_close >= 0)
		m.format = REASONING_THINK;
	else if ((m.think_open = lookup("<|channel>", arg)) >= 0 &&
			 (m.think_close = lookup("<channel|>", arg)) >= 0)
	{
		m.format = REASONING_THINK;
		m.named_block = true;
	}
	else
		m.think_open = m.think_close = -1;
	return m;
}

/* Start splitting an answer (reasoning.h). */
void
reasoning_split_init(reasoning_split *s, const reasoning_markers *m, bool open_think)
{
	memset(s, 0, sizeof(*s));
	s->m = *m;
	if (m->format == REASONING_HARMONY)
		s->state = H_HEADER;
	else if (m->format == REASONING_THINK)
	{
		s->state = open_think ? T_INSIDE : T_START;
		s->in_name = open_think && m->named_block;
		s->reasoning_new = true;
	}
	else
		s->state = T_AFTER;
	s->part = PART_CONTENT;
}

/* Whether id is one of the markers of s's format. */
bool
reasoning_split_is_marker(const reasoning_split *s, int32_t id)
{
	const reasoning_markers *m = &s->m;

	if (id < 0)
		return false;
	if (m->format == REASONING_HARMONY)
		return id == m->start || id == m->end || id == m->message || id == m->channel ||
			id == m->constrain || id == m->ret || id == m->call;
	if (m->format == REASONING_THINK)
		return id == m->think_open || id == m->think_close;
	return false;
}

/* Append text to reasoning: leading whitespace of a message dropped, trailing held back. */
static int
EmitReasoning(reasoning_split *s, const char *text, size_t len, cbllm_buf *reasoning)
{
	size_t		body;

	if (s->reasoning_new)
	{
		if (!SkipSpace(&text, &len))
			return CBLLM_OK;
		s->reasoning_new = false;
	}
	for (body = len; body > 0 && IsSpace(text[body - 1]); body--)
		;
	if (body > 0)
	{
		if (s->held.len > 0 && cbllm_buf_append(reasoning, s->held.data, s->held.len) != CBLLM_OK)
			return CBLLM_ERR_NOMEM;
		s->held.len = 0;
		if (cbllm_buf_append(reasoning, text, body) != CBLLM_OK)
			return CBLLM_ERR_NOMEM;
		s->reasoning_started = true;
	}
	return len > body ? cbllm_buf_append(&s->held, text + body, len - body) : CBLLM_OK;
}

/* Append text to content: after a think block its leading whitespace dropped; messages joined by "\n". */
static int
EmitContent(reasoning_split *s, const char *text, size_t len, cbllm_buf *content)
{
	if (s->content_trim)
	{
		if (!SkipSpace(&text, &len))
			return CBLLM_OK;
		s->content_trim = false;
	}
	if (len == 0)
		return CBLLM_OK;
	if (s->content_new)
	{
		s->content_new = false;
		if (s->content_started && cbllm_buf_append(content, "\n", 1) != CBLLM_OK)
			return CBLLM_ERR_NOMEM;
	}
	s->content_started = true;
	return cbllm_buf_append(content, text, len);
}

/* A new message of part begins: its text is joined to the part's earlier messages. */
static int
BeginPart(reasoning_split *s, int part)
{
	s->part = part;
	if (part == PART_CONTENT)
	{
		s->content_new = true;
		return CBLLM_OK;
	}
	s->reasoning_new = true;
	s->held.len = 0;
	return s->reasoning_started ? cbllm_buf_append(&s->held, "\n", 1) : CBLLM_OK;
}

/* A harmony header begins: with its channel's name next when channel says so. */
static void
BeginHeader(reasoning_split *s, bool channel)
{
	s->state = H_HEADER;
	s->in_channel = channel;
	s->channel_len = 0;
}

/* Header text: kept for the fallback until a body begins; its channel's name noted. */
static int
HeaderText(reasoning_split *s, const char *text, size_t len)
{
	if (!s->any_message && len > 0 && cbllm_buf_append(&s->unparsed, text, len) != CBLLM_OK)
		return CBLLM_ERR_NOMEM;
	for (size_t i = 0; i < len && s->in_channel; i++)
	{
		if (IsSpace(text[i]))
			s->in_channel = false;	/* " to=functions.f" or " json" may follow the name */
		else if (s->channel_len < (int) sizeof(s->channel))
			s->channel[s->channel_len++] = text[i];
		else
			s->channel_len = (int) sizeof(s->channel) + 1;	/* too long to be any name */
	}
	return CBLLM_OK;
}

/* A harmony marker. */
static int
HarmonyMarker(reasoning_split *s, int32_t id)
{
	const reasoning_markers *m = &s->m;

	if (s->state == H_DONE)
		return CBLLM_OK;
	if (id == m->ret || id == m->call)
		s->state = H_DONE;
	else if (id == m->start || id == m->end)
		BeginHeader(s, false);
	else if (id == m->channel)
		BeginHeader(s, true);
	else if (id == m->constrain)
		s->in_channel = false;
	else if (id == m->message && s->state == H_HEADER)
	{
		bool		analysis = s->channel_len == (int) strlen(ANALYSIS) &&
			memcmp(s->channel, ANALYSIS, strlen(ANALYSIS)) == 0;

		s->state = H_BODY;
		s->any_message = true;
		cbllm_buf_free(&s->unparsed);
		return BeginPart(s, analysis ? PART_REASONING : PART_CONTENT);
	}
	return CBLLM_OK;
}

/* A think marker. */
static int
ThinkMarker(reasoning_split *s, int32_t id)
{
	if (id == s->m.think_open && s->state == T_START)
	{
		cbllm_buf_free(&s->unparsed);	/* the whitespace before the block */
		s->state = T_INSIDE;
		s->in_name = s->m.named_block;
	}
	else if (id == s->m.think_close && (s->state == T_START || s->state == T_INSIDE))
	{
		cbllm_buf_free(&s->unparsed);
		s->state = T_AFTER;
		s->content_trim = true;
	}
	return CBLLM_OK;			/* any other tag is dropped */
}

/* Think text. */
static int
ThinkText(reasoning_split *s, const char *text, size_t len, cbllm_buf *reasoning, cbllm_buf *content)
{
	size_t		lead = 0;
	int			rc;

	if (s->state == T_INSIDE && s->in_name)
	{
		const char *nl = memchr(text, '\n', len);

		if (nl == NULL)
			return CBLLM_OK;	/* the channel's name */
		s->in_name = false;
		len -= (size_t) (nl + 1 - text);
		text = nl + 1;
	}
	if (s->state == T_INSIDE)
		return EmitReasoning(s, text, len, reasoning);
	if (s->state == T_START)
	{
		while (lead < len && IsSpace(text[lead]))
			lead++;
		if (lead == len)
			return len > 0 ? cbllm_buf_append(&s->unparsed, text, len) : CBLLM_OK;
		s->state = T_AFTER;		/* no block: all of it is content, as written */
		rc = s->unparsed.len > 0 ? EmitContent(s, s->unparsed.data, s->unparsed.len, content) : CBLLM_OK;
		cbllm_buf_free(&s->unparsed);
		if (rc != CBLLM_OK)
			return rc;
	}
	return EmitContent(s, text, len, content);
}

/* Take one generated token and its text (reasoning.h). */
int
reasoning_split_push(reasoning_split *s, int32_t id, const char *text, size_t len,
					 cbllm_buf *reasoning, cbllm_buf *content)
{
	if (s->m.format == REASONING_NONE)
		return EmitContent(s, text, len, content);
	if (reasoning_split_is_marker(s, id))
		return s->m.format == REASONING_HARMONY ? HarmonyMarker(s, id) : ThinkMarker(s, id);
	if (s->m.format == REASONING_THINK)
		return ThinkText(s, text, len, reasoning, content);
	if (s->state == H_HEADER)
		return HeaderText(s, text, len);
	if (s->state == H_BODY)
		return s->part == PART_REASONING ? EmitReasoning(s, text, len, reasoning) :
			EmitContent(s, text, len, content);
	return CBLLM_OK;			/* after the end */
}

/* The answer is over (reasoning.h). */
int
reasoning_split_finish(reasoning_split *s, cbllm_buf *reasoning, cbllm_buf *content)
{
	int			rc = CBLLM_OK;

	(void) reasoning;
	if (s->unparsed.len > 0 && ((s->m.format == REASONING_HARMONY && !s->any_message) ||
								(s->m.format == REASONING_THINK && s->state == T_START)))
		rc = EmitContent(s, s->unparsed.data, s->unparsed.len, content);
	cbllm_buf_free(&s->unparsed);
	s->held.len = 0;			/* reasoning's trailing whitespace is dropped */
	return rc;
}

/* Free what s holds. */
void
reasoning_split_free(reasoning_split *s)
{
	cbllm_buf_free(&s->unparsed);
	cbllm_buf_free(&s->held);
}
