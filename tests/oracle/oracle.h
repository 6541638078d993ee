/*
 * oracle.h -- the double-precision test oracle, written apart from the library: it shares no code
 * with src/ (decoders are re-derived from the format definitions in layouts.md with ldexp).
 * Each op family adds its reference functions in its own oracle_<family>.c.
 */
#ifndef AK_ORACLE_H
#define AK_ORACLE_H

#include <stddef.h>
#include <stdint.h>

/* ---- number formats (oracle_numeric.c) ---- */
double orc_bf16(uint16_t h);
double orc_f16(uint16_t h);
double orc_e4m3(uint8_t b);   /* NaN for 0x7f / 0xff */
double orc_ue8m0(uint8_t e);  /* 2^(e-127); NaN for 0xff */
double orc_e2m1(uint8_t nib); /* low 4 bits */
/* Nearest bf16 to x (ties to even), as bits: for building test inputs without the library. */
uint16_t orc_bf16_bits(double x);

#endif
