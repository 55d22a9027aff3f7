#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <omp.h>
#include <immintrin.h>
#include <math.h>
#include "h12q_gemv_blocked_kernel.h"
static inline __attribute__((always_inline)) void gemv_rows(const float *w, const float *x, const float *bias,
        float *y, int64_t n0, int64_t n1, int64_t K, int relu) {
    int64_t kv = K / 16 * 16;
    for (int64_t n = n0; n < n1;) {
        int rows = n1 - n >= 4 ? 4 : 1;
        float acc[4][16] = {{0}};
        for (int64_t k = 0; k < kv; k += 16)
            for (int i = 0; i < rows; i++)
                for (int j = 0; j < 16; j++) acc[i][j] += w[(n + i) * K + k + j] * x[k + j];
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
__attribute__((target("avx512f"))) static void v0(const float *w, const float *x, const float *bias,
        float *y, int64_t n0, int64_t n1, int64_t K, int relu) { gemv_rows(w,x,bias,y,n0,n1,K,relu); }
static double now(void){struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec*1e3+t.tv_nsec/1e6;}
int main(int argc,char**argv){
    int64_t N=atoi(argv[1]),K=atoi(argv[2]); int reps=atoi(argv[3]), rounds=atoi(argv[4]);
    int npf=argc-5; int pfs[8]; for(int i=0;i<npf;i++) pfs[i]=atoi(argv[5+i]);
    int64_t Np=(N+63)/64*64, Kp=(K+15)/16*16, nb=Np/64;
    size_t bytes=N*K*4;
    float *w=aligned_alloc(64,bytes), *wb=aligned_alloc(64,Np*Kp*4);
    float *x=malloc(K*4),*y=malloc(N*4),*b=malloc(N*4), *yr=malloc(N*4);
    srand(1); memset(wb,0,Np*Kp*4);
    for(int64_t i=0;i<N*K;i++) w[i]=(rand()%2001-1000)*1e-3f; for(int i=0;i<K;i++)x[i]=(rand()%2001-1000)*1e-3f; for(int i=0;i<N;i++)b[i]=0.1f;
    for(int64_t n=0;n<N;n++) for(int64_t k=0;k<K;k++) wb[(n/64)*Kp*64+k*64+n%64]=w[n*K+k];
    double best[9]; for(int v=0;v<9;v++) best[v]=1e9;
    for (int r=0;r<rounds;r++) for (int v=0;v<=npf;v++) {
      for(int rep=0;rep<reps;rep++){ double t0=now();
        if (v==0) {
#pragma omp parallel for num_threads(2) schedule(static)
          for(int64_t g=0;g<(N+3)/4;g++) v0(w,x,b,y,g*4,g*4+4<N?g*4+4:N,K,0);
        } else {
          int pf=pfs[v-1];
#pragma omp parallel for num_threads(2) schedule(static)
          for(int64_t g=0;g<nb;g++) gemv_blk_avx512(wb,x,b,y,g,g+1,N,K,Kp,0,pf);
        }
        double t=now()-t0; if(t<best[v])best[v]=t;
        if (r==0&&rep==0) { if (v==0) memcpy(yr,y,N*4); else { double md=0,mx=0; for(int i=0;i<N;i++){ if(fabsf(yr[i])>mx)mx=fabsf(yr[i]);} for(int i=0;i<N;i++){double d=fabs(y[i]-yr[i])/mx; if(d>md)md=d;} printf("pf %d maxrel/largest %g\n",pfs[v-1],md);} }
      }
    }
    printf("N=%ld K=%ld cur %.3f ms", (long)N,(long)K,best[0]);
    for (int v=1;v<=npf;v++) printf(" | pf%d %.3f", pfs[v-1], best[v]);
    printf("\n");
}
