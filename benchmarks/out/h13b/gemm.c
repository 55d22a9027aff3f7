/* gemm.c (helper h13b's experiment, not part of the kernel: it did not beat brgemm, see
 * benchmarks/README.md): an fp32 matrix product against constant weights (a Linear layer: x M x K times
 * W K x N, a bias, post-ops), the weights packed once at plan time in oneDNN's BA16a64b
 * (brgemm's layout: panels of 64 columns, K padded to 16, K-major inside a panel). Each
 * output sums its K products in order k = 0, 1, ... in one register (fused multiply-adds),
 * whatever the blocking and the threads, so the bytes do not depend on the thread count. */
#include <immintrin.h>
#include <omp.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define GEMM_NR 64 /* columns of a panel: 4 zmm */
#define GEMM_MR 14 /* most rows of a register tile */

/* post-op codes, applied in order after the bias */
enum { GEMM_POST_RELU = 1, GEMM_POST_GELU = 2, GEMM_POST_SUM = 3 };
#define GEMM_MAX_POST 4

typedef struct {
    const float *a; /* M x K, rows lda apart */
    int64_t lda;
    const float *w; /* BA16a64b: [N/64][Kp][64] */
    int64_t Kp;
    const float *bias; /* N or NULL */
    float *y;          /* M x N, rows ldy apart; the sum post-op's summand on entry */
    int64_t ldy;
    int64_t M, K, N;
    int npost;
    int post[GEMM_MAX_POST];
} gemm_args_t;

/* gemm_exp: e^x for x <= 0 (-x*x of the GELU), Cephes' expf polynomial on a range reduced by
 * ln 2, within 2 ulp; underflows to 0 below -87. */
static inline __attribute__((always_inline, target("avx512f"))) __m512 gemm_exp(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.3f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 q = _mm512_set1_ps(1.9875691500E-4f);
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.3981999507E-3f));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(8.3334519073E-3f));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(4.1665795894E-2f));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.6666665459E-1f));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(5.0000001201E-1f));
    q = _mm512_fmadd_ps(q, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(q, n);
}

/* gemm_gelu: 0.5 x (1 + erf(x / sqrt 2)), erf by Abramowitz and Stegun 7.1.26 (|error| <=
 * 1.5e-7), the formula oneDNN's gelu_erf uses. */
static inline __attribute__((always_inline, target("avx512f"))) __m512 gemm_gelu(__m512 v) {
    const __m512 one = _mm512_set1_ps(1.0f);
    __m512 x = _mm512_mul_ps(v, _mm512_set1_ps(0.70710678118654752f));
    __m512 ax = _mm512_abs_ps(x);
    __m512 t = _mm512_div_ps(one, _mm512_fmadd_ps(ax, _mm512_set1_ps(0.3275911f), one));
    __m512 pol = _mm512_set1_ps(1.061405429f);
    pol = _mm512_fmadd_ps(pol, t, _mm512_set1_ps(-1.453152027f));
    pol = _mm512_fmadd_ps(pol, t, _mm512_set1_ps(1.421413741f));
    pol = _mm512_fmadd_ps(pol, t, _mm512_set1_ps(-0.284496736f));
    pol = _mm512_fmadd_ps(pol, t, _mm512_set1_ps(0.254829592f));
    __m512 e = gemm_exp(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(x, x)));
    __m512 erfa = _mm512_fnmadd_ps(_mm512_mul_ps(pol, t), e, one); /* erf(|x|) */
    __m512 erf = _mm512_castsi512_ps(_mm512_xor_si512(
        _mm512_castps_si512(erfa), _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0x80000000))));
    __m512 h = _mm512_mul_ps(v, _mm512_set1_ps(0.5f));
    return _mm512_fmadd_ps(h, erf, h);
}

static int gemm_pf = 0;

/* gemm_tile computes rows [0, MR) of one panel's columns [0, nc) (nc <= 64; masked past N)
 * over k in [k0, k1): from zero (k0 == 0) or from the partial sums in part (64 floats a
 * row), into part (k1 < K) or, adding the bias and applying the post-ops, into y. */
