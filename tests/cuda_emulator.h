// A CUDA emulator for tinyinfer's RawKernels on the CPU (tests/test_kernels_emulated.py): each thread of a block
// is a std::thread; __syncthreads is a barrier of the block, a warp shuffle an exchange behind a barrier of its
// warp; __shared__ arrays are static (the blocks of a grid run one after another); __half is the compiler's
// IEEE binary16 (_Float16). What it checks: the kernels' indexing, barriers and reductions. What it does not:
// timing, memory coalescing, races a real GPU's scheduling could expose beyond the barriers modelled here.
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>
using std::max;
using std::min;

struct dim3 { int x = 1, y = 1, z = 1; };
thread_local dim3 threadIdx, blockIdx;
dim3 blockDim, gridDim;
std::barrier<>* block_barrier;
std::vector<std::unique_ptr<std::barrier<>>> warp_barriers;
float shuffled[1024];

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __syncthreads() block_barrier->arrive_and_wait()
typedef _Float16 __half;
inline float __half2float(__half h) { return (float)h; }
inline __half __float2half(float f) { return (__half)f; }

inline float __shfl_down_sync(unsigned, float value, int offset) {
    const int lane = threadIdx.x % 32;
    std::barrier<>& warp = *warp_barriers[threadIdx.x / 32];
    shuffled[threadIdx.x] = value;
    warp.arrive_and_wait();
    const float out = lane + offset < 32 ? shuffled[threadIdx.x + offset] : value;
    warp.arrive_and_wait();
    return out;
}

template <class Kernel> void launch(dim3 grid, dim3 block, Kernel kernel) {
    gridDim = grid;
    blockDim = block;
    for (int z = 0; z < grid.z; ++z)
        for (int y = 0; y < grid.y; ++y)
            for (int x = 0; x < grid.x; ++x) {
                std::barrier<> whole(block.x);
                block_barrier = &whole;
                warp_barriers.clear();
                for (int w = 0; w < (block.x + 31) / 32; ++w)
                    warp_barriers.emplace_back(new std::barrier<>(min(32, block.x - 32 * w)));
                std::vector<std::thread> threads;
                for (int t = 0; t < block.x; ++t)
                    threads.emplace_back([=] { threadIdx = {t, 0, 0}; blockIdx = {x, y, z}; kernel(); });
                for (auto& thread : threads) thread.join();
            }
}

template <class T> std::vector<T> load(const char* path, size_t n) {
    std::vector<T> values(n);
    FILE* file = fopen(path, "rb");
    if (fread(values.data(), sizeof(T), n, file) != n) std::abort();
    fclose(file);
    return values;
}

template <class T> void save(const char* path, const std::vector<T>& values) {
    FILE* file = fopen(path, "wb");
    fwrite(values.data(), sizeof(T), values.size(), file);
    fclose(file);
}
