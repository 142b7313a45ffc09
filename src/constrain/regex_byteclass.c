/*
 * regex_byteclass.c: the byte classes of the regex back end (regex_dfa.c).
 * Before the subset construction, the NFA's byte ranges cut 0..255 into
 * intervals no range splits, and the intervals that every range takes or
 * leaves together form one class; after minimisation, classes whose
 * columns agree in every state merge into the byte classes of the result.
 */
#include "constrain/regex_dfa_internal.h"

#include <stdbool.h>
#include <string.h>

/* Cut the bytes into intervals that no RANGE state of m splits. */
void
regex_interval_classes(subset *sb)
{
	bool		cut[257] = {false};
	int			c = 0;

	for (int32_t s = 0; s < sb->m->n; s++)
		if (sb->m->st[s].kind == S_RANGE)
			cut[sb->m->st[s].lo] = cut[sb->m->st[s].hi + 1] = true;
	for (int b = 0; b < 256; b++)
	{
		c += b > 0 && cut[b];
		sb->ic_of[b] = (uint8_t) c;
	}
	sb->n_ic = c + 1;
}

/*
 * Group the intervals into byte classes: start from one class and split
 * every class that a distinct byte range of the NFA partly covers.
 */
void
regex_byte_classes(subset *sb)
{
	uint64_t	seen[256][4] = {{0}};	/* the (lo, hi) ranges done */
	int32_t		size[256] = {sb->n_ic},
				inside[256],
				moved[256],
				id[256];
	int			n = 1,
				f = 0;

	memset(sb->bc_of, 0, sizeof(sb->bc_of));
	for (int32_t s = 0; s < sb->m->n; s++)
	{
		const nstate *t = &sb->m->st[s];
		int			a = sb->ic_of[t->lo],
					z = sb->ic_of[t->hi],
					old = n;

		if (t->kind != S_RANGE || (seen[t->lo][t->hi >> 6] >> (t->hi & 63) & 1))
			continue;
		seen[t->lo][t->hi >> 6] |= (uint64_t) 1 << (t->hi & 63);
		memset(inside, 0, sizeof(int32_t) * old);
		for (int i = a; i <= z; i++)
			inside[sb->bc_of[i]]++;
		for (int c = 0; c < old; c++)
		{
			moved[c] = inside[c] > 0 && inside[c] < size[c] ? n++ : -1;
			if (moved[c] >= 0)
				size[moved[c]] = inside[c], size[c] -= inside[c];
		}
		for (int i = a; i <= z; i++)
			if (moved[sb->bc_of[i]] >= 0)
				sb->bc_of[i] = (uint8_t) moved[sb->bc_of[i]];
	}
	for (int c = 0; c < n; c++)	/* number the classes in the order of their first interval */
		id[c] = -1;
	for (int i = 0; i < sb->n_ic; i++)
	{
		if (id[sb->bc_of[i]] < 0)
			sb->rep[f] = (uint8_t) i, id[sb->bc_of[i]] = f++;
		sb->bc_of[i] = (uint8_t) id[sb->bc_of[i]];
	}
	sb->n_bc = n;
}

/* Merge t's identical columns in place; map[b] (a column of t before) becomes the column after. */
void
regex_merge_columns(table *t, int32_t *map, int n_map)
{
	uint32_t	hash[256];
	int32_t		col[256];		/* the new column of each old column */
	int32_t		rep[256];		/* the old column each new column is */
	int32_t		k = 0;

	for (int32_t c = 0; c < t->k; c++)
		hash[c] = 1;
	for (int32_t s = 0; s < t->n; s++)
		for (int32_t c = 0; c < t->k; c++)
			hash[c] = HashMix(hash[c], (uint32_t) t->next[(size_t) s * t->k + c]);
	for (int32_t c = 0; c < t->k; c++)
	{
		col[c] = -1;
		for (int32_t f = 0; f < k && col[c] < 0; f++)
		{
			int32_t		r = rep[f],
						s = 0;

			if (hash[r] != hash[c])
				continue;
			while (s < t->n && t->next[(size_t) s * t->k + r] == t->next[(size_t) s * t->k + c])
				s++;
			col[c] = s == t->n ? f : -1;
		}
		if (col[c] < 0)
			rep[k] = c, col[c] = k++;
	}
	for (int32_t s = 0; s < t->n; s++)	/* row s moves left: k <= t->k */
		for (int32_t f = 0; f < k; f++)
			t->next[(size_t) s * k + f] = t->next[(size_t) s * t->k + rep[f]];
	t->k = k;
	for (int b = 0; b < n_map; b++)
		map[b] = col[map[b]];
}
