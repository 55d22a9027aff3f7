#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <immintrin.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e3+t.tv_nsec/1e6;}
int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
int main(int argc,char**argv){
  size_t mb=atoi(argv[1]); int n=2000; double *t=malloc(n*sizeof(double));
  size_t N=mb*1024*1024/4; float *a=aligned_alloc(64,N*4+64); for(size_t i=0;i<N;i++)a[i]=1e-3f*(i%7);
  __m512 acc[8]; for(int j=0;j<8;j++)acc[j]=_mm512_set1_ps(1);
  for(int r=0;r<n;r++){double t0=now();
    if(mb==0){ __m512 m=_mm512_set1_ps(0.999f); for(int k=0;k<50000;k++) for(int j=0;j<8;j++) acc[j]=_mm512_fmadd_ps(acc[j],m,m);}
    else { for(int rep=0;rep<(int)(64/mb>0?64/mb:1);rep++) for(size_t i=0;i<N;i+=128) for(int j=0;j<8;j++) acc[j]=_mm512_add_ps(acc[j],_mm512_load_ps(a+i+16*j));}
    t[r]=now()-t0;}
  qsort(t,n,sizeof(double),cmp); float s=0; for(int j=0;j<8;j++) s+=_mm512_reduce_add_ps(acc[j]);
  printf("mb %zu min %.3f p10 %.3f p50 %.3f p90 %.3f p99 %.3f (p50/min %.2f) %g\n",mb,t[0],t[n/10],t[n/2],t[9*n/10],t[99*n/100],t[n/2]/t[0],s);}
