/* standalone: 1x1 conv, batch 1, own kernel (pieces claimed from both ends) vs oneDNN, on nChw16c or (NHWC=1) nhwc.
 * gcc -O3 -march=native -fopenmp -o pconv pconv.c -ldnnl; ./pconv IC OC H ROUNDS (env NHWC, DYN, SUM, NCOPY, CHUNK) */
#define _GNU_SOURCE
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <oneapi/dnnl/dnnl.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
#define CK(x) do{dnnl_status_t s_=(x);if(s_!=dnnl_success){fprintf(stderr,"%s: %d\n",#x,s_);exit(1);}}while(0)

/* tile: P pixels x J blocks of 16 output channels. x: input at tile's first pixel of block 0 (xs floats
 * between ic blocks); w: panel [ICB*16][J*16]; y: output at the tile's first pixel of its first block */
static inline __attribute__((always_inline)) void tile(const float *x, int64_t xs, int64_t icb, const float *w,
    const float *bias, float *y, int64_t ys, const int J, const int P, int sum, int relu, int64_t xps, int64_t yps) {
    __m512 acc[28][4];
    for (int j = 0; j < J; j++) { __m512 b = _mm512_loadu_ps(bias + 16 * j); for (int p = 0; p < P; p++) acc[p][j] = b; }
    for (int64_t cb = 0; cb < icb; cb++) {
        const float *xb = x + cb * xs, *wb = w + cb * 16 * J * 16;
#pragma GCC unroll 16
        for (int l = 0; l < 16; l++) {
            __m512 wv[4];
            for (int j = 0; j < J; j++) wv[j] = _mm512_loadu_ps(wb + l * J * 16 + 16 * j);
#pragma GCC unroll 28
            for (int p = 0; p < P; p++) {
                __m512 b = _mm512_set1_ps(xb[p * xps + l]);
                for (int j = 0; j < J; j++) acc[p][j] = _mm512_fmadd_ps(b, wv[j], acc[p][j]);
            }
        }
    }
    for (int j = 0; j < J; j++)
        for (int p = 0; p < P; p++) {
            __m512 v = acc[p][j];
            if (sum) v = _mm512_add_ps(v, _mm512_loadu_ps(y + j * ys + p * yps));
            if (relu) v = _mm512_max_ps(v, _mm512_setzero_ps());
            _mm512_storeu_ps(y + j * ys + p * yps, v);
        }
}

typedef void (*tile_fn)(const float *, int64_t, int64_t, const float *, const float *, float *, int64_t, int, int, int64_t, int64_t);
#define TILE(J, P) static void tile_##J##_##P(const float *x, int64_t xs, int64_t icb, const float *w, const float *bias, float *y, int64_t ys, int sum, int relu, int64_t xps, int64_t yps) { tile(x, xs, icb, w, bias, y, ys, J, P, sum, relu, xps, yps); }
TILE(4,1)
TILE(4,2)
TILE(4,3)
TILE(4,4)
TILE(4,5)
TILE(4,6)
TILE(4,7)
TILE(3,1)
TILE(3,2)
TILE(3,3)
TILE(3,4)
TILE(3,5)
TILE(3,6)
TILE(3,7)
TILE(3,8)
TILE(2,1)
TILE(2,2)
TILE(2,3)
TILE(2,4)
TILE(2,5)
TILE(2,6)
TILE(2,7)
TILE(2,8)
TILE(2,9)
TILE(2,10)
TILE(2,11)
TILE(2,12)
TILE(1,1)
TILE(1,2)
TILE(1,3)
TILE(1,4)
TILE(1,5)
TILE(1,6)
TILE(1,7)
TILE(1,8)
TILE(1,9)
TILE(1,10)
TILE(1,11)
TILE(1,12)
TILE(1,13)
TILE(1,14)
TILE(1,15)
TILE(1,16)
static const tile_fn TJ4[8] = {0,tile_4_1,tile_4_2,tile_4_3,tile_4_4,tile_4_5,tile_4_6,tile_4_7};
static const tile_fn TJ3[9] = {0,tile_3_1,tile_3_2,tile_3_3,tile_3_4,tile_3_5,tile_3_6,tile_3_7,tile_3_8};
static const tile_fn TJ2[13] = {0,tile_2_1,tile_2_2,tile_2_3,tile_2_4,tile_2_5,tile_2_6,tile_2_7,tile_2_8,tile_2_9,tile_2_10,tile_2_11,tile_2_12};
static const tile_fn TJ1[17] = {0,tile_1_1,tile_1_2,tile_1_3,tile_1_4,tile_1_5,tile_1_6,tile_1_7,tile_1_8,tile_1_9,tile_1_10,tile_1_11,tile_1_12,tile_1_13,tile_1_14,tile_1_15,tile_1_16};
static const tile_fn *TJ[5] = {0, TJ1, TJ2, TJ3, TJ4};
static const int PJ[5] = {0, 16, 12, 8, 7};

