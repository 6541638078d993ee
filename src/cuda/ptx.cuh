/* ptx.cuh -- inline-PTX wrappers: shared loads and stores by shared address, ldmatrix, mma.sync
   bf16, non-coherent 128-bit loads (sm_80+ forms), and the sm_90a wgmma, proxy fence and cp.async
   forms. One wrapper per instruction, no policy. */
#ifndef AK_PTX_CUH
#define AK_PTX_CUH

#include <stdint.h>

/* Shared-memory address for ldmatrix/ld.shared. */
__device__ __forceinline__ uint32_t ak_smem_addr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* Shared loads and stores by 32-bit shared address, so that a warp-uniform base plus a lane's
   offset becomes one [R + UR] operand instead of an add per access. Volatile with a memory clobber:
   they keep their place against the mbarrier waits and arrivals around them. */
__device__ __forceinline__ uint4 ak_lds128(uint32_t addr) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr)
                 : "memory");
    return v;
}
__device__ __forceinline__ uint32_t ak_lds32(uint32_t addr) {
    uint32_t v;
    asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
    return v;
}
__device__ __forceinline__ void ak_sts128(uint32_t addr, uint4 v) {
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
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

/* Four 8x8 b16 matrices stored transposed: register k of lane l holds row l / 4, columns 2 (l % 4)
   and + 1 (low half first) of matrix k, as an mma accumulator pair; lane l addresses row (l & 7) of
   matrix (l >> 3) in memory, which receives that column of the register matrix. */
__device__ __forceinline__ void ak_stmatrix_x4_trans(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2,
                                                     uint32_t r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0),
                 "r"(r1), "r"(r2), "r"(r3)
                 : "memory");
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

/* Programmatic dependent launch (sm_90). A kernel launched with the programmatic-serialization
   attribute may start while the kernel before it in the stream still runs: it must wait before it
   reads anything that kernel writes (or that the caller wrote before it) and before it writes
   anything that kernel reads. The wait returns once every prerequisite grid has completed and its
   memory operations are visible. */
__device__ __forceinline__ void ak_grid_dep_wait(void) {
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
}

/* Lets the next kernel in the stream, if launched with the attribute, start its CTAs (as SMs
   free up): it still waits for this grid's completion in ak_grid_dep_wait. */
