#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <immintrin.h>
#include <omp.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e3+t.tv_nsec/1e6;}
int main(){ int n=10000; static double t[2][10000];
#pragma omp parallel num_threads(2)
 { int id=omp_get_thread_num(); __m512 acc[8]; for(int j=0;j<8;j++)acc[j]=_mm512_set1_ps(1); __m512 m=_mm512_set1_ps(0.999f);
   for(int r=0;r<n;r++){
#pragma omp barrier
     double t0=now(); for(int k=0;k<12500;k++) for(int j=0;j<8;j++) acc[j]=_mm512_fmadd_ps(acc[j],m,m); t[id][r]=now()-t0; }
   float s=0; for(int j=0;j<8;j++) s+=_mm512_reduce_add_ps(acc[j]); if(s==1)printf("x");
 }
 double mn=1e9; for(int r=0;r<n;r++) for(int i=0;i<2;i++) if(t[i][r]<mn) mn=t[i][r];
 double smax=0,smean=0,s0=0,s1=0; for(int r=0;r<n;r++){double a=t[0][r],b=t[1][r]; smax+=a>b?a:b; smean+=(a+b)/2; s0+=a; s1+=b;}
 printf("min %.4f mean0 %.4f mean1 %.4f mean-of-max %.4f mean-of-mean %.4f  (max/mean %.3f, mean/min %.3f)\n",mn,s0/n,s1/n,smax/n,smean/n,smax/smean,smean/n/mn);
}