static int64_t HW, ICB, OCB, NP; static int NH; /* pixels, in blocks, out blocks, panels */
static int pj[4096]; static int64_t poff[4096], pob[4096];
static void panels(void) {
    NP = (OCB + 3) / 4; int64_t off = 0, ob = 0;
    for (int64_t i = 0; i < NP; i++) { pj[i] = (int)(OCB * (i + 1) / NP - OCB * i / NP); poff[i] = off; pob[i] = ob; off += ICB * 16 * pj[i] * 16; ob += pj[i]; }
}
static void own(const float *x, const float *w, const float *bias, float *y, int64_t chunk, int dyn, int sum) {
    int64_t nch = (HW + chunk - 1) / chunk, npc = NP * nch;
    uint64_t lohi = (uint64_t)npc << 32;
#pragma omp parallel num_threads(2)
    {
        int id = omp_get_thread_num(), n = omp_get_num_threads();
        int64_t slo = npc * id / n, shi = npc * (id + 1) / n;
        for (;;) {
            int64_t pc;
            if (dyn && n == 2) {
                uint64_t v = __atomic_load_n(&lohi, __ATOMIC_RELAXED), nv;
                do {
                    uint64_t lo = v & 0xffffffffu, hi = v >> 32;
                    if (lo >= hi) goto done;
                    if (id == 0) { pc = (int64_t)lo; nv = (hi << 32) | (lo + 1); }
                    else { pc = (int64_t)hi - 1; nv = ((hi - 1) << 32) | lo; }
                } while (!__atomic_compare_exchange_n(&lohi, &v, nv, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
            } else { if (slo >= shi) break; pc = slo++; }
            int64_t pn = pc / nch, c = pc % nch, p0 = c * chunk, p1 = p0 + chunk < HW ? p0 + chunk : HW;
            int J = pj[pn], P = PJ[J];
            const float *wp = w + poff[pn];
            for (int64_t p = p0; p < p1; p += P) {
                int pp = p + P <= p1 ? P : (int)(p1 - p);
                if (NH) TJ[J][pp](x + p * ICB * 16, 16, ICB, wp, bias + pob[pn] * 16, y + pob[pn] * 16 + p * OCB * 16, 16, sum, 1, ICB * 16, OCB * 16);
                else TJ[J][pp](x + p * 16, HW * 16, ICB, wp, bias + pob[pn] * 16, y + pob[pn] * HW * 16 + p * 16, HW * 16, sum, 1, 16, 16);
            }
        }
    done:;
    }
}

int main(int argc, char **argv) {
    int64_t IC = atoll(argv[1]), OC = atoll(argv[2]), H = atoll(argv[3]); int rounds = atoi(argv[4]);
    int sum = getenv("SUM") ? atoi(getenv("SUM")) : 0, dyn = getenv("DYN") ? atoi(getenv("DYN")) : 1;
    int ncopy = getenv("NCOPY") ? atoi(getenv("NCOPY")) : 4;
    NH = getenv("NHWC") != 0; HW = H * H; ICB = (IC + 15) / 16; OCB = (OC + 15) / 16; panels();
    double fl1 = 2.0 * IC * OC * HW;
    int64_t chunk = getenv("CHUNK") ? atoll(getenv("CHUNK")) : (int64_t)(600e3 / (2.0 * ICB * 16 * 64));
    { int P = PJ[pj[0]]; if (chunk < P) chunk = P; chunk = chunk / P * P; }
    dnnl_engine_t eng; dnnl_stream_t st; CK(dnnl_engine_create(&eng, dnnl_cpu, 0)); CK(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));
    dnnl_memory_desc_t smd, wmd, bmd, dmd, wplain; dnnl_dims_t sd = {1, IC, H, H}, wd = {OC, IC, 1, 1}, bd = {OC}, dd = {1, OC, H, H};
    dnnl_format_tag_t ft = NH ? dnnl_nhwc : dnnl_nChw16c; CK(dnnl_memory_desc_init_by_tag(&smd, 4, sd, dnnl_f32, ft)); CK(dnnl_memory_desc_init_by_tag(&dmd, 4, dd, dnnl_f32, ft));
    CK(dnnl_memory_desc_init_by_tag(&wmd, 4, wd, dnnl_f32, dnnl_format_tag_any)); CK(dnnl_memory_desc_init_by_tag(&wplain, 4, wd, dnnl_f32, dnnl_oihw));
    CK(dnnl_memory_desc_init_by_tag(&bmd, 1, bd, dnnl_f32, dnnl_a));
    dnnl_dims_t one = {1, 1}, zero = {0, 0}; dnnl_convolution_desc_t cd;
    CK(dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference, dnnl_convolution_direct, &smd, &wmd, &bmd, &dmd, one, zero, zero, zero));
    dnnl_primitive_attr_t attr; CK(dnnl_primitive_attr_create(&attr)); dnnl_post_ops_t po; CK(dnnl_post_ops_create(&po));
    if (sum) CK(dnnl_post_ops_append_sum(po, 1.f)); CK(dnnl_post_ops_append_eltwise(po, 1.f, dnnl_eltwise_relu, 0, 0)); CK(dnnl_primitive_attr_set_post_ops(attr, po));
    CK(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
    dnnl_primitive_desc_t pd; CK(dnnl_primitive_desc_create(&pd, &cd, attr, eng, NULL));
    const char *impl; dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    const dnnl_memory_desc_t *pw = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    const dnnl_memory_desc_t *psp = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    dnnl_memory_t spm; CK(dnnl_memory_create(&spm, psp, eng, DNNL_MEMORY_ALLOCATE));
    dnnl_primitive_t prim; CK(dnnl_primitive_create(&prim, pd));
    float *bias = calloc(OCB * 16, 4); for (int i = 0; i < OC; i++) bias[i] = (rand() / (float)RAND_MAX - 0.5f) * 0.1f;
    dnnl_memory_t bm; CK(dnnl_memory_create(&bm, &bmd, eng, bias));
    float *wp = malloc(OC * IC * 4); for (int64_t i = 0; i < OC * IC; i++) wp[i] = (rand() / (float)RAND_MAX - 0.5f) * 0.05f;
    dnnl_memory_t wpm; CK(dnnl_memory_create(&wpm, &wplain, eng, wp));
    dnnl_memory_t sm[16], wm[16], dm[16]; float *ow[16], *od[16];
    size_t ssz = ICB * 16 * HW * 4, dsz = OCB * 16 * HW * 4;
    for (int c = 0; c < ncopy; c++) {
        CK(dnnl_memory_create(&sm[c], &smd, eng, DNNL_MEMORY_ALLOCATE));
        float *q; dnnl_memory_get_data_handle(sm[c], (void **)&q); memset(q, 0, ssz);
        for (int64_t ch = 0; ch < IC; ch++) for (int64_t p = 0; p < HW; p++) q[NH ? p * IC + ch : (ch / 16) * HW * 16 + p * 16 + ch % 16] = rand() / (float)RAND_MAX - 0.5f;
        CK(dnnl_memory_create(&wm[c], pw, eng, DNNL_MEMORY_ALLOCATE));
        CK(dnnl_memory_create(&dm[c], &dmd, eng, DNNL_MEMORY_ALLOCATE));
        dnnl_primitive_desc_t rpd; dnnl_primitive_t r; CK(dnnl_reorder_primitive_desc_create(&rpd, &wplain, eng, pw, eng, NULL)); CK(dnnl_primitive_create(&r, rpd));
        dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, wpm}, {DNNL_ARG_TO, wm[c]}}; CK(dnnl_primitive_execute(r, st, 2, ra)); CK(dnnl_stream_wait(st));
        ow[c] = aligned_alloc(64, poff[NP - 1] * 4 + ICB * 16 * pj[NP - 1] * 16 * 4 + 64); memset(ow[c], 0, poff[NP - 1] * 4 + ICB * 16 * pj[NP - 1] * 16 * 4);
        for (int64_t pn = 0; pn < NP; pn++) for (int64_t i = 0; i < IC; i++) for (int64_t oo = 0; oo < pj[pn] * 16; oo++) {
            int64_t o = pob[pn] * 16 + oo; if (o < OC) ow[c][poff[pn] + i * pj[pn] * 16 + oo] = wp[o * IC + i]; }
        od[c] = aligned_alloc(64, dsz); memset(od[c], 0, dsz);
        float *q2; dnnl_memory_get_data_handle(dm[c], (void **)&q2); memset(q2, 0, dsz);
    }
    float *xs0; dnnl_memory_get_data_handle(sm[0], (void **)&xs0);
    { dnnl_exec_arg_t a[5] = {{DNNL_ARG_SRC, sm[0]}, {DNNL_ARG_WEIGHTS, wm[0]}, {DNNL_ARG_BIAS, bm}, {DNNL_ARG_DST, dm[0]}, {DNNL_ARG_SCRATCHPAD, spm}};
      CK(dnnl_primitive_execute(prim, st, 5, a)); CK(dnnl_stream_wait(st)); own(xs0, ow[0], bias, od[0], chunk, dyn, sum);
      float *q; dnnl_memory_get_data_handle(dm[0], (void **)&q); double md = 0; for (size_t i = 0; i < dsz / 4; i++) { double d = q[i] - od[0][i]; if (d < 0) d = -d; if (d > md) md = d; }
      if (md > 1e-4) printf("MAXDIFF %g\n", md); }
    double bd1 = 1e9, bo = 1e9; static double td[100000], to[100000]; int n = 0;
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < 2; k++) { int which = (r + k) & 1; double tt = 0;
            for (int c = 0; c < ncopy; c++) { double t0 = now(); float *xc; dnnl_memory_get_data_handle(sm[c], (void **)&xc);
                if (which == 0) { dnnl_exec_arg_t a[5] = {{DNNL_ARG_SRC, sm[c]}, {DNNL_ARG_WEIGHTS, wm[c]}, {DNNL_ARG_BIAS, bm}, {DNNL_ARG_DST, dm[c]}, {DNNL_ARG_SCRATCHPAD, spm}}; CK(dnnl_primitive_execute(prim, st, 5, a)); CK(dnnl_stream_wait(st)); }
                else own(xc, ow[c], bias, od[c], chunk, dyn, sum);
                double t = now() - t0; if (which == 0) { if (t < bd1) bd1 = t; } else { if (t < bo) bo = t; } tt += t; }
            if (which == 0) td[n] = tt / ncopy; else to[n] = tt / ncopy; }
        n++;
    }
    int cmp(const void *a, const void *b) { double x = *(double *)a, y = *(double *)b; return x < y ? -1 : x > y; }
    double md_ = 0, mo_ = 0; for (int i = 0; i < n; i++) { md_ += td[i]; mo_ += to[i]; }
    qsort(td, n, 8, cmp); qsort(to, n, 8, cmp);
    printf("%4ldx%-4ld @%-3ld np %ld chunk %ld dyn %d | %-22s best %.4f ms (%3.0f GF/s) med %.4f mean %.4f | own best %.4f (%3.0f GF/s) med %.4f mean %.4f | own/dnnl best %.3f med %.3f mean %.3f\n",
           (long)IC, (long)OC, (long)H, (long)NP, (long)chunk, dyn, impl, bd1 * 1e3, fl1 / bd1 / 1e9, td[n / 2] * 1e3, md_ / n * 1e3, bo * 1e3, fl1 / bo / 1e9, to[n / 2] * 1e3, mo_ / n * 1e3, bo / bd1, to[n / 2] / td[n / 2], mo_ / md_);
}
