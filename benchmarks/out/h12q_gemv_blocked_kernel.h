/* blocked GEMV kernel: w is AB16b64a (blocks of 64 outputs, each K_pad x 64) */
#define GEMV_BLK 64
#define GEMV_CHUNK 256
__attribute__((target("avx512f"))) static void gemv_blk_avx512(const float *w, const float *x, const float *bias,
        float *y, int64_t b0, int64_t b1, int64_t N, int64_t K, int64_t Kp, int relu, int pf) {
    for (int64_t b = b0; b < b1; b++) {
        const float *wb = w + b * Kp * GEMV_BLK;
        __m512 t0 = _mm512_setzero_ps(), t1 = t0, t2 = t0, t3 = t0;
        for (int64_t k0 = 0; k0 < K; k0 += GEMV_CHUNK) {
            int64_t k1 = k0 + GEMV_CHUNK < K ? k0 + GEMV_CHUNK : K;
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int64_t k = k0; k < k1; k++) {
                const float *r = wb + k * GEMV_BLK;
                if (pf) { _mm_prefetch((const char *)(r + pf), _MM_HINT_T0); _mm_prefetch((const char *)(r + pf + 32), _MM_HINT_T0); }
                __m512 xv = _mm512_set1_ps(x[k]);
                a0 = _mm512_add_ps(a0, _mm512_mul_ps(_mm512_load_ps(r), xv));
                a1 = _mm512_add_ps(a1, _mm512_mul_ps(_mm512_load_ps(r + 16), xv));
                a2 = _mm512_add_ps(a2, _mm512_mul_ps(_mm512_load_ps(r + 32), xv));
                a3 = _mm512_add_ps(a3, _mm512_mul_ps(_mm512_load_ps(r + 48), xv));
            }
            t0 = _mm512_add_ps(t0, a0); t1 = _mm512_add_ps(t1, a1);
            t2 = _mm512_add_ps(t2, a2); t3 = _mm512_add_ps(t3, a3);
        }
        float out[GEMV_BLK];
        _mm512_storeu_ps(out, t0); _mm512_storeu_ps(out + 16, t1); _mm512_storeu_ps(out + 32, t2); _mm512_storeu_ps(out + 48, t3);
        for (int j = 0; j < GEMV_BLK && b * GEMV_BLK + j < N; j++) {
            float s = out[j];
            if (bias) s += bias[b * GEMV_BLK + j];
            y[b * GEMV_BLK + j] = relu && s < 0 ? 0 : s;
        }
    }
}
