#define _POSIX_C_SOURCE 200809L
#include <dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
#define CK(x) do{dnnl_status_t s_=(x); if(s_!=dnnl_success){fprintf(stderr,"%s:%d %d\n",__FILE__,__LINE__,s_);exit(1);}}while(0)
static dnnl_engine_t eng; static dnnl_stream_t st;
static dnnl_memory_t mem(const dnnl_memory_desc_t*md){dnnl_memory_t m;CK(dnnl_memory_create(&m,md,eng,DNNL_MEMORY_ALLOCATE));void*p;dnnl_memory_get_data_handle(m,&p);size_t n=dnnl_memory_desc_get_size(md);for(size_t i=0;i<n/4;i++)((float*)p)[i]=(float)((i*7919)%1000)/1000.f-0.5f;return m;}
/* pd for M x K times K x N (N columns of a dst with leading dim ldd) */
static dnnl_primitive_desc_t mkpd(long M,long K,long N,long ldd){
  int wt=getenv("WTAG")&&!strcmp(getenv("WTAG"),"ab")?dnnl_ab:(getenv("WTAG")&&!strcmp(getenv("WTAG"),"ba")?dnnl_ba:dnnl_format_tag_any);
  dnnl_memory_desc_t s,w,b,d; dnnl_dims_t sd={M,K},wd={K,N},bd={1,N},dd={M,N},ds={ldd,1};
  dnnl_memory_desc_init_by_tag(&s,2,sd,dnnl_f32,dnnl_ab);dnnl_memory_desc_init_by_tag(&w,2,wd,dnnl_f32,wt);
  dnnl_memory_desc_init_by_tag(&b,2,bd,dnnl_f32,dnnl_ab);dnnl_memory_desc_init_by_strides(&d,2,dd,dnnl_f32,ds);
  dnnl_matmul_desc_t md; CK(dnnl_matmul_desc_init(&md,&s,&w,&b,&d)); dnnl_primitive_desc_t pd; CK(dnnl_primitive_desc_create(&pd,&md,NULL,eng,NULL));
  const char*want=getenv("IMPL"); if(want){dnnl_primitive_desc_destroy(pd); dnnl_primitive_desc_iterator_t it; CK(dnnl_primitive_desc_iterator_create(&it,&md,NULL,eng,NULL));
    for(;;){pd=dnnl_primitive_desc_iterator_fetch(it);const char*im;dnnl_primitive_desc_query(pd,dnnl_query_impl_info_str,0,&im); if(strstr(im,want))break; dnnl_primitive_desc_destroy(pd); if(dnnl_primitive_desc_iterator_next(it)!=dnnl_success){fprintf(stderr,"no %s\n",want);exit(1);}}}
  return pd;}
int main(int argc,char**argv){
  long M=atol(argv[1]),K=atol(argv[2]),N=atol(argv[3]); const char*mode=argv[4]; double secs=argc>5?atof(argv[5]):1;
  int nw=getenv("NW")?atoi(getenv("NW")):1;
  CK(dnnl_engine_create(&eng,dnnl_cpu,0));CK(dnnl_stream_create(&st,eng,dnnl_stream_default_flags));
  int parts=!strcmp(mode,"mm")?1:2; long n=N/parts; int dense=!strcmp(mode,"nsplitd"), ms_=!strcmp(mode,"msplit");
  if(ms_){n=N;}
  dnnl_primitive_desc_t pd=mkpd(ms_?M/2:M,K,n,dense||ms_?n:N);
  const char*impl;dnnl_primitive_desc_query(pd,dnnl_query_impl_info_str,0,&impl);
  const dnnl_memory_desc_t*wq=dnnl_primitive_desc_query_md(pd,dnnl_query_weights_md,0);
  dnnl_primitive_t pr;CK(dnnl_primitive_create(&pr,pd));
  dnnl_memory_desc_t s,b,d; dnnl_dims_t sd={M,K},bd={1,n},dd={M,N};
  dnnl_memory_desc_init_by_tag(&s,2,sd,dnnl_f32,dnnl_ab);dnnl_memory_desc_init_by_tag(&b,2,bd,dnnl_f32,dnnl_ab);dnnl_memory_desc_init_by_tag(&d,2,dd,dnnl_f32,dnnl_ab);
  dnnl_memory_t ms=mem(&s),mb=mem(&b),mdd=mem(&d); dnnl_memory_t mw[64][2]; for(int i=0;i<nw;i++)for(int p=0;p<parts;p++)mw[i][p]=mem(wq);
  void*dp; dnnl_memory_get_data_handle(mdd,&dp);
  const dnnl_memory_desc_t*dq=dnnl_primitive_desc_query_md(pd,dnnl_query_dst_md,0);
  dnnl_memory_t dpart[2]; for(int p=0;p<parts;p++){CK(dnnl_memory_create(&dpart[p],dq,eng,DNNL_MEMORY_NONE));dnnl_memory_set_data_handle(dpart[p],(float*)dp+(ms_?p*(M/2)*N:dense?p*M*n:p*n));}
  dnnl_memory_t spart[2]; const dnnl_memory_desc_t*sq=dnnl_primitive_desc_query_md(pd,dnnl_query_src_md,0); void*sp; dnnl_memory_get_data_handle(ms,&sp);
  for(int p=0;p<parts;p++){CK(dnnl_memory_create(&spart[p],sq,eng,DNNL_MEMORY_NONE));dnnl_memory_set_data_handle(spart[p],(float*)sp+(ms_?p*(M/2)*K:0));}
  dnnl_stream_t sts[2]; for(int p=0;p<2;p++)CK(dnnl_stream_create(&sts[p],eng,dnnl_stream_default_flags));
  double t=1e9,t0=now(); int cnt=0;
  while(now()-t0<secs||cnt<5*nw){ for(int i=0;i<nw;i++){
    double x=now();
    if(parts==1){dnnl_exec_arg_t a[4]={{DNNL_ARG_SRC,ms},{DNNL_ARG_WEIGHTS,mw[i][0]},{DNNL_ARG_BIAS,mb},{DNNL_ARG_DST,dpart[0]}};CK(dnnl_primitive_execute(pr,st,4,a));dnnl_stream_wait(st);}
    else {
      #pragma omp parallel num_threads(2)
      { int p=omp_get_thread_num(); dnnl_exec_arg_t a[4]={{DNNL_ARG_SRC,spart[p]},{DNNL_ARG_WEIGHTS,mw[i][ms_?0:p]},{DNNL_ARG_BIAS,mb},{DNNL_ARG_DST,dpart[p]}};CK(dnnl_primitive_execute(pr,sts[p],4,a));dnnl_stream_wait(sts[p]);}
    }
    x=now()-x;if(x<t)t=x;cnt++;}}
  printf("%s %ldx%ldx%ld nw=%d %s %.3f ms %.1f GFLOP/s\n",mode,M,K,N,nw,impl,t*1e3,2.0*M*K*N/t*1e-9);
  return 0;}
