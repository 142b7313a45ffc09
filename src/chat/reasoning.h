/*
 * reasoning.h: a chat answer split into its reasoning and its content, token
 * by token, as the answer is generated.
 *
 * Two formats, chosen from the model's vocabulary (never from the text):
 *
 *   harmony (gpt-oss; its vocabulary has <|channel|>): the answer is a run
 *     of messages, each a header and a body,
 *       <|channel|>analysis<|message|>THINKING<|end|>
 *       <|start|>assistant<|channel|>final<|message|>ANSWER<|return|>
 *     (the prompt ends with "<|start|>assistant", so the first header has
 *     no <|start|>).  A body of the analysis channel is reasoning; a body of
 *     any other channel (final; commentary, whose tool calls cbllm does not
 *     parse: their arguments are content), or of a header with no channel,
 *     is content.  Headers and the marker tokens are neither.  An answer cut
 *     off before its final channel has the reasoning so far and no content.
 *     An answer with no message at all (a model that writes plain text, or
 *     a constrained output, which cannot hold special tokens) is content,
 *     given at the end.
 *
 *   think (Qwen3, DeepSeek-R1; its vocabulary has <think> and </think> as
 *     tokens): text between <think> (at the start of the answer, after
 *     whitespace only) and </think> is reasoning; the text after </think>,
 *     its leading whitespace dropped, is content; an answer with no <think>
 *     is all content.  A prompt that leaves a <think> open (a template that
 *     opens the block itself) starts the answer inside it, so that text
 *     before the first </think> is reasoning.  A </think> with no block
 *     open is dropped.
 *
 *   Gemma 4's (its vocabulary has <|channel> and <channel|> as tokens) is
 *     the think format with those two as the block's tags, the block's
 *     first line naming its channel ("thought"): that line is not
 *     reasoning.  Its template ends a prompt without thinking with an empty
 *     block, so such an answer is all content.
 *
 * Markers are recognised by token id alone: text that spells "<|channel|>"
 * or "<think>" out of ordinary tokens is ordinary text.  Reasoning has its
 * leading and trailing whitespace dropped (trailing whitespace is held until
 * more reasoning follows); several messages of one part are joined with one
 * "\n".  Content is given byte for byte but for those rules.
 *
 * Pure C over token ids and their decoded texts: the caller decodes (with
 * special tokens producing no text) and says which id each text came from.
 */
#ifndef CBLLM_REASONING_H
#define CBLLM_REASONING_H

#include <stdbool.h>
#include <stdint.h>

#include "base/util.h"

typedef enum reasoning_format
{
	REASONING_NONE = 0,			/* everything is content */
	REASONING_HARMONY,
	REASONING_THINK
} reasoning_format;

/* The marker ids of a vocabulary (-1: absent) and the format they make. */
typedef struct reasoning_markers
{
	reasoning_format format;
	int32_t		start;			/* harmony: <|start|> */
	int32_t		end;			/* <|end|> */
	int32_t		message;		/* <|message|> */
	int32_t		channel;		/* <|channel|> */
	int32_t		constrain;		/* <|constrain|> */
	int32_t		ret;			/* <|return|> */
	int32_t		call;			/* <|call|> */
	int32_t		think_open;		/* think: <think> */
	int32_t		think_close;	/* </think> */
	bool		named_block;	/* think: the tags are Gemma 4's <|channel> and <channel|>,
								 * the block's first line its channel's name */
} reasoning_markers;

/* The texts of the markers, as a vocabulary spells them. */
#define REASONING_CHANNEL_TEXT "<|channel|>"

/* A vocabulary's lookup: the id of a token whose whole text is text, or -1. */
typedef int32_t (*reasoning_lookup) (const char *text, void *arg);

/* The markers of a vocabulary: harmony when it has <|channel|>, <|message|>
 * and <|start|>; else think when it has <think> and </think>, or Gemma 4's
 * <|channel> and <channel|>; else none. */
reasoning_markers reasoning_markers_find(reasoning_lookup lookup, void *arg);

/* The splitter of one answer. */
typedef struct reasoning_split
{
	reasoning_markers m;
	int			state;			/* where the answer is (reasoning.c) */
	int			part;			/* the part the current body goes to */
	bool		any_message;	/* harmony: a body has begun */
	bool		in_channel;		/* harmony: header text is the channel's name */
	char		channel[16];	/* its first bytes */
	int			channel_len;
	cbllm_buf	unparsed;		/* harmony: text before any body (content if none comes) */
	cbllm_buf	held;			/* reasoning's trailing whitespace, or think's leading one */
	bool		reasoning_started;	/* some reasoning was given */
	bool		reasoning_new;	/* a new reasoning message: its leading whitespace drops */
	bool		content_started;
	bool		content_new;	/* a new content message: "\n" before its first byte */
	bool		content_trim;	/* think: content's leading whitespace drops */
	bool		in_name;		/* think with named_block: in the block's first line */
} reasoning_split;

/*
 * Start splitting an answer with the markers m; open_think: the prompt left
 * a <think> open (think format only).
 */
void		reasoning_split_init(reasoning_split *s, const reasoning_markers *m, bool open_think);

/*
 * Take generated token id and the text it decoded to (len bytes; none for a
 * special token), appending to reasoning or content.  id -1: text with no
 * token of its own (bytes a decoder held), going where the last text went.
 * CBLLM_ERR_NOMEM when a buffer cannot grow.
 */
int			reasoning_split_push(reasoning_split *s, int32_t id, const char *text, size_t len,
								 cbllm_buf *reasoning, cbllm_buf *content);

/* Whether id is one of the markers of s's format (a caller flushes its decoder before it). */
bool		reasoning_split_is_marker(const reasoning_split *s, int32_t id);

/* The answer is over: an answer with no harmony message gives its text as content. */
int			reasoning_split_finish(reasoning_split *s, cbllm_buf *reasoning, cbllm_buf *content);

void		reasoning_split_free(reasoning_split *s);

#endif
