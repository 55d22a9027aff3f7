//go:build ignore

// (The constraint above keeps the go tool, which builds with CGO_ENABLED=0, away from
// this C file; make compiles it into bin/libidunno_kernel.so.)

/* peak.c: measures the machine's FP32 fused multiply-add peak, for fraction-of-peak reports. */
#define _POSIX_C_SOURCE 200809L
#include <immintrin.h>
#include <omp.h>

#include "internal.h"

/* Each loop keeps 16 independent accumulators so the FMA units never wait on latency. */
__attribute__((target("avx512f"))) static double fma512(long iters) {
    __m512 a[16], m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    for (int i = 0; i < 16; i++) a[i] = _mm512_set1_ps((float)i);
    for (long n = 0; n < iters; n++)
        for (int i = 0; i < 16; i++) a[i] = _mm512_fmadd_ps(a[i], m, c);
    __m512 s = a[0];
    for (int i = 1; i < 16; i++) s = _mm512_add_ps(s, a[i]);
    float out[16];
    _mm512_storeu_ps(out, s);
    return out[0] * 0.0 + (double)iters * 16 * 16 * 2;
}

__attribute__((target("avx2,fma"))) static double fma256(long iters) {
    __m256 a[12], m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    for (int i = 0; i < 12; i++) a[i] = _mm256_set1_ps((float)i);
    for (long n = 0; n < iters; n++)
        for (int i = 0; i < 12; i++) a[i] = _mm256_fmadd_ps(a[i], m, c);
    __m256 s = a[0];
    for (int i = 1; i < 12; i++) s = _mm256_add_ps(s, a[i]);
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0] * 0.0 + (double)iters * 12 * 8 * 2;
}

static double fma_scalar(long iters) {
    volatile float m = 0.999999f;
    float a[8] = {0};
    for (long n = 0; n < iters; n++)
        for (int i = 0; i < 8; i++) a[i] = a[i] * m + 1e-7f;
    return a[0] * 0.0 + (double)iters * 8 * 2;
}

static double run(long iters) {
    if (__builtin_cpu_supports("avx512f")) return fma512(iters);
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return fma256(iters);
    return fma_scalar(iters);
}

IDK_API double idk_peak_gflops(int32_t threads, double seconds) {
    if (threads < 1) threads = 1;
    if (seconds <= 0) seconds = 0.2;
    __builtin_cpu_init();
    /* calibrate: grow the iteration count until one round takes a tenth of the budget */
    long iters = 1 << 16;
    double best = 0, spent = 0;
    while (spent < seconds) {
        double t0 = omp_get_wtime(), flops = 0;
#pragma omp parallel num_threads(threads) reduction(+ : flops)
        flops += run(iters);
        double dt = omp_get_wtime() - t0;
        spent += dt;
        if (dt < seconds / 10) {
            iters *= 2;
            continue;
        }
        double g = flops / dt / 1e9;
        if (g > best) best = g;
    }
    return best;
}

IDK_API double idk_fma_run(int32_t threads, int64_t iters) {
    if (threads < 1) threads = 1;
    if (iters < 1) iters = 1;
    __builtin_cpu_init();
    double flops = 0;
#pragma omp parallel num_threads(threads) reduction(+ : flops)
    flops += run((long)iters);
    return flops;
}
