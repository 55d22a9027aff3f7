#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <omp.h>
#include <immintrin.h>
#include <math.h>
#define CH 256
/* BW=64: register accumulators; idx list of nonzero k (padded by PFD entries) */
__attribute__((target("avx512f"))) static void blk64(const float *w, const float *x, const int *idx, int nnz, float *y, int64_t b, int64_t Kp, int pfd) {
    const float *wb = w + b * Kp * 64;
    __m512 t0 = _mm512_setzero_ps(), t1 = t0, t2 = t0, t3 = t0;
    for (int i0 = 0; i0 < nnz; i0 += CH) {
        int i1 = i0 + CH < nnz ? i0 + CH : nnz;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int i = i0; i < i1; i++) {
            int k = idx[i];
            const float *r = wb + (int64_t)k * 64, *q = wb + (int64_t)idx[i + pfd] * 64;
            _mm_prefetch((const char *)q, _MM_HINT_T0); _mm_prefetch((const char *)(q + 16), _MM_HINT_T0);
            _mm_prefetch((const char *)(q + 32), _MM_HINT_T0); _mm_prefetch((const char *)(q + 48), _MM_HINT_T0);
            __m512 xv = _mm512_set1_ps(x[k]);
            a0 = _mm512_add_ps(a0, _mm512_mul_ps(_mm512_load_ps(r), xv));
            a1 = _mm512_add_ps(a1, _mm512_mul_ps(_mm512_load_ps(r + 16), xv));
            a2 = _mm512_add_ps(a2, _mm512_mul_ps(_mm512_load_ps(r + 32), xv));
            a3 = _mm512_add_ps(a3, _mm512_mul_ps(_mm512_load_ps(r + 48), xv));
        }
        t0 = _mm512_add_ps(t0, a0); t1 = _mm512_add_ps(t1, a1); t2 = _mm512_add_ps(t2, a2); t3 = _mm512_add_ps(t3, a3);
    }
    _mm512_storeu_ps(y + b*64, t0); _mm512_storeu_ps(y + b*64 + 16, t1); _mm512_storeu_ps(y + b*64 + 32, t2); _mm512_storeu_ps(y + b*64 + 48, t3);
}
/* wide blocks BW, accumulators in memory */
__attribute__((target("avx512f"))) static void blkw(const float *w, const float *x, const int *idx, int nnz, float *y, int64_t b, int64_t Kp, int BW, int pfd) {
    const float *wb = w + b * Kp * BW;
    float acc[1024] __attribute__((aligned(64))), tot[1024] __attribute__((aligned(64)));
    memset(tot, 0, BW * 4);
    for (int i0 = 0; i0 < nnz; i0 += CH) {
        int i1 = i0 + CH < nnz ? i0 + CH : nnz;
        memset(acc, 0, BW * 4);
        for (int i = i0; i < i1; i++) {
            int k = idx[i];
            const float *r = wb + (int64_t)k * BW, *q = wb + (int64_t)idx[i + pfd] * BW;
            __m512 xv = _mm512_set1_ps(x[k]);
            for (int j = 0; j < BW; j += 16) {
                if (pfd) _mm_prefetch((const char *)(q + j), _MM_HINT_T0);
                _mm512_store_ps(acc + j, _mm512_add_ps(_mm512_load_ps(acc + j), _mm512_mul_ps(_mm512_load_ps(r + j), xv)));
            }
        }
        for (int j = 0; j < BW; j += 16) _mm512_store_ps(tot + j, _mm512_add_ps(_mm512_load_ps(tot + j), _mm512_load_ps(acc + j)));
    }
    memcpy(y + b * BW, tot, BW * 4);
}
static double now(void){struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec*1e3+t.tv_nsec/1e6;}
int main(int argc,char**argv){
    int64_t N=atoi(argv[1]),K=atoi(argv[2]); int reps=atoi(argv[3]), rounds=atoi(argv[4]); double zf=atof(argv[5]); int pfd=atoi(argv[6]);
    int BWs[4]={64,256,1024,0}; int nv=3;
    float *w[3]; for(int v=0;v<nv;v++){ w[v]=aligned_alloc(64,N*K*4); }
    float *x=malloc(K*4),*y=malloc(N*4),*yr=malloc(N*4); int *idx=malloc((K+64)*4), *all=malloc((K+64)*4);
    srand(1);
    for(int64_t n=0;n<N;n++) for(int64_t k=0;k<K;k++){ float v=(rand()%2001-1000)*1e-3f; for(int q=0;q<nv;q++){int BW=BWs[q]; w[q][(n/BW)*K*BW+k*BW+n%BW]=v;} }
    int nnz=0; for(int k=0;k<K;k++){ x[k] = (rand()/(double)RAND_MAX) < zf ? 0 : (rand()%1000)*1e-3f; if(x[k]!=0) idx[nnz++]=k; all[k]=k; }
    for(int i=0;i<64;i++){ idx[nnz+i]=idx[nnz-1]; all[K+i]=K-1; }
    double best[6]; for(int v=0;v<6;v++) best[v]=1e9;
    /* variants: 0 dense blk64 (all k), 1 sparse blk64, 2 sparse BW256, 3 sparse BW1024 */
    for (int r=0;r<rounds;r++) for (int v=0;v<4;v++) for(int rep=0;rep<reps;rep++){ double t0=now();
        if (v<2) {
          const int *ix = v==0 ? all : idx; int nn = v==0 ? K : nnz;
#pragma omp parallel for num_threads(2) schedule(static)
          for(int64_t b=0;b<N/64;b++) blk64(w[0],x,ix,nn,y,b,K,pfd);
        } else { int BW = v==2?256:1024;
#pragma omp parallel for num_threads(2) schedule(static)
          for(int64_t b=0;b<N/BW;b++) blkw(w[v==2?1:2],x,idx,nnz,y,b,K,BW,pfd);
        }
        double t=now()-t0; if(t<best[v])best[v]=t;
        if(r==0&&rep==0){ if(v==0) memcpy(yr,y,N*4); else { double md=0; for(int i=0;i<N;i++){ double d=fabs(y[i]-yr[i]); if(d>md)md=d;} if(md>0) printf("v%d maxabs diff %g\n",v,md);} }
    }
    printf("N=%ld K=%ld zeros %.2f (nnz %d) pfd %d: dense64 %.3f | sparse64 %.3f | sparse256 %.3f | sparse1024 %.3f ms\n",(long)N,(long)K,zf,nnz,pfd,best[0],best[1],best[2],best[3]);
}
