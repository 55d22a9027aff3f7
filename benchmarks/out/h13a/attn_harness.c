#include "/work/h13a/kernel/attn.c"
#include <stdio.h>
#include <time.h>
/* stubs */
static float *bufs[8];
idk_status_t idk_fail(idk_plan_t *p, idk_status_t st, const char *fmt, ...) { (void)p; (void)fmt; return st; }
void *idk_buf_ptr(idk_plan_t *p, int b) { (void)p; return bufs[b]; }
int idk_get_plain(idk_plan_t *p, int t, int *b) { (void)p; (void)t; (void)b; return 0; }
int idk_new_buffer(idk_plan_t *p, size_t s) { (void)p; (void)s; return 0; }
int idk_set_output(idk_plan_t *p, int t, const dnnl_memory_desc_t *m, int pl, int b) { (void)p; (void)t; (void)m; (void)pl; (void)b; return 0; }
idk_step_t *idk_new_step(idk_plan_t *p) { (void)p; return NULL; }
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char **argv) {
    int nth = argc > 1 ? atoi(argv[1]) : 1;
    int64_t L = argc > 2 ? atoi(argv[2]) : 197, H = argc > 3 ? atoi(argv[3]) : 12, D = 64;
    /* ViT: q, k, v as (L, H, d), y (L, H, d) */
    for (int i = 0; i < 4; i++) {
        bufs[i] = aligned_alloc(64, L * H * D * 4);
        for (int64_t j = 0; j < L * H * D; j++) bufs[i][j] = (float)((j * 7919 + i * 13) % 1000) / 1000.0f - 0.5f;
    }
    idk_plan_t pl; memset(&pl, 0, sizeof pl); pl.threads = nth;
    idk_step_t st; memset(&st, 0, sizeof st);
    st.bufs[0] = 0; st.bufs[1] = 1; st.bufs[2] = 2; st.bufs[3] = 3; st.nb = 4; st.n1 = H; st.fv = 0.125f;
    st.extra = calloc(A_NP + 5 * H, 8);
    int64_t *a = st.extra;
    a[A_L] = L; a[A_S] = L; a[A_D] = D; a[A_DV] = D;
    a[A_QR] = H * D; a[A_QC] = 1; a[A_KD] = 1; a[A_KS] = H * D; a[A_VS] = H * D; a[A_VD] = 1; a[A_YR] = H * D; a[A_YC] = 1;
    for (int h = 0; h < H; h++) for (int k = 0; k < 4; k++) a[A_NP + 5 * h + k] = h * D;
    double best = 1e9;
    static float junk[3 << 20];
    int cold = getenv("COLD") != NULL;
    for (int it = 0; it < 200; it++) {
        if (cold) {
#pragma omp parallel for num_threads(nth)
            for (int j = 0; j < (3 << 20); j++) junk[j] += 1.0f;
            /* the inputs rewritten as the producing matmul would: rows split over the threads */
#pragma omp parallel for num_threads(nth)
            for (int64_t r = 0; r < L; r++)
                for (int i = 0; i < 3; i++)
                    for (int64_t j = 0; j < H * D; j++) bufs[i][r * H * D + j] += 0.0f;
        }
        double t0 = now();
        fn_attention(&pl, &st);
        double t = now() - t0;
        if (t < best) best = t;
    }
    double flop = 4.0 * H * L * L * D;
    printf("threads %d L %ld H %ld: best %.3f ms, %.1f GFLOP/s; y[5]=%.7g\n", nth, (long)L, (long)H, best * 1e3, flop / best / 1e9, bufs[3][5]);
    return 0;
}
