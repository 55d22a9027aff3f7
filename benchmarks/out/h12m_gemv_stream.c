#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <omp.h>
#include <immintrin.h>
static inline __attribute__((always_inline)) void gemv_rows(const float *w, const float *x, const float *bias,
        float *y, int64_t n0, int64_t n1, int64_t K, int relu, int pf) {
    int64_t kv = K / 16 * 16;
    for (int64_t n = n0; n < n1;) {
        int rows = n1 - n >= 4 ? 4 : 1;
        float acc[4][16] = {{0}};
        for (int64_t k = 0; k < kv; k += 16) {
            if (pf) for (int i = 0; i < rows; i++) __builtin_prefetch(&w[(n + i) * K + k + pf], 0, 0);
            for (int i = 0; i < rows; i++)
                for (int j = 0; j < 16; j++) acc[i][j] += w[(n + i) * K + k + j] * x[k + j];
        }
        for (int i = 0; i < rows; i++) {
            float sum = 0;
            for (int j = 0; j < 16; j++) sum += acc[i][j];
            for (int64_t k = kv; k < K; k++) sum += w[(n + i) * K + k] * x[k];
            if (bias) sum += bias[n + i];
            y[n + i] = relu && sum < 0 ? 0 : sum;
        }
        n += rows;
    }
}
__attribute__((target("avx512f"))) static void g512(const float *w, const float *x, const float *bias,
        float *y, int64_t n0, int64_t n1, int64_t K, int relu, int pf) { gemv_rows(w,x,bias,y,n0,n1,K,relu,pf); }
static double now(void){struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec*1e3+t.tv_nsec/1e6;}
int main(int argc,char**argv){
    int64_t N=4096,K=9216; int huge=atoi(argv[1]), pf=atoi(argv[2]), reps=atoi(argv[3]);
    size_t bytes=N*K*4; float *w;
    if (huge) { w=aligned_alloc(2<<20,(bytes+(2<<20)-1)/(2<<20)*(2<<20)); madvise(w,bytes,MADV_HUGEPAGE);} else w=malloc(bytes);
    float *x=malloc(K*4),*y=malloc(N*4),*b=malloc(N*4);
    for(int64_t i=0;i<N*K;i++) w[i]=(i%7)*0.1f; for(int i=0;i<K;i++)x[i]=1; for(int i=0;i<N;i++)b[i]=0;
    double best=1e9;
    for(int r=0;r<reps;r++){ double t0=now();
#pragma omp parallel for num_threads(2) schedule(static)
      for(int64_t g=0;g<N/4;g++) g512(w,x,b,y,g*4,g*4+4,K,1,pf);
      double t=now()-t0; if(t<best)best=t;}
    printf("huge=%d pf=%d best %.3f ms %.1f GB/s y0=%g\n",huge,pf,best,bytes/best/1e6,y[0]);
}