__device__ __forceinline__ void ak_grid_dep_launch(void) {
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

/* ---- Hopper (sm_90a): wgmma, async-proxy fence, cp.async ------------------------------------- */

/* Shared-memory matrix descriptor (PTX ISA, "matrix descriptor format"): start address >> 4 in
   bits 0-13, leading-dimension byte offset >> 4 in 16-29, stride-dimension byte offset >> 4 in
   32-45, base offset 0 (our tiles are 1024-byte aligned), swizzle mode in 62-63 (1 = 128-byte). */
__device__ __forceinline__ uint64_t ak_wgmma_desc_sw128(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((saddr >> 4) & 0x3fffu) | ((uint64_t)((lbo >> 4) & 0x3fffu) << 16) |
           ((uint64_t)((sbo >> 4) & 0x3fffu) << 32) | ((uint64_t)1 << 62);
}

/* Descriptor d with its start address advanced by `off` 16-byte units. The start field never carries
   (shared memory ends below 2^14 x 16 bytes), so only the low word changes: one 32-bit add where a
   64-bit add takes two. Used where it measured faster (x111: ak_sdx_main; the swap-AB kernel ran
   1.5% slower with it). */
__device__ __forceinline__ uint64_t ak_wgmma_desc_add(uint64_t d, uint32_t off) {
    uint64_t r;
    asm("mov.b64 %0, {%1, %2};\n" : "=l"(r) : "r"((uint32_t)d + off), "r"((uint32_t)(d >> 32)));
    return r;
}

/* Orders this warpgroup's earlier register and shared-memory accesses before the next wgmma. */
__device__ __forceinline__ void ak_wgmma_fence(void) {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

/* Closes the group of wgmma.mma_async issued since the last commit. */
__device__ __forceinline__ void ak_wgmma_commit(void) {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

/* Waits until no committed wgmma group of this warpgroup is pending. */
__device__ __forceinline__ void ak_wgmma_wait0(void) {
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}

/* Pins an accumulator register in program order between the volatile wgmma statements, so the
   compiler neither reads it before the wait nor writes it after the issue. */
__device__ __forceinline__ void ak_reg_fence(float &r) { asm volatile("" : "+f"(r)::"memory"); }

/* This thread's generic-proxy shared-memory writes become visible to the async proxy (wgmma). */
__device__ __forceinline__ void ak_fence_proxy_async(void) {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* D[64x64] (+)= A[64x16] B[16x64]: bf16 A and B from shared memory, both K-major (no transpose),
   f32 accumulators in the wgmma D fragment; scale_d 0 overwrites D. */
__device__ __forceinline__ void ak_wgmma_m64n64k16_ss(float *d, uint64_t da, uint64_t db, int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
                 "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(da), "l"(db), "r"(scale_d));
}

/* The 16 f32 accumulators of an m64n32 D fragment: operand list and constraints (d a float[16]). */
#define AK_WGMMA_D16_REGS "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define AK_WGMMA_D16_OUT(d) \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])

/* D[64x32] (+)= A[64x16] B[16x32]: as ak_wgmma_m64n64k16_ss with 32 columns (16 f32 per thread);
   TA 1 reads A MN-major (transpose bit set: its 64 rows are contiguous in memory), B stays K-major. */
template <int TA>
__device__ __forceinline__ void ak_wgmma_m64n32k16_ss(float *d, uint64_t da, uint64_t db, int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
                 AK_WGMMA_D16_REGS
                 "}, %16, %17, p, 1, 1, %19, 0;\n}\n"
                 : AK_WGMMA_D16_OUT(d)
                 : "l"(da), "l"(db), "r"(scale_d), "n"(TA));
}

/* D[64x16] (+)= A[64x16] B[16x16]: the same with 16 columns (8 f32 per thread). */
template <int TA>
__device__ __forceinline__ void ak_wgmma_m64n16k16_ss(float *d, uint64_t da, uint64_t db, int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, %11, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
                 : "l"(da), "l"(db), "r"(scale_d), "n"(TA));
}

/* D[64x16] (+)= A[64x16] B[16x16]: bf16 A from registers (the wgmma A fragment, as for
   ak_wgmma_m64n256k16_rs_tb), B from shared memory K-major, f32 accumulators (8 per thread). */
__device__ __forceinline__ void ak_wgmma_m64n16k16_rs(float *d, const uint32_t *a, uint64_t db, int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}

/* D[64x32] (+)= A[64x16] B[16x32]: bf16 A from registers (the wgmma A fragment), B from shared
   memory K-major, f32 accumulators (16 per thread). */
__device__ __forceinline__ void ak_wgmma_m64n32k16_rs(float *d, const uint32_t *a, uint64_t db, int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
                 AK_WGMMA_D16_REGS
                 "}, {%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}\n"
                 : AK_WGMMA_D16_OUT(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}

/* Waits until at most N committed wgmma groups of this warpgroup are pending (groups complete in
   commit order). */
template <int N> __device__ __forceinline__ void ak_wgmma_wait(void) {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

/* ---- mbarriers, named barriers, register reallocation (sm_90) ------------------------------- */

/* An mbarrier in shared memory that completes a phase after `count` arrivals. */
__device__ __forceinline__ void ak_mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

/* One arrival (release semantics at CTA scope: this thread's earlier writes are visible to a thread
   whose wait observes the phase completing). */
__device__ __forceinline__ void ak_mbar_arrive(uint32_t bar) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}

/* Waits until the phase of parity `parity` has completed (acquire semantics). */
__device__ __forceinline__ void ak_mbar_wait(uint32_t bar, uint32_t parity) {
    asm volatile("{\n.reg .pred p;\nAK_MBAR_WAIT_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra AK_MBAR_WAIT_%=;\n}\n" ::"r"(bar), "r"(parity) : "memory");
}

/* One arrival that also expects `tx` more bytes of asynchronous copies to complete on the barrier. */
__device__ __forceinline__ void ak_mbar_arrive_tx(uint32_t bar, uint32_t tx) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(bar), "r"(tx)
                 : "memory");
}

/* An L2 cache policy for the lines of the accesses it is given to: evict first (data read once, so
   that it does not push out what is read again), or the default priority. */
__device__ __forceinline__ uint64_t ak_l2_policy(bool evict_first) {
    uint64_t pol;
    if (evict_first) asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol));
    else asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;\n" : "=l"(pol));
    return pol;
}

/* ak_ldg_nc_v4 with the L2 cache policy pol (ak_l2_policy). */
__device__ __forceinline__ uint4 ak_ldg_nc_v4_pol(const void *p, uint64_t pol) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p), "l"(pol));
    return v;
}

/* `bytes` (a multiple of 16; both addresses 16-byte aligned) global -> shared by the bulk copy engine,
   completing as transaction bytes on the mbarrier `bar`, with the L2 cache policy pol (ak_l2_policy)
   for the source's lines. */
__device__ __forceinline__ void ak_bulk_g2s_hint(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar,
                                                 uint64_t pol) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;\n"
                 ::"r"(dst), "l"(src), "r"(bytes), "r"(bar), "l"(pol)
                 : "memory");
}

/* Asks L2 to fetch [src, src + bytes) (16-byte aligned, bytes a multiple of 16). A hint with no
   result, so a kernel may issue it before its dependency wait on data an earlier grid may still
   write: L2 is where global writes become coherent, so a line fetched early is updated by them
   (only an L1 could keep a stale copy, and this reaches no L1). */
