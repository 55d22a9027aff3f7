#define _POSIX_C_SOURCE 200809L
#include <dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
#define CK(x) do{dnnl_status_t s_=(x); if(s_!=dnnl_success){fprintf(stderr,"%s:%d %d\n",__FILE__,__LINE__,s_);exit(1);}}while(0)
static dnnl_engine_t eng; static dnnl_stream_t st;
static dnnl_memory_t mem(const dnnl_memory_desc_t*md){dnnl_memory_t m;CK(dnnl_memory_create(&m,md,eng,DNNL_MEMORY_ALLOCATE));void*p;dnnl_memory_get_data_handle(m,&p);size_t n=dnnl_memory_desc_get_size(md);for(size_t i=0;i<n/4;i++)((float*)p)[i]=(float)((i*7919)%1000)/1000.f-0.5f;return m;}
static double run(dnnl_primitive_t pr,int na,dnnl_exec_arg_t*a,double secs){double best=1e9,t0=now();int n=0;while(now()-t0<secs||n<5){double t=now();CK(dnnl_primitive_execute(pr,st,na,a));dnnl_stream_wait(st);t=now()-t;if(t<best)best=t;n++;}return best;}
int main(int argc,char**argv){
  long M=atol(argv[1]),K=atol(argv[2]),N=atol(argv[3]); const char*mode=argv[4]; double secs=argc>5?atof(argv[5]):1;
  CK(dnnl_engine_create(&eng,dnnl_cpu,0));CK(dnnl_stream_create(&st,eng,dnnl_stream_default_flags));
  dnnl_primitive_desc_t pd; dnnl_memory_desc_t s,w,b,d;
  if(!strcmp(mode,"mm")){
    dnnl_dims_t sd={M,K},wd={K,N},bd={1,N},dd={M,N};
    dnnl_memory_desc_init_by_tag(&s,2,sd,dnnl_f32,dnnl_ab);dnnl_memory_desc_init_by_tag(&w,2,wd,dnnl_f32,dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&b,2,bd,dnnl_f32,dnnl_ab);dnnl_memory_desc_init_by_tag(&d,2,dd,dnnl_f32,dnnl_ab);
    dnnl_matmul_desc_t md; CK(dnnl_matmul_desc_init(&md,&s,&w,&b,&d)); CK(dnnl_primitive_desc_create(&pd,&md,NULL,eng,NULL));
  } else if(!strcmp(mode,"bmm")){
    long nb=atol(getenv("NB")); long m=M/nb;
    dnnl_dims_t sd={nb,m,K},wd={1,K,N},bd={1,1,N},dd={nb,m,N};
    dnnl_memory_desc_init_by_tag(&s,3,sd,dnnl_f32,dnnl_abc);dnnl_memory_desc_init_by_tag(&w,3,wd,dnnl_f32,dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&b,3,bd,dnnl_f32,dnnl_abc);dnnl_memory_desc_init_by_tag(&d,3,dd,dnnl_f32,dnnl_abc);
    dnnl_matmul_desc_t md; CK(dnnl_matmul_desc_init(&md,&s,&w,&b,&d)); CK(dnnl_primitive_desc_create(&pd,&md,NULL,eng,NULL));
  } else { /* ip */
    dnnl_dims_t sd={M,K},wd={N,K},bd={N},dd={M,N};
    dnnl_memory_desc_init_by_tag(&s,2,sd,dnnl_f32,dnnl_ab);dnnl_memory_desc_init_by_tag(&w,2,wd,dnnl_f32,dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&b,1,bd,dnnl_f32,dnnl_a);dnnl_memory_desc_init_by_tag(&d,2,dd,dnnl_f32,dnnl_ab);
    dnnl_inner_product_desc_t id; CK(dnnl_inner_product_forward_desc_init(&id,dnnl_forward_inference,&s,&w,&b,&d)); CK(dnnl_primitive_desc_create(&pd,&id,NULL,eng,NULL));
  }
  const char*impl;dnnl_primitive_desc_query(pd,dnnl_query_impl_info_str,0,&impl);
  const dnnl_memory_desc_t*wq=dnnl_primitive_desc_query_md(pd,dnnl_query_weights_md,0);
  dnnl_primitive_t pr;CK(dnnl_primitive_create(&pr,pd));
  int nw=getenv("NW")?atoi(getenv("NW")):1;
  dnnl_memory_t ms=mem(&s),mb=mem(&b),mdd=mem(&d); dnnl_memory_t mw[64]; for(int i=0;i<nw;i++)mw[i]=mem(wq);
  double t=1e9,t0=now(); int n=0;
  while(now()-t0<secs||n<5*nw){ for(int i=0;i<nw;i++){
  dnnl_exec_arg_t a[4]={{DNNL_ARG_SRC,ms},{DNNL_ARG_WEIGHTS,mw[i]},{DNNL_ARG_BIAS,mb},{DNNL_ARG_DST,mdd}};
  double x=now();CK(dnnl_primitive_execute(pr,st,4,a));dnnl_stream_wait(st);x=now()-x;if(x<t)t=x;n++;}}
  (void)run;
  printf("%s %ldx%ldx%ld %s %.3f ms %.1f GFLOP/s\n",mode,M,K,N,impl,t*1e3,2.0*M*K*N/t*1e-9);
  return 0;}
