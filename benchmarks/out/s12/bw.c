#define _GNU_SOURCE
#include <time.h>
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  size_t mb=atoi(argv[1]); size_t n=mb<<20; int reps=atoi(argv[2]);
  float*a=aligned_alloc(64,n); memset(a,1,n);
  size_t nf=n/4; double best=1e9; __m512 acc=_mm512_setzero_ps();
  for(int r=0;r<reps;r++){
    double t=now();
    float tot[2];
    #pragma omp parallel num_threads(2)
    { int id=omp_get_thread_num(); size_t lo=nf/2*id, hi=lo+nf/2; __m512 s0=_mm512_setzero_ps(),s1=s0,s2=s0,s3=s0;
      for(size_t i=lo;i<hi;i+=64){ s0=_mm512_add_ps(s0,_mm512_load_ps(a+i)); s1=_mm512_add_ps(s1,_mm512_load_ps(a+i+16)); s2=_mm512_add_ps(s2,_mm512_load_ps(a+i+32)); s3=_mm512_add_ps(s3,_mm512_load_ps(a+i+48)); }
      tot[id]=_mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0,s1),_mm512_add_ps(s2,s3))); }
    acc=_mm512_add_ps(acc,_mm512_set1_ps(tot[0]+tot[1]));
    t=now()-t; if(t<best)best=t;
  }
  printf("%zu MB: best %.3f ms, %.1f GB/s (%f)\n",mb,best*1e3,n/best/1e9,_mm512_reduce_add_ps(acc));
}