static inline __attribute__((always_inline, target("avx512f"))) void
gemm_tile(const gemm_args_t *g, const float *a, const float *w, float *y, const float *bias, int64_t nc,
          float *part, int64_t k0, int64_t k1, const char *pf, int64_t npf, const int MR, const int NV) {
    __m512 c[GEMM_MR][4];
#pragma GCC unroll 16
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++)
            c[r][j] = k0 ? _mm512_load_ps(part + r * GEMM_NR + 16 * j) : _mm512_setzero_ps();
    const int64_t lda = g->lda;
    for (int64_t k = k0; k < k1; k++) {
        const float *wk = w + k * GEMM_NR;
        if (k - k0 < npf) _mm_prefetch(pf + (k - k0) * 64, _MM_HINT_T1);
        if (gemm_pf)
#pragma GCC unroll 4
            for (int j = 0; j < NV; j++) _mm_prefetch((const char *)(wk + gemm_pf * GEMM_NR + 16 * j), _MM_HINT_T0);
        __m512 b[4];
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++) b[j] = _mm512_load_ps(wk + 16 * j);
#pragma GCC unroll 16
        for (int r = 0; r < MR; r++) {
            __m512 av = _mm512_set1_ps(a[r * lda + k]);
#pragma GCC unroll 4
            for (int j = 0; j < NV; j++) c[r][j] = _mm512_fmadd_ps(av, b[j], c[r][j]);
        }
    }
    if (k1 < g->K) {
#pragma GCC unroll 16
        for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
            for (int j = 0; j < NV; j++) _mm512_store_ps(part + r * GEMM_NR + 16 * j, c[r][j]);
        return;
    }
    __mmask16 m[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        int64_t left = nc - 16 * j;
        m[j] = left >= 16 ? 0xffff : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
    }
    __m512 bv[4];
#pragma GCC unroll 4
    for (int j = 0; j < NV; j++) bv[j] = bias ? _mm512_maskz_loadu_ps(m[j], bias + 16 * j) : _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++) {
            __m512 v = _mm512_add_ps(c[r][j], bv[j]);
            float *yp = y + r * g->ldy + 16 * j;
            for (int i = 0; i < g->npost; i++) switch (g->post[i]) {
                case GEMM_POST_RELU: v = _mm512_max_ps(v, _mm512_setzero_ps()); break;
                case GEMM_POST_GELU: v = gemm_gelu(v); break;
                default: v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m[j], yp)); break;
                }
            _mm512_mask_storeu_ps(yp, m[j], v);
        }
}

#define GEMM_TILE_FN(R, V)                                                                                            \
    static __attribute__((target("avx512f"))) void gemm_tile##R##x##V(const gemm_args_t *g, const float *a,          \
                                                                      const float *w, float *y, const float *bias,    \
                                                                      int64_t nc, float *part, int64_t k0, int64_t k1, \
                                                                      const char *pf, int64_t npf) {                  \
        gemm_tile(g, a, w, y, bias, nc, part, k0, k1, pf, npf, R, V);                                                          \
    }
GEMM_TILE_FN(1, 4)
GEMM_TILE_FN(2, 4)
GEMM_TILE_FN(3, 4)
GEMM_TILE_FN(4, 4)
GEMM_TILE_FN(5, 4)
GEMM_TILE_FN(6, 4)
GEMM_TILE_FN(1, 2)
GEMM_TILE_FN(2, 2)
GEMM_TILE_FN(3, 2)
GEMM_TILE_FN(4, 2)
GEMM_TILE_FN(5, 2)
GEMM_TILE_FN(6, 2)
GEMM_TILE_FN(7, 2)
GEMM_TILE_FN(8, 2)
GEMM_TILE_FN(9, 2)
GEMM_TILE_FN(10, 2)
GEMM_TILE_FN(11, 2)
GEMM_TILE_FN(12, 2)
GEMM_TILE_FN(13, 2)
GEMM_TILE_FN(14, 2)

typedef void (*gemm_tile_fn)(const gemm_args_t *, const float *, const float *, float *, const float *, int64_t,
                             float *, int64_t, int64_t, const char *, int64_t);
static const gemm_tile_fn gemm_tiles4[7] = {NULL, gemm_tile1x4, gemm_tile2x4, gemm_tile3x4,
                                            gemm_tile4x4, gemm_tile5x4, gemm_tile6x4};
static const gemm_tile_fn gemm_tiles2[15] = {NULL,          gemm_tile1x2,  gemm_tile2x2,  gemm_tile3x2,  gemm_tile4x2,
                                             gemm_tile5x2,  gemm_tile6x2,  gemm_tile7x2,  gemm_tile8x2,  gemm_tile9x2,
                                             gemm_tile10x2, gemm_tile11x2, gemm_tile12x2, gemm_tile13x2, gemm_tile14x2};
