/* ptx.cuh -- inline-PTX wrappers (sm_80+ forms, used on sm_90a): ldmatrix, mma.sync bf16,
   non-coherent 128-bit loads. One wrapper per instruction, no policy. */
#ifndef AK_PTX_CUH
#define AK_PTX_CUH

#include <stdint.h>

/* Shared-memory address for ldmatrix/ld.shared. */
__device__ __forceinline__ uint32_t ak_smem_addr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* Four 8x8 b16 matrices; lane l addresses row (l & 7) of matrix (l >> 3). */
__device__ __forceinline__ void ak_ldmatrix_x4(uint32_t addr, uint32_t &r0, uint32_t &r1,
                                               uint32_t &r2, uint32_t &r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

/* The same, transposed (each thread gets a column pair instead of a row pair). */
__device__ __forceinline__ void ak_ldmatrix_x4_trans(uint32_t addr, uint32_t &r0, uint32_t &r1,
                                                     uint32_t &r2, uint32_t &r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

/* Two 8x8 b16 matrices; lanes 0..15 give the addresses. */
__device__ __forceinline__ void ak_ldmatrix_x2(uint32_t addr, uint32_t &r0, uint32_t &r1) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r0), "=r"(r1)
                 : "r"(addr));
}

/* D = A[16x16] * B[16x8] + D, bf16 inputs, fp32 accumulators (row.col fragments). */
__device__ __forceinline__ void ak_mma_bf16_16816(float *d, const uint32_t *a, uint32_t b0,
                                                  uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* 16 bytes through the non-coherent (read-only) path; the cache is never written by the kernel. */
__device__ __forceinline__ uint4 ak_ldg_nc_v4(const void *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

#endif /* AK_PTX_CUH */
