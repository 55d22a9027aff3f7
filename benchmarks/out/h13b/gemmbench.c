/* gemmbench: gemm.c (this directory) against oneDNN's matmul (brgemm, weights prepacked) on one shape,
 * alternating, 2 threads; prints each side's fastest run and the max difference.
 * cc -std=gnu11 -O3 -fopenmp benchmarks/out/h13b/gemmbench.c -ldnnl -lm -o /tmp/gemmbench
 * usage: gemmbench M K N post(0 none, 1 gelu, 2 sum) rounds */
#define _GNU_SOURCE
#include <stdio.h>
#include <time.h>
#include <oneapi/dnnl/dnnl.h>
#include "gemm.c"

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
#define CK(x) do { dnnl_status_t s_ = (x); if (s_ != dnnl_success) { fprintf(stderr, "%s: %d\n", #x, s_); exit(1); } } while (0)

int main(int argc, char **argv) {
    int64_t M = atoll(argv[1]), K = atoll(argv[2]), N = atoll(argv[3]);
    int post = atoi(argv[4]), rounds = atoi(argv[5]), nth = 2;
    float *a = aligned_alloc(64, M * K * 4), *w = aligned_alloc(64, K * N * 4), *bias = malloc(N * 4);
    float *s0 = aligned_alloc(64, M * N * 4), *y1 = aligned_alloc(64, M * N * 4), *y2 = aligned_alloc(64, M * N * 4);
    srand(1);
    for (int64_t i = 0; i < M * K; i++) a[i] = rand() / (float)RAND_MAX - 0.5f;
    for (int64_t i = 0; i < K * N; i++) w[i] = (rand() / (float)RAND_MAX - 0.5f) * 0.1f;
    for (int64_t i = 0; i < N; i++) bias[i] = rand() / (float)RAND_MAX - 0.5f;
    for (int64_t i = 0; i < M * N; i++) s0[i] = rand() / (float)RAND_MAX - 0.5f;
    int64_t Kp = (K + 15) / 16 * 16, np = (N + 63) / 64;
    /* NCOLD=1: enough copies of the weights (each side) to leave the caches (400 MB), one per
     * run in turn, as in a model whose weights do not stay in L3 between layers */
    int ncopy = getenv("NCOLD") && atoi(getenv("NCOLD")) ? (int)(400e6 / (np * Kp * 64 * 4)) + 1 : 1;
    float **wps = malloc(sizeof(float *) * ncopy);
    for (int c = 0; c < ncopy; c++) {
        wps[c] = aligned_alloc(64, np * Kp * 64 * 4);
        gemm_pack(w, K, N, Kp, wps[c]);
    }
    float *wp = wps[0];
    if (getenv("PFNEXT")) gemm_pfnext = atoi(getenv("PFNEXT"));
    if (getenv("MC")) gemm_mc = atoi(getenv("MC"));
    if (getenv("PF")) gemm_pf = atoi(getenv("PF"));
    if (getenv("MR")) gemm_mr = atoi(getenv("MR"));
    if (getenv("NV")) gemm_nv = atoi(getenv("NV"));
    /* oneDNN */
    dnnl_engine_t eng; dnnl_stream_t st;
    CK(dnnl_engine_create(&eng, dnnl_cpu, 0)); CK(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));
    dnnl_memory_desc_t amd, bmd, wmd, cmd, ymd;
    dnnl_dims_t ad = {M, K}, bd = {K, N}, cd = {1, N}, yd = {M, N};
    CK(dnnl_memory_desc_init_by_tag(&amd, 2, ad, dnnl_f32, dnnl_ab));
    CK(dnnl_memory_desc_init_by_tag(&bmd, 2, bd, dnnl_f32, dnnl_ab));
    CK(dnnl_memory_desc_init_by_tag(&wmd, 2, bd, dnnl_f32, dnnl_format_tag_any));
    CK(dnnl_memory_desc_init_by_tag(&cmd, 2, cd, dnnl_f32, dnnl_ab));
    CK(dnnl_memory_desc_init_by_tag(&ymd, 2, yd, dnnl_f32, dnnl_ab));
    dnnl_matmul_desc_t d; CK(dnnl_matmul_desc_init(&d, &amd, &wmd, &cmd, &ymd));
    dnnl_primitive_attr_t attr; CK(dnnl_primitive_attr_create(&attr));
    dnnl_post_ops_t po; CK(dnnl_post_ops_create(&po));
    if (post == 1) CK(dnnl_post_ops_append_eltwise(po, 1.f, dnnl_eltwise_gelu_erf, 0, 0));
    if (post == 2) CK(dnnl_post_ops_append_sum(po, 1.f));
    CK(dnnl_primitive_attr_set_post_ops(attr, po));
    dnnl_primitive_desc_t pd; CK(dnnl_primitive_desc_create(&pd, &d, attr, eng, NULL));
    const char *impl; dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    const dnnl_memory_desc_t *pw = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    dnnl_primitive_t prim; CK(dnnl_primitive_create(&prim, pd));
    dnnl_memory_t am, bm, wm, cm, ym;
    CK(dnnl_memory_create(&am, &amd, eng, a)); CK(dnnl_memory_create(&bm, &bmd, eng, w));
    CK(dnnl_memory_create(&wm, pw, eng, DNNL_MEMORY_ALLOCATE)); CK(dnnl_memory_create(&cm, &cmd, eng, bias));
    CK(dnnl_memory_create(&ym, &ymd, eng, y1));
    dnnl_primitive_desc_t rpd; dnnl_primitive_t rp;
    CK(dnnl_reorder_primitive_desc_create(&rpd, &bmd, eng, pw, eng, NULL)); CK(dnnl_primitive_create(&rp, rpd));
    dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, bm}, {DNNL_ARG_TO, wm}};
    dnnl_memory_t *wms = malloc(sizeof(dnnl_memory_t) * ncopy);
    for (int c = 0; c < ncopy; c++) {
        CK(dnnl_memory_create(&wms[c], pw, eng, DNNL_MEMORY_ALLOCATE));
        ra[1].memory = wms[c];
        CK(dnnl_primitive_execute(rp, st, 2, ra)); CK(dnnl_stream_wait(st));
    }
    dnnl_exec_arg_t ma[4] = {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_BIAS, cm}, {DNNL_ARG_DST, ym}};
    gemm_args_t g = {a, K, wp, Kp, bias, y2, N, M, K, N, 0, {0}};
    if (post == 1) g.post[g.npost++] = GEMM_POST_GELU;
    if (post == 2) g.post[g.npost++] = GEMM_POST_SUM;
    double best[2] = {1e9, 1e9};
    int inner = (int)(2e9 / (2.0 * M * K * N)) + 1;
    for (int r = 0; r < rounds; r++) {
        for (int side = 0; side < 2; side++) {
            for (int i = 0; i < inner; i++) {
                if (post == 2) memcpy(side ? y2 : y1, s0, M * N * 4);
                double t0 = now();
                static int cur[2];
                cur[side] = (cur[side] + 1) % ncopy;
                g.w = wps[cur[side]];
                ma[1].memory = wms[cur[side]];
                if (side) gemm_run(&g, nth, getenv("KC") ? atoll(getenv("KC")) : 0);
                else { CK(dnnl_primitive_execute(prim, st, 4, ma)); CK(dnnl_stream_wait(st)); }
                double t = now() - t0;
                if (t < best[side]) best[side] = t;
            }
        }
    }
    double md = 0, mv = 0;
    for (int64_t i = 0; i < M * N; i++) { double e = fabs(y1[i] - y2[i]); if (e > md) md = e; if (fabs(y1[i]) > mv) mv = fabs(y1[i]); }
    double fl = 2.0 * M * K * N;
    printf("cold %d M %ld K %ld N %ld post %d impl %s: onednn %.3f ms (%.0f GF/s) own %.3f ms (%.0f GF/s) own/onednn %.3f maxdiff %.2e (max |y| %.2f)\n",
           ncopy > 1, M, K, N, post, impl, best[0] * 1e3, fl / best[0] * 1e-9, best[1] * 1e3, fl / best[1] * 1e-9, best[1] / best[0], md, mv);
    return 0;
}
