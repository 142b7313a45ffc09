/* compat.h: shims for the PostgreSQL versions cbllm builds against (13 and later). */
#ifndef CBLLM_COMPAT_H
#define CBLLM_COMPAT_H

#include "postgres.h"

#if PG_VERSION_NUM < 150000
/* before 15, reserving a GUC prefix was spelled EmitWarningsOnPlaceholders */
#define MarkGUCPrefixReserved(prefix) EmitWarningsOnPlaceholders(prefix)
#endif

#endif
