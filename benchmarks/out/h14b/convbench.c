/* convbench: one oneDNN convolution at batch 1, two threads, weights/src/dst rotated over
 * NCOPY buffers (default 8) so they come from L3 as in a whole model, not from L2.
 * cc -std=gnu11 -O2 -fopenmp benchmarks/out/h14b/convbench.c -ldnnl -o /tmp/convbench
 * usage: convbench IC OC H W K STRIDE PAD LAYOUT(nhwc|blk|any) ALGO(direct|wino) SUM(0|1) RUNS
 * prints the implementation, the output layout and the fastest run in ms. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <oneapi/dnnl/dnnl.h>

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
#define CK(x) do { dnnl_status_t s_ = (x); if (s_ != dnnl_success) { fprintf(stderr, "%s: %d\n", #x, s_); exit(1); } } while (0)

int main(int argc, char **argv) {
    if (argc < 12) { fprintf(stderr, "usage\n"); return 2; }
    int64_t IC = atoll(argv[1]), OC = atoll(argv[2]), H = atoll(argv[3]), W = atoll(argv[4]), K = atoll(argv[5]);
    int64_t S = atoll(argv[6]), P = atoll(argv[7]);
    const char *lay = argv[8], *algo = argv[9];
    int sum = atoi(argv[10]), runs = atoi(argv[11]);
    int ncopy = getenv("NCOPY") ? atoi(getenv("NCOPY")) : 8;
    int64_t OH = (H + 2 * P - K) / S + 1, OW = (W + 2 * P - K) / S + 1;
    dnnl_engine_t eng; dnnl_stream_t st;
    CK(dnnl_engine_create(&eng, dnnl_cpu, 0)); CK(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));
    dnnl_memory_desc_t smd, wmd, bmd, dmd, wplain;
    dnnl_dims_t sd = {1, IC, H, W}, wd = {OC, IC, K, K}, bd = {OC}, dd = {1, OC, OH, OW};
    dnnl_format_tag_t tag = !strcmp(lay, "nhwc") ? dnnl_nhwc : !strcmp(lay, "blk") ? dnnl_nChw16c : dnnl_format_tag_any;
    CK(dnnl_memory_desc_init_by_tag(&smd, 4, sd, dnnl_f32, tag));
    CK(dnnl_memory_desc_init_by_tag(&dmd, 4, dd, dnnl_f32, tag));
    CK(dnnl_memory_desc_init_by_tag(&wmd, 4, wd, dnnl_f32, dnnl_format_tag_any));
    CK(dnnl_memory_desc_init_by_tag(&wplain, 4, wd, dnnl_f32, dnnl_oihw));
    CK(dnnl_memory_desc_init_by_tag(&bmd, 1, bd, dnnl_f32, dnnl_a));
    dnnl_dims_t str = {S, S}, dil = {0, 0}, pad = {P, P};
    dnnl_convolution_desc_t cd;
    CK(dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference,
        !strcmp(algo, "wino") ? dnnl_convolution_winograd : dnnl_convolution_direct, &smd, &wmd, &bmd, &dmd, str, dil, pad, pad));
    dnnl_primitive_attr_t attr; CK(dnnl_primitive_attr_create(&attr));
    dnnl_post_ops_t po; CK(dnnl_post_ops_create(&po));
    if (sum) CK(dnnl_post_ops_append_sum(po, 1.f));
    CK(dnnl_post_ops_append_eltwise(po, 1.f, dnnl_eltwise_relu, 0, 0));
    CK(dnnl_primitive_attr_set_post_ops(attr, po));
    CK(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
    dnnl_primitive_desc_t pd = NULL;
    const char *want = getenv("IMPL"); /* an implementation name's substring: the first such */
    if (want) {
        dnnl_primitive_desc_iterator_t it;
        CK(dnnl_primitive_desc_iterator_create(&it, &cd, attr, eng, NULL));
        do {
            dnnl_primitive_desc_t c = dnnl_primitive_desc_iterator_fetch(it);
            const char *nm;
            if (c && dnnl_primitive_desc_query(c, dnnl_query_impl_info_str, 0, &nm) == dnnl_success && strstr(nm, want)) { pd = c; break; }
            if (c) dnnl_primitive_desc_destroy(c);
        } while (dnnl_primitive_desc_iterator_next(it) == dnnl_success);
        if (!pd) { fprintf(stderr, "no impl %s\n", want); return 1; }
    } else CK(dnnl_primitive_desc_create(&pd, &cd, attr, eng, NULL));
    const char *impl; dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    const dnnl_memory_desc_t *ps = dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
    const dnnl_memory_desc_t *pw = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    const dnnl_memory_desc_t *pdd = dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
    const dnnl_memory_desc_t *psp = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    dnnl_primitive_t prim; CK(dnnl_primitive_create(&prim, pd));
    size_t ssz = dnnl_memory_desc_get_size(ps), wsz = dnnl_memory_desc_get_size(pw), dsz = dnnl_memory_desc_get_size(pdd);
    size_t spsz = dnnl_memory_desc_get_size(psp);
    dnnl_memory_t sm[64], wm[64], dm[64], bm, spm;
    float *bias = calloc(OC, 4);
    CK(dnnl_memory_create(&bm, &bmd, eng, bias));
    CK(dnnl_memory_create(&spm, psp, eng, DNNL_MEMORY_ALLOCATE));
    /* weights: plain random, reordered into the primitive's layout per copy */
    float *wp = malloc(OC * IC * K * K * 4);
    srand(1);
    for (int64_t i = 0; i < OC * IC * K * K; i++) wp[i] = (rand() / (float)RAND_MAX - 0.5f) * 0.05f;
    dnnl_memory_t wpm; CK(dnnl_memory_create(&wpm, &wplain, eng, wp));
    for (int c = 0; c < ncopy; c++) {
        CK(dnnl_memory_create(&sm[c], ps, eng, DNNL_MEMORY_ALLOCATE));
        CK(dnnl_memory_create(&wm[c], pw, eng, DNNL_MEMORY_ALLOCATE));
        CK(dnnl_memory_create(&dm[c], pdd, eng, DNNL_MEMORY_ALLOCATE));
        float *p; dnnl_memory_get_data_handle(sm[c], (void **)&p);
        for (size_t i = 0; i < ssz / 4; i++) p[i] = rand() / (float)RAND_MAX - 0.5f;
        dnnl_memory_get_data_handle(dm[c], (void **)&p); memset(p, 0, dsz);
        dnnl_primitive_desc_t rpd; dnnl_primitive_t r;
        CK(dnnl_reorder_primitive_desc_create(&rpd, &wplain, eng, pw, eng, NULL));
        CK(dnnl_primitive_create(&r, rpd));
        dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, wpm}, {DNNL_ARG_TO, wm[c]}};
        CK(dnnl_primitive_execute(r, st, 2, ra)); CK(dnnl_stream_wait(st));
    }
    double best = 1e9;
    for (int i = 0; i < runs; i++) {
        int c = i % ncopy;
        dnnl_exec_arg_t a[5] = {{DNNL_ARG_SRC, sm[c]}, {DNNL_ARG_WEIGHTS, wm[c]}, {DNNL_ARG_BIAS, bm},
                                {DNNL_ARG_DST, dm[c]}, {DNNL_ARG_SCRATCHPAD, spm}};
        double t0 = now();
        CK(dnnl_primitive_execute(prim, st, 5, a)); CK(dnnl_stream_wait(st));
        double t = now() - t0;
        if (i >= ncopy && t < best) best = t;
    }
    char fmt[8] = "?";
    if (pdd->format_kind == dnnl_blocked) snprintf(fmt, sizeof fmt, "%s", pdd->format_desc.blocking.inner_nblks ? "blk" : "plain");
    printf("%ldx%ld %ldx%ld k%ld s%ld %s %s sum%d: %s dst %s wsz %.1fMB spad %.1fMB best %.4f ms\n", (long)IC, (long)OC, (long)H, (long)W,
           (long)K, (long)S, lay, algo, sum, impl, fmt, wsz / 1e6, spsz / 1e6, best * 1e3);
    return 0;
}
