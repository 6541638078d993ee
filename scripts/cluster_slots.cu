/* cluster_slots.cu -- how many thread-block clusters of n CTAs the device holds at once for a CTA
 * shaped like ak_sdx_main's (384 threads, one per SM by its 222 KB of shared memory); not part of
 * the library. The sparse decode planner asks the same of the real kernel (ak_sdx_clusters).
 * build: nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 scripts/cluster_slots.cu -o cluster_slots */
#include <cstdio>
#include <cuda_runtime.h>

__global__ void __launch_bounds__(384, 1) k_cta(int *o) {
    extern __shared__ int sm[];
    sm[threadIdx.x] = threadIdx.x;
    __syncthreads();
    if (o != nullptr) o[blockIdx.x] = sm[threadIdx.x ^ 1];
}

int main() {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return 1;
    const int smem = 222 * 1024;
    if (cudaFuncSetAttribute(k_cta, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess ||
        cudaFuncSetAttribute(k_cta, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess)
        return 1;
    printf("%s, %d SMs: clusters of n CTAs (384 threads, %d KB shared memory) resident at once:", prop.name,
           prop.multiProcessorCount, smem / 1024);
    for (int n : {1, 2, 3, 4, 5, 6, 7, 8, 16}) {
        cudaLaunchAttribute at;
        at.id = cudaLaunchAttributeClusterDimension;
        at.val.clusterDim.x = n;
        at.val.clusterDim.y = 1;
        at.val.clusterDim.z = 1;
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(n);
        cfg.blockDim = dim3(384);
        cfg.dynamicSmemBytes = smem;
        cfg.attrs = &at;
        cfg.numAttrs = 1;
        int k = -1;
        cudaError_t e = cudaOccupancyMaxActiveClusters(&k, (const void *)k_cta, &cfg);
        printf(" n %d: %d (%d CTAs)%s", n, k, k * n, e == cudaSuccess ? "" : cudaGetErrorString(e));
    }
    printf("\n");
    return 0;
}
