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
typedef struct{dnnl_primitive_t pr; dnnl_memory_t w[16]; const char*impl; double best;}cand;
int main(int argc,char**argv){
  long M=atol(argv[1]),K=atol(argv[2]),N=atol(argv[3]); double secs=atof(argv[4]); int nw=atoi(argv[5]); int sum=argc>6&&!strcmp(argv[6],"sum");
  CK(dnnl_engine_create(&eng,dnnl_cpu,0));CK(dnnl_stream_create(&st,eng,dnnl_stream_default_flags));
  dnnl_memory_desc_t s,w,b,d; dnnl_dims_t sd={M,K},wd={K,N},bd={1,N},dd={M,N};
  dnnl_memory_desc_init_by_tag(&s,2,sd,dnnl_f32,dnnl_ab);dnnl_memory_desc_init_by_tag(&w,2,wd,dnnl_f32,dnnl_format_tag_any);
  dnnl_memory_desc_init_by_tag(&b,2,bd,dnnl_f32,dnnl_ab);dnnl_memory_desc_init_by_tag(&d,2,dd,dnnl_f32,dnnl_ab);
  dnnl_matmul_desc_t md; CK(dnnl_matmul_desc_init(&md,&s,&w,&b,&d));
  dnnl_primitive_attr_t attr; dnnl_primitive_attr_create(&attr); dnnl_primitive_attr_set_scratchpad_mode(attr,dnnl_scratchpad_mode_user);
  if(sum){dnnl_post_ops_t po;dnnl_post_ops_create(&po);dnnl_post_ops_append_sum(po,1.0f);dnnl_primitive_attr_set_post_ops(attr,po);}
  cand c[2]; const char*names[2]={"brg","gemm"};
  for(int k=0;k<2;k++){dnnl_primitive_desc_iterator_t it; CK(dnnl_primitive_desc_iterator_create(&it,&md,attr,eng,NULL)); dnnl_primitive_desc_t pd;
    for(;;){pd=dnnl_primitive_desc_iterator_fetch(it);const char*im;dnnl_primitive_desc_query(pd,dnnl_query_impl_info_str,0,&im); if(strstr(im,names[k]))break; dnnl_primitive_desc_destroy(pd); if(dnnl_primitive_desc_iterator_next(it)!=dnnl_success){fprintf(stderr,"no %s\n",names[k]);exit(1);}}
    dnnl_primitive_desc_query(pd,dnnl_query_impl_info_str,0,&c[k].impl);
    const dnnl_memory_desc_t*wq=dnnl_primitive_desc_query_md(pd,dnnl_query_weights_md,0);
    for(int i=0;i<nw;i++)c[k].w[i]=mem(wq);
    CK(dnnl_primitive_create(&c[k].pr,pd)); c[k].best=1e9;}
  dnnl_memory_t ms=mem(&s),mb=mem(&b),mdd=mem(&d);
  dnnl_memory_desc_t spd; dnnl_dims_t spdd={1<<24}; dnnl_memory_desc_init_by_tag(&spd,1,spdd,dnnl_u8,dnnl_a); dnnl_memory_t msp=mem(&spd);
  double t0=now();
  while(now()-t0<secs){ for(int k=0;k<2;k++) for(int rep=0;rep<3;rep++) for(int i=0;i<nw;i++){
    dnnl_exec_arg_t a[5]={{DNNL_ARG_SRC,ms},{DNNL_ARG_WEIGHTS,c[k].w[i]},{DNNL_ARG_BIAS,mb},{DNNL_ARG_DST,mdd},{DNNL_ARG_SCRATCHPAD,msp}};
    double x=now();CK(dnnl_primitive_execute(c[k].pr,st,5,a));dnnl_stream_wait(st);x=now()-x;if(x<c[k].best)c[k].best=x;}}
  printf("%ldx%ldx%ld%s brg %.3f gemm %.3f ms  gemm/brg %.3f\n",M,K,N,sum?"+sum":"",c[0].best*1e3,c[1].best*1e3,c[1].best/c[0].best);
  return 0;}
