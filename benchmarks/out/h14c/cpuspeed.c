// Two threads pinned to CPU 0 and 1 each time a fixed chunk of dependent-free FMAs
// (~0.5 ms) over and over; prints per-100ms-window the median chunk time of each CPU.
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
#define N 20000
static double t0; static double secs;
static double *res[2]; static int nres[2];
__attribute__((target("avx512f"))) static float work(int iters){
  __m512 a[8]; for(int i=0;i<8;i++) a[i]=_mm512_set1_ps(1.0f+i*1e-3f);
  __m512 m=_mm512_set1_ps(0.9999f), c=_mm512_set1_ps(1e-4f);
  for(int k=0;k<iters;k++) for(int i=0;i<8;i++) a[i]=_mm512_fmadd_ps(a[i],m,c);
  float s=0; for(int i=0;i<8;i++) s+=_mm512_reduce_add_ps(a[i]); return s;
}
static void *run(void *arg){
  long cpu=(long)arg; cpu_set_t cs; CPU_ZERO(&cs); CPU_SET(cpu,&cs); pthread_setaffinity_np(pthread_self(),sizeof cs,&cs);
  volatile float sink=0; int n=0;
  while(now()-t0<secs && n<N){ double a=now(); sink+=work(150000); res[cpu][n++]=now()-a; res[cpu][N+n-1]=a-t0;}
  nres[cpu]=n; return NULL;
}
int main(int c,char**v){ secs=atof(v[1]); res[0]=malloc(2*N*8); res[1]=malloc(2*N*8); t0=now();
  pthread_t th[2]; for(long i=0;i<2;i++) pthread_create(&th[i],0,run,(void*)i); for(int i=0;i<2;i++) pthread_join(th[i],0);
  // per 250 ms window: min and mean chunk time per cpu (ms)
  for(double w=0; w<secs; w+=0.25){ printf("%5.2f",w); for(int cpu=0;cpu<2;cpu++){ double mn=1e9,sm=0;int k=0; for(int i=0;i<nres[cpu];i++){double st=res[cpu][N+i]; if(st>=w&&st<w+0.25){k++;sm+=res[cpu][i]; if(res[cpu][i]<mn)mn=res[cpu][i];}} printf("  cpu%d min %.3f mean %.3f n %d",cpu,mn*1e3,k?sm/k*1e3:0,k);} printf("\n"); }
}
