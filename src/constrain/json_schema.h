/*
 * json_schema.h: a JSON Schema compiled to a regular expression (regex.h)
 * whose matches are exactly the documents cbllm generates for it: compact
 * JSON (one optional space after ':' and ','), object properties in the
 * schema's order, every match valid under the schema.
 *
 * Supported: type (one or a list), properties, required,
 * additionalProperties (false, true or a schema: an object without
 * properties is then a map of string keys), enum, const, items,
 * prefixItems, minItems, maxItems, minLength, maxLength, pattern, format
 * (date, time, date-time, uuid, ipv4, email), minimum, maximum,
 * exclusiveMinimum, exclusiveMaximum (integers), anyOf, $ref to "#",
 * "#/$defs/..." or "#/definitions/...", the boolean schemas, and
 * annotations that constrain nothing (title, description, $schema, $id,
 * $comment, default, examples, deprecated, readOnly, writeOnly).  Any other
 * keyword is an error naming it and where it is:
 *   json_schema: unsupported keyword "uniqueItems" at /properties/tags
 * Recursive $refs unroll JSON_SCHEMA_MAX_DEPTH levels deep; any value ({},
 * true) nests JSON_SCHEMA_ANY_DEPTH levels.
 */
#ifndef CBLLM_JSON_SCHEMA_H
#define CBLLM_JSON_SCHEMA_H

#include <stddef.h>

#include "base/util.h"

#define JSON_SCHEMA_MAX_DEPTH 3
#define JSON_SCHEMA_ANY_DEPTH 2

/*
 * Append to out the regex of the schema in schema[0..len) (JSON text).
 * CBLLM_ERR_FORMAT for text that is not JSON, CBLLM_ERR_UNSUPPORTED for a
 * keyword or value outside the subset, CBLLM_ERR_INVALID for a schema no
 * document satisfies; err says which and where.
 */
int			json_schema_to_regex(const char *schema, size_t len, cbllm_buf *out, cbllm_err *err);

#endif