__device__ __forceinline__ void ak_bulk_prefetch_l2(const void *src, uint32_t bytes) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(src), "r"(bytes) : "memory");
}

/* Barrier `id` (1..15) among `n` threads (a multiple of 32): a subset of the CTA synchronises. */
__device__ __forceinline__ void ak_bar_sync(int id, int n) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}

/* Arrives on barrier `id` among `n` threads without waiting (the others bar.sync on it). */
__device__ __forceinline__ void ak_bar_arrive(int id, int n) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}

/* bar.sync that also returns whether any of the n threads passed pred true (bar.red.or). */
__device__ __forceinline__ bool ak_bar_any(int id, int n, bool pred) {
    uint32_t r;
    asm volatile("{\n.reg .pred p, q;\nsetp.ne.u32 q, %1, 0;\nbar.red.or.pred p, %2, %3, q;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(r)
                 : "r"((uint32_t)pred), "r"(id), "r"(n)
                 : "memory");
    return r != 0;
}

/* Shrinks / grows the registers of every warp of this warpgroup to N per thread. */
template <int N> __device__ __forceinline__ void ak_setmaxnreg_dec(void) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N> __device__ __forceinline__ void ak_setmaxnreg_inc(void) {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

/* The 128 f32 accumulators of an m64n256 D fragment: operand list and constraints (d a float[128]). */
#define AK_WGMMA_D128_REGS \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define AK_WGMMA_D128_OUT(d) \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
    "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
    "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
    "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
    "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
    "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
    "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
    "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
    "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

/* D[64x256] += A[64x16] B[16x256]: bf16 A from registers (the wgmma A fragment: a[0] rows g,
   columns 2c..2c+1; a[1] rows g + 8; a[2], a[3] the same at columns + 8; g = lane / 4 + 16 x warp,
   c = lane % 4), B from shared memory MN-major (transpose bit set), f32 accumulators. */
__device__ __forceinline__ void ak_wgmma_m64n256k16_rs_tb(float *d, const uint32_t *a, uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" AK_WGMMA_D128_REGS
                 "}, {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"
                 : AK_WGMMA_D128_OUT(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

/* The same with A from shared memory too (K-major, descriptor da), for a warpgroup that multiplies
   by a P another warpgroup wrote. */
__device__ __forceinline__ void ak_wgmma_m64n256k16_ss_tb(float *d, uint64_t da, uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" AK_WGMMA_D128_REGS
                 "}, %128, %129, p, 1, 1, 0, 1;\n}\n"
                 : AK_WGMMA_D128_OUT(d)
                 : "l"(da), "l"(db));
}

/* 2^x by the special-function unit (ex2.approx.ftz: relative error ~2^-22, results below 2^-126
   flush to 0), for softmax weights; exp2f adds a range reduction of four instructions. */
__device__ __forceinline__ float ak_ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* log2(x) by the special-function unit (lg2.approx.ftz: absolute error ~2^-22.6), for x >= 1, where
   __log2f's subnormal fix-up never applies but still costs three instructions. */
__device__ __forceinline__ float ak_lg2(float x) {
    float y;
    asm("lg2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* The warp's largest x in one redux.sync on the floats' order-preserving integer images (negative
   floats' magnitude bits flipped), not five dependent shuffles. -0 ranks below +0; NaN is not expected. */
__device__ __forceinline__ float ak_warp_max(float x) {
    int i = __float_as_int(x);
    i ^= (i >> 31) & 0x7fffffff;
    i = __reduce_max_sync(0xffffffffu, i);
    return __int_as_float(i ^ ((i >> 31) & 0x7fffffff));
}

/* 16 bytes global -> shared without registers; src_size 0 reads nothing and zero-fills. */
__device__ __forceinline__ void ak_cp_async16(uint32_t dst, const void *src, uint32_t src_size) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_size)
                 : "memory");
}

/* 8 bytes global -> shared (src 8-byte aligned); src_size 0 zero-fills. */
__device__ __forceinline__ void ak_cp_async8(uint32_t dst, const void *src, uint32_t src_size) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src), "r"(src_size)
                 : "memory");
}

/* One arrival on mbarrier `bar` once every earlier cp.async of this thread has completed (the
   barrier's count must include it: .noinc). */
__device__ __forceinline__ void ak_cp_async_mbar_arrive(uint32_t bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void ak_cp_async_commit(void) {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/* Waits until at most N of this thread's newest cp.async groups are still in flight. */
template <int N> __device__ __forceinline__ void ak_cp_async_wait_group(void) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* Waits for every cp.async of this thread (a barrier then publishes them to the CTA). */
__device__ __forceinline__ void ak_cp_async_wait_all(void) {
    asm volatile("cp.async.wait_all;\n" ::: "memory");
}

#endif /* AK_PTX_CUH */
