/*
 * oracle_codec.h -- an independent double-precision reference of the cache quantizers and
 * dequantizers, written from layouts.md sections 2-4 (rules Q656, Q584, Q132, F1, F2 and the FP4
 * indexer). Rounding is found by searching the code grids, never by bit tricks, so it shares no
 * method with src/common/numeric.h. Inputs x are doubles holding exact bf16 / f32 values.
 */
#ifndef AK_ORACLE_CODEC_H
#define AK_ORACLE_CODEC_H

#include <stdint.h>

/* Nearest e4m3 / e2m1 code, ties to the even code, saturating to +-448 / +-6 (rule F1). */
uint8_t orc_e4m3_code(double x);
uint8_t orc_e2m1_code(double x);
/* IEEE fp32 quotient x / s (correctly rounded) and its e4m3 code: the writers' q = e4m3(x / s). */
uint8_t orc_e4m3_div(double x, double s);
/* ceil(log2(t)) for t > 0. */
int orc_ceil_log2(double t);

/* 656 record from x[576]: fp32_rule 0 = power-of-two scales, 1 = unrounded fp32 scales. */
void orc_enc_656(const double *x, int fp32_rule, uint8_t rec[656]);
/* x[576] from a 656 record: bf16_rn(fp32(q * s)) for NoPE, stored bf16 for RoPE. */
void orc_dec_656(const uint8_t rec[656], double *x);
/* 584 token from x[512]: data row [576] and scale row [8]; amax_floor selects SGLang's variant. */
void orc_enc_584(const double *x, int amax_floor, uint8_t data[576], uint8_t scale[8]);
void orc_dec_584(const uint8_t data[576], const uint8_t scale[8], double *x);
/* 576 per-tensor record: q = e4m3(x / k_scale); dequantized fp32(q * k_scale). */
void orc_enc_fp8pt(const double *x, double k_scale, uint8_t rec[576]);
void orc_dec_fp8pt(const uint8_t rec[576], double k_scale, double *x);
/* 1152 bf16 record. */
void orc_enc_bf16(const double *x, uint8_t rec[1152]);
/* Indexer FP8: key [128] e4m3 and the fp32 scale (pow2 = 1: ue8m0-rounded scale). */
void orc_enc_idx8(const double *x, int pow2, uint8_t key[128], float *scale);
/* Indexer FP4: key [64] packed e2m1 (element 2i low nibble), scales [4] UE8M0. */
void orc_enc_idx4(const double *x, uint8_t key[64], uint8_t scale[4]);
void orc_dec_idx4(const uint8_t key[64], const uint8_t scale[4], double *x);

#endif
