//go:build ignore

// (The constraint above keeps the go tool, which builds with CGO_ENABLED=0, away from
// this C file; make compiles it into bin/libidunno_kernel.so.)

/* peak.c: measures the machine's FP32 fused multiply-add peak, its bf16 dot-product peak
 * (AMX tiles where oneDNN uses them, else AVX512_BF16) and its AMX int8 peak (the VNNI one is
 * in quant.c), for fraction-of-peak reports. */
#define _GNU_SOURCE
#include <immintrin.h>
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>

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

/* ---- bf16 ---- */

/* AVX512_BF16: vdpbf16ps adds two bf16 products into each f32 lane (4 FLOPs a lane). */
__attribute__((target("avx512f,avx512bf16"))) static double dpbf16_512(long iters) {
    __m512 a[16];
    __m512bh m = (__m512bh)_mm512_set1_epi16(0x3f80); /* bf16 1.0 */
    for (int i = 0; i < 16; i++) a[i] = _mm512_set1_ps((float)i);
    for (long n = 0; n < iters; n++)
        for (int i = 0; i < 16; i++) a[i] = _mm512_dpbf16_ps(a[i], m, m);
    __m512 s = a[0];
    for (int i = 1; i < 16; i++) s = _mm512_add_ps(s, a[i]);
    float out[16];
    _mm512_storeu_ps(out, s);
    return out[0] * 0.0 + (double)iters * 16 * 16 * 4;
}

/* AMX: tdpbf16ps multiplies a 16x32 bf16 tile by a 32x16 (pair-interleaved) one into a 16x16
 * f32 tile: 16*16*32 multiply-adds. Four independent accumulators, as oneDNN's kernels keep. */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg_t;

static int amx_ok(void) {
    /* Linux gives a thread AMX state only on request (ARCH_REQ_XCOMP_PERM, XTILEDATA) */
    return __builtin_cpu_supports("avx512f") && syscall(SYS_arch_prctl, 0x1023, 18) == 0;
}

/* amx_setup configures tiles 0-7 as 16 rows x 64 bytes, zeroes the accumulators 0-3 and
 * loads zeros into the operand tiles 4-7 (the peak loops' values do not matter). The
 * configuration and the operand are static: ldtilecfg's read of a stack object is not
 * seen by the compiler. */
__attribute__((target("amx-tile"))) static void amx_setup(void) {
    static const uint8_t zeros[16 * 64] __attribute__((aligned(64))) = {0};
    static const amx_cfg_t cfg __attribute__((aligned(64))) = {
        .palette = 1, .colsb = {64, 64, 64, 64, 64, 64, 64, 64}, .rows = {16, 16, 16, 16, 16, 16, 16, 16}};
    _tile_loadconfig(&cfg);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, zeros, 64);
    _tile_loadd(5, zeros, 64);
    _tile_loadd(6, zeros, 64);
    _tile_loadd(7, zeros, 64);
}

__attribute__((target("amx-tile,amx-bf16"))) static double amx_run(long iters) {
    amx_setup();
    for (long n = 0; n < iters; n++) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_release();
    return (double)iters * 4 * 16 * 16 * 32 * 2;
}

static int use_amx(void) {
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    return (isa & dnnl_cpu_isa_avx512_core_amx) == dnnl_cpu_isa_avx512_core_amx;
}

static double run_bf16(long iters, int amx) {
    if (amx) return amx_ok() ? amx_run(iters / 4 + 1) : 0;
    return dpbf16_512(iters);
}

IDK_API double idk_peak_bf16_gflops(int32_t threads, double seconds) {
    if (threads < 1) threads = 1;
    if (seconds <= 0) seconds = 0.2;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512bf16")) return 0;
    int amx = use_amx();
    long iters = 1 << 14;
    double best = 0, spent = 0;
    while (spent < seconds) {
        double t0 = omp_get_wtime(), flops = 0;
#pragma omp parallel num_threads(threads) reduction(+ : flops)
        flops += run_bf16(iters, amx);
        double dt = omp_get_wtime() - t0;
        spent += dt;
        if (flops == 0) return 0;
        if (dt < seconds / 10) {
            iters *= 2;
            continue;
        }
        double g = flops / dt / 1e9;
        if (g > best) best = g;
    }
    return best;
}

/* ---- int8 on AMX ---- */

/* tdpbusd multiplies a 16x64 u8 tile by a 64x16 (quad-interleaved) s8 one into a 16x16 s32
 * tile: 16*16*64 multiply-adds, counted as two ops each like vpdpbusd's (quant.c). Four
 * independent accumulators, as for tdpbf16ps. */
__attribute__((target("amx-tile,amx-int8"))) static double amx_int8_run(long iters) {
    amx_setup();
    for (long n = 0; n < iters; n++) {
        _tile_dpbusd(0, 4, 6);
        _tile_dpbusd(1, 4, 7);
        _tile_dpbusd(2, 5, 6);
        _tile_dpbusd(3, 5, 7);
    }
    _tile_release();
    return (double)iters * 4 * 16 * 16 * 64 * 2;
}

/* idk_int8_amx_run runs the AMX int8 loop for `iters` rounds on `threads` threads and returns
 * the integer ops done, or 0 when oneDNN does not use AMX here (its int8 kernels then run on
 * VNNI: idk_int8_run). */
IDK_API double idk_int8_amx_run(int32_t threads, int64_t iters) {
    if (threads < 1) threads = 1;
    if (iters < 1) iters = 1;
    __builtin_cpu_init();
    if (!use_amx() || !__builtin_cpu_supports("avx512f")) return 0;
    double ops = 0;
    int fail = 0;
#pragma omp parallel num_threads(threads) reduction(+ : ops) reduction(| : fail)
    {
        if (amx_ok())
            ops += amx_int8_run((long)iters);
        else
            fail = 1;
    }
    return fail ? 0 : ops;
}