static int gemm_mr = 6, gemm_nv = 4, gemm_pfnext = 1;

/* gemm_panels computes the panels [p0, p1), one at a time, K in blocks of kc: a block of a
 * panel (kc x 64 floats) stays in L1 while every row block passes it, their partial sums
 * kept in part (M x 64 floats). */
static int64_t gemm_mc = 0;

static void gemm_panels(const gemm_args_t *g, int64_t p0, int64_t p1, int64_t kc, float *part) {
    int64_t mc = gemm_mc > 0 ? (gemm_mc + gemm_mr - 1) / gemm_mr * gemm_mr : g->M;
    for (int64_t c0 = 0; c0 < g->M; c0 += mc) {
        int64_t c1 = g->M - c0 < mc ? g->M : c0 + mc;
        for (int64_t pn = p0; pn < p1; pn++) {
            int64_t n0 = pn * GEMM_NR, nc = g->N - n0 < GEMM_NR ? g->N - n0 : GEMM_NR;
            const float *w = g->w + pn * g->Kp * GEMM_NR, *bias = g->bias ? g->bias + n0 : NULL;
            const char *pf = (const char *)(w + g->Kp * GEMM_NR);
            int64_t lines = pn + 1 < p1 && gemm_pfnext ? g->Kp * GEMM_NR / 16 : 0,
                    tiles = (c1 - c0 + gemm_mr - 1) / gemm_mr * (g->K + kc - 1) / kc * (4 / gemm_nv),
                    per = (lines + tiles - 1) / tiles, done = 0;
            for (int64_t k0 = 0; k0 < g->K; k0 += kc) {
                int64_t k1 = g->K - k0 < kc ? g->K : k0 + kc;
                for (int h = 0; h < 4 / gemm_nv; h++) {
                    int64_t nh = nc - h * 16 * gemm_nv;
                    if (nh <= 0) break;
                    for (int64_t m0 = c0; m0 < c1; m0 += gemm_mr) {
                        int64_t mr = c1 - m0 < gemm_mr ? c1 - m0 : gemm_mr;
                        (gemm_nv == 4 ? gemm_tiles4 : gemm_tiles2)[mr](
                            g, g->a + m0 * g->lda, w + h * 32, g->y + m0 * g->ldy + n0 + h * 32,
                            bias ? bias + h * 32 : NULL, nh, part + m0 * GEMM_NR + h * 32, k0, k1, pf + done * 64,
                            per < lines - done ? per : lines - done);
                        done = done + per < lines ? done + per : lines;
                    }
                }
            }
        }
    }
}

/* gemm_run splits the panels evenly across nth threads: each panel is read by one thread. */
static void gemm_run(const gemm_args_t *g, int nth, int64_t kc) {
    int64_t np = (g->N + GEMM_NR - 1) / GEMM_NR;
    if (nth > np) nth = (int)np;
    if (kc <= 0 || kc > g->K) kc = g->K;
#pragma omp parallel num_threads(nth)
    {
        int t = 0, n = 1;
#ifdef _OPENMP
        t = omp_get_thread_num();
        n = omp_get_num_threads();
#endif
        float *part = kc < g->K ? aligned_alloc(64, sizeof(float) * (size_t)(g->M + GEMM_MR) * GEMM_NR) : NULL;
        gemm_panels(g, np * t / n, np * (t + 1) / n, kc, part);
        free(part);
    }
}

/* gemm_pack packs w (K x N, row-major) into BA16a64b ([N/64][Kp][64], zero-padded) for
 * tests and the standalone driver; plans get the layout from oneDNN's reorder. */
static void gemm_pack(const float *w, int64_t K, int64_t N, int64_t Kp, float *out) {
    int64_t np = (N + GEMM_NR - 1) / GEMM_NR;
    memset(out, 0, sizeof(float) * (size_t)(np * Kp * GEMM_NR));
    for (int64_t pn = 0; pn < np; pn++)
        for (int64_t k = 0; k < K; k++)
            for (int64_t j = 0; j < GEMM_NR && pn * GEMM_NR + j < N; j++)
                out[(pn * Kp + k) * GEMM_NR + j] = w[k * N + pn * GEMM_NR + j];
}
