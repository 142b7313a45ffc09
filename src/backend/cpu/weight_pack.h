/*
 * weight_pack.h: the CPU's load-time layouts of matrices: K-quant (Q4_K,
 * Q5_K, Q6_K), MXFP4 and float (F32, F16, BF16) rows sixteen at a time, so that one
 * instruction multiplies sixteen rows by a broadcast activation, whatever
 * the batch, with no per-step repacking.
 *
 * Float matrices: a group of 16 rows is a panel, column-major: element k of
 * lane r is element 16k + r of the group (its 16 * cols elements in the
 * bytes the rows took).  The products then accumulate each output as one
 * running sum in column order, at every batch size (kernels_float_packed.inc).
 *
 * K-quant matrices:
 *
 * A packed matrix keeps its size: rows 16g..16g+15 (a group) occupy the same
 * 16 * row_bytes bytes they did as stored, now as one record per 256-block
 * (super-block sb) of the sixteen rows, each record 16 times the type's
 * block bytes.  Rows past the last whole group stay as stored, at their own
 * offsets (cbllm_weight.packed_rows says where the groups end).  Lane r
 * below is row 16g + r; a vector is 64 bytes, lane r its bytes 4r..4r+3.
 *
 *   header   nsw vectors: vector j, lane r = bytes 4j..4j+3 of row r's packed
 *            sub-block scales (and mins) as stored (nsw = 3 for Q4_K and Q5_K's
 *            12 bytes, 4 for Q6_K's 16); then d of the 16 rows (f16, 32 bytes);
 *            then dmin (f16, 32 bytes) in the affine types
 *   nibbles  32 vectors: vector 4m + k, byte 4r + i holds row r's element
 *            32m + 4k + i in its low nibble and 32m + 16 + 4k + i in its
 *            high nibble (the codes' low four bits)
 *   high     8 * hbits vectors (hbits = 1 for Q5_K, 2 for Q6_K, 0 for Q4_K):
 *            the codes' bits from the fifth up.  Chunk (4 elements) slot
 *            n = 8m + 2k + h (h = 0 the low nibble's, 1 the high nibble's)
 *            keeps its hbits at bit n * hbits of the plane: vector
 *            n * hbits / 8, bit (n * hbits) % 8 of byte 4r + i
 *
 * So for Q6_K, nibble vector 4m + 2j + u (u = 0, 1) takes its high bits from
 * high vector 2m + j at bits 4u (low nibble's) and 4u + 2 (high nibble's).
 * Sizes: Q4_K 192 + 64 + 2048 = 2304 = 16 * 144, Q5_K 2304 + 512 = 16 * 176,
 * Q6_K 256 + 32 + 2048 + 1024 = 16 * 210.  The scales keep their packing;
 * the kernels unpack them sixteen rows at a time.
 *
 * MXFP4 matrices (rows of whole 32-blocks): a group keeps its size too, as
 * one record per 8 blocks of the sixteen rows (the last may hold fewer, m),
 * each 16 * m * 17 bytes:
 *   exponents  m * 16 bytes: byte 16j + r = block j's exponent byte in row r
 *   nibbles    4m vectors: vector 4j + v, byte 4r + i = byte 4v + i of
 *              block j's 16 nibble bytes in row r (its element 4v + i in
 *              the low nibble, 16 + 4v + i in the high one)
 * so a vector's low (high) nibbles are four codes of each of the sixteen
 * rows, one vpdpbusd against four activations once looked up as bytes.
 */
#ifndef CBLLM_WEIGHT_PACK_H
#define CBLLM_WEIGHT_PACK_H

#include <stdbool.h>
#include <stdint.h>

#include "dtype/dtype.h"
#include "dtype/weight.h"

#define WEIGHT_PACK_ROWS 16		/* rows of a group */

/* Whether matrices of dt have a packed layout. */
bool		weight_pack_supported(cbllm_dtype dt);

/*
 * Whether w can be packed: a supported type (K-quant rows of whole
 * 256-blocks, MXFP4 ones of whole 32s), a group or more of rows, on the host.
 */
bool		weight_pack_fits(const cbllm_weight *w);

/*
 * Bytes of one packed group's header (the scales, d and dmin vectors) in a
 * record of K-quant dt; the nibbles follow, then the high bits.  0 for a float type.
 */
int			weight_pack_header_bytes(cbllm_dtype dt);

/*
 * Pack the 16 rows at src (row_bytes apart, cols elements each, as stored)
 * into the group at dst (16 * row_bytes bytes); src and dst must not overlap.
 */
void		weight_pack_group(cbllm_dtype dt, const uint8_t *src, int64_t row_bytes, int64_t cols,
							  uint8_t *dst);

/* Row lane of the packed group at grp (rows of cols elements) as stored, into row. */
void		weight_unpack_row(cbllm_dtype dt, const uint8_t *grp, int lane, int64_t cols, uint8_t *row);

/*
 * Pack groups [g0, g1) of w into dst, a buffer of w's bytes: w->data
 * itself to pack in place (then tmp holds 16 of its rows as stored), or
 * another (tmp unused; the rows past the groups are the caller's to copy).
 * The caller sets w->packed_rows once every group is.
 */
void		weight_pack_groups(const cbllm_weight *w, int64_t g0, int64_t g1, uint8_t *dst, uint8_t *tmp);

/* Row r of w as stored, into row (a copy for a packed row; row_bytes bytes). */
const uint8_t *weight_row(const cbllm_weight *w, int64_t r, uint8_t *row);

#endif
