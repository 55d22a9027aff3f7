/* standalone: KxK conv (K 1|3, stride 1|2, pad K/2), batch 1, nChw16c, OW == 7, own kernel vs oneDNN */
#define _GNU_SOURCE
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <oneapi/dnnl/dnnl.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
#define CK(x) do{dnnl_status_t s_=(x);if(s_!=dnnl_success){fprintf(stderr,"%s: %d\n",#x,s_);exit(1);}}while(0)
#ifndef NV
#define NV 4
#endif
#define PT 7
#ifndef PFH
#define PFH _MM_HINT_T1
#endif
/* one output row (7 pixels) x 64 oc. x: input image base (nChw16c, IH x IW); w: panel [K][K][IC][64] */
static inline __attribute__((always_inline)) void rowtile(const float*x,int64_t IH,int64_t IW,int64_t IC,const float*w,const float*bias,float*y,int64_t ys,int64_t oh,
   const int K,const int S,int sum,int relu,const char*pf,int64_t pfn){
  __m512 acc[PT][NV];
  for(int j=0;j<NV;j++){__m512 b=_mm512_loadu_ps(bias+16*j); for(int p=0;p<PT;p++)acc[p][j]=b;}
  const int P=K/2; int64_t xs=IH*IW*16; int64_t pfi=0;
  for(int kh=0;kh<K;kh++){
    int64_t ih=oh*S-P+kh; if(ih<0||ih>=IH) { continue; }
    for(int kw=0;kw<K;kw++){
      const float*wt=w+(kh*K+kw)*IC*NV*16;
      const float*xr=x+(ih*IW)*16;
      for(int64_t icb=0;icb<IC/16;icb++){
        const float*xb=xr+icb*xs; const float*wb=wt+icb*16*NV*16;
        if(pf){ for(int q=0;q<pfn;q++) _mm_prefetch(pf+(pfi*pfn+q)*64, PFH); pfi++; }
#pragma GCC unroll 16
        for(int l=0;l<16;l++){
          __m512 wv[NV];
          for(int j=0;j<NV;j++)wv[j]=_mm512_loadu_ps(wb+l*NV*16+16*j);
#pragma GCC unroll 7
          for(int p=0;p<PT;p++){ int iw=p*S-P+kw; if(iw<0||iw>=IW) continue;
            __m512 b=_mm512_set1_ps(xb[iw*16+l]); for(int j=0;j<NV;j++)acc[p][j]=_mm512_fmadd_ps(b,wv[j],acc[p][j]);}
        }
      }
    }
  }
  for(int j=0;j<NV;j++)for(int p=0;p<PT;p++){__m512 v=acc[p][j]; if(sum)v=_mm512_add_ps(v,_mm512_loadu_ps(y+j*ys+p*16)); if(relu)v=_mm512_max_ps(v,_mm512_setzero_ps()); _mm512_storeu_ps(y+j*ys+p*16,v);}
}
#define RT(K,S) static void rt_##K##_##S(const float*x,int64_t IH,int64_t IW,int64_t IC,const float*w,const float*bias,float*y,int64_t ys,int64_t oh,int sum,int relu,const char*pf,int64_t pfn){rowtile(x,IH,IW,IC,w,bias,y,ys,oh,K,S,sum,relu,pf,pfn);}
RT(1,1) RT(1,2) RT(3,1) RT(3,2)
static void own(const float*x,const float*w,const float*bias,float*y,int64_t IC,int64_t OC,int64_t IH,int64_t IW,int64_t OH,int K,int S,int sum,int relu,int pfon){
  int64_t np=OC/(NV*16); int64_t OW=7;
  void(*f)(const float*,int64_t,int64_t,int64_t,const float*,const float*,float*,int64_t,int64_t,int,int,const char*,int64_t)=
    K==1?(S==1?rt_1_1:rt_1_2):(S==1?rt_3_1:rt_3_2);
  int64_t psz=(int64_t)K*K*IC*NV*16; /* floats per panel */
#pragma omp parallel for num_threads(2) schedule(static)
  for(int64_t pn=0;pn<np;pn++)
    for(int64_t oh=0;oh<OH;oh++){
      /* prefetch the next panel spread over this panel's row tiles; a tile runs (taps valid) x IC/16 k-blocks; assume all K rows valid for spread */
      int64_t lines=psz*4/64, per=(lines+OH-1)/OH, steps=(int64_t)K*K*IC/16, pfn=(per+steps-1)/steps;
      const char*pf=(pfon&&pn+1<np)?(const char*)(w+(pn+1)*psz)+oh*per*64:0;
      f(x,IH,IW,IC,w+pn*psz,bias+pn*NV*16,y+pn*NV*OH*OW*16+oh*OW*16,OH*OW*16,oh,sum,relu,pf,pfn);
    }
}

/* tap-chunked: for one panel, taps outer, row tiles inner, partial sums in part (OH*7*64 floats) */
static inline __attribute__((always_inline)) void tap_tile(const float*x,int64_t IH,int64_t IW,int64_t IC,const float*wt,const float*bias,float*part,int first,int last,float*y,int64_t ys,int64_t oh,int kh,int kw,
   const int K,const int S,int sum,int relu,const char*pf,int64_t pfn){
  __m512 acc[PT][NV];
  if(first){ for(int j=0;j<NV;j++){__m512 b=_mm512_loadu_ps(bias+16*j); for(int p=0;p<PT;p++)acc[p][j]=b;} }
  else { for(int j=0;j<NV;j++)for(int p=0;p<PT;p++)acc[p][j]=_mm512_load_ps(part+(p*NV+j)*16); }
  const int P=K/2; int64_t xs=IH*IW*16;
  int64_t ih=oh*S-P+kh;
  if(ih>=0&&ih<IH){
      const float*xr=x+(ih*IW)*16;
      for(int64_t icb=0;icb<IC/16;icb++){
        const float*xb=xr+icb*xs; const float*wb=wt+icb*16*NV*16;
        if(pf){ for(int q=0;q<pfn;q++) _mm_prefetch(pf+(icb*pfn+q)*64, PFH); }
#pragma GCC unroll 16
        for(int l=0;l<16;l++){
          __m512 wv[NV];
          for(int j=0;j<NV;j++)wv[j]=_mm512_loadu_ps(wb+l*NV*16+16*j);
#pragma GCC unroll 7
          for(int p=0;p<PT;p++){ int iw=p*S-P+kw; if(iw<0||iw>=IW) continue;
            __m512 b=_mm512_set1_ps(xb[iw*16+l]); for(int j=0;j<NV;j++)acc[p][j]=_mm512_fmadd_ps(b,wv[j],acc[p][j]);}
        }
      }
  }
  if(!last){ for(int j=0;j<NV;j++)for(int p=0;p<PT;p++)_mm512_store_ps(part+(p*NV+j)*16,acc[p][j]); return; }
  for(int j=0;j<NV;j++)for(int p=0;p<PT;p++){__m512 v=acc[p][j]; if(sum)v=_mm512_add_ps(v,_mm512_loadu_ps(y+j*ys+p*16)); if(relu)v=_mm512_max_ps(v,_mm512_setzero_ps()); _mm512_storeu_ps(y+j*ys+p*16,v);}
}
#define TT(KW,S) static void tt_##KW##_##S(const float*x,int64_t IH,int64_t IW,int64_t IC,const float*wt,const float*bias,float*part,int first,int last,float*y,int64_t ys,int64_t oh,int kh,int sum,int relu,const char*pf,int64_t pfn){tap_tile(x,IH,IW,IC,wt,bias,part,first,last,y,ys,oh,kh,KW,3,S,sum,relu,pf,pfn);}
TT(0,1) TT(1,1) TT(2,1) TT(0,2) TT(1,2) TT(2,2)
static void own_taps(const float*x,const float*w,const float*bias,float*y,int64_t IC,int64_t OC,int64_t IH,int64_t IW,int64_t OH,int K,int S,int sum,int relu,int pfon){
  int64_t np=OC/(NV*16); int64_t OW=7;
  typedef void(*tf)(const float*,int64_t,int64_t,int64_t,const float*,const float*,float*,int,int,float*,int64_t,int64_t,int,int,int,const char*,int64_t);
  tf fs1[3]={tt_0_1,tt_1_1,tt_2_1}, fs2[3]={tt_0_2,tt_1_2,tt_2_2};
  int64_t tsz=IC*NV*16, psz=(int64_t)K*K*tsz;
#pragma omp parallel num_threads(2)
  { float part[7*7*NV*16] __attribute__((aligned(64)));
    int nth=omp_get_num_threads(), id=omp_get_thread_num(); int64_t lo=np*id/nth, hi=np*(id+1)/nth;
    for(int64_t pn=lo;pn<hi;pn++) for(int t=0;t<K*K;t++){
      int kh=t/K,kw=t%K; const float*wt=w+pn*psz+t*tsz;
      const float*nx=(t+1<K*K)?wt+tsz:(pn+1<hi?w+(pn+1)*psz:0);
      int64_t lines=tsz*4/64, per=(lines+OH-1)/OH, pfn=(per+IC/16-1)/(IC/16);
      for(int64_t oh=0;oh<OH;oh++){
        const char*pf=(pfon&&nx)?(const char*)nx+oh*per*64:0;
        (S==1?fs1:fs2)[kw](x,IH,IW,IC,wt,bias+pn*NV*16,part+oh*7*NV*16,t==0,t==K*K-1,y+pn*NV*OH*OW*16+oh*OW*16,OH*OW*16,oh,kh,sum,relu,pf,pfn);
      }
    }
  }
}
int main(int argc,char**argv){
  int64_t IC=atoll(argv[1]),OC=atoll(argv[2]),IH=atoll(argv[3]),IW=IH; int K=atoi(argv[4]),S=atoi(argv[5]); int sum=atoi(argv[6]); int rounds=atoi(argv[7]);
  const char*algo=getenv("ALGO")?getenv("ALGO"):"direct"; int pfon=getenv("PF")?atoi(getenv("PF")):1;
  int ncopy=getenv("NCOPY")?atoi(getenv("NCOPY")):8; int64_t Pd=K/2; int64_t OH=(IH+2*Pd-K)/S+1, OW=OH;
  if(OW!=7){fprintf(stderr,"OW must be 7\n");return 2;}
  dnnl_engine_t eng;dnnl_stream_t st;CK(dnnl_engine_create(&eng,dnnl_cpu,0));CK(dnnl_stream_create(&st,eng,dnnl_stream_default_flags));
  dnnl_memory_desc_t smd,wmd,bmd,dmd,wplain; dnnl_dims_t sd={1,IC,IH,IW},wd={OC,IC,K,K},bd={OC},dd={1,OC,OH,OW};
  CK(dnnl_memory_desc_init_by_tag(&smd,4,sd,dnnl_f32,dnnl_nChw16c));CK(dnnl_memory_desc_init_by_tag(&dmd,4,dd,dnnl_f32,dnnl_nChw16c));
  CK(dnnl_memory_desc_init_by_tag(&wmd,4,wd,dnnl_f32,dnnl_format_tag_any));CK(dnnl_memory_desc_init_by_tag(&wplain,4,wd,dnnl_f32,dnnl_oihw));
  CK(dnnl_memory_desc_init_by_tag(&bmd,1,bd,dnnl_f32,dnnl_a));
  dnnl_dims_t str={S,S},dil={0,0},pad={Pd,Pd}; dnnl_convolution_desc_t cd;
  CK(dnnl_dilated_convolution_forward_desc_init(&cd,dnnl_forward_inference,!strcmp(algo,"wino")?dnnl_convolution_winograd:dnnl_convolution_direct,&smd,&wmd,&bmd,&dmd,str,dil,pad,pad));
  dnnl_primitive_attr_t attr;CK(dnnl_primitive_attr_create(&attr)); dnnl_post_ops_t po;CK(dnnl_post_ops_create(&po));
  if(sum)CK(dnnl_post_ops_append_sum(po,1.f)); CK(dnnl_post_ops_append_eltwise(po,1.f,dnnl_eltwise_relu,0,0)); CK(dnnl_primitive_attr_set_post_ops(attr,po));
  CK(dnnl_primitive_attr_set_scratchpad_mode(attr,dnnl_scratchpad_mode_user));
  dnnl_primitive_desc_t pd;CK(dnnl_primitive_desc_create(&pd,&cd,attr,eng,NULL));
  const char*impl;dnnl_primitive_desc_query(pd,dnnl_query_impl_info_str,0,&impl);
  const dnnl_memory_desc_t*pw=dnnl_primitive_desc_query_md(pd,dnnl_query_weights_md,0);
  const dnnl_memory_desc_t*psp=dnnl_primitive_desc_query_md(pd,dnnl_query_scratchpad_md,0);
  dnnl_memory_t spm;CK(dnnl_memory_create(&spm,psp,eng,DNNL_MEMORY_ALLOCATE));
  dnnl_primitive_t prim;CK(dnnl_primitive_create(&prim,pd));
  float*bias=malloc(OC*4); for(int i=0;i<OC;i++)bias[i]=(rand()/(float)RAND_MAX-0.5f)*0.1f;
  dnnl_memory_t bm;CK(dnnl_memory_create(&bm,&bmd,eng,bias));
  int64_t WN=OC*IC*K*K; float*wp=malloc(WN*4); for(int64_t i=0;i<WN;i++)wp[i]=(rand()/(float)RAND_MAX-0.5f)*0.05f;
  dnnl_memory_t wpm;CK(dnnl_memory_create(&wpm,&wplain,eng,wp));
  dnnl_memory_t sm[64],wm[64],dm[64]; float*ow[64],*od[64],*xs[64];
  size_t ssz=IC*IH*IW*4,dsz=OC*OH*OW*4;
  for(int c=0;c<ncopy;c++){
    xs[c]=aligned_alloc(64,ssz); for(size_t i=0;i<ssz/4;i++)xs[c][i]=rand()/(float)RAND_MAX-0.5f;
    CK(dnnl_memory_create(&sm[c],&smd,eng,xs[c]));
    CK(dnnl_memory_create(&wm[c],pw,eng,DNNL_MEMORY_ALLOCATE));
    CK(dnnl_memory_create(&dm[c],&dmd,eng,DNNL_MEMORY_ALLOCATE));
    dnnl_primitive_desc_t rpd;dnnl_primitive_t r;CK(dnnl_reorder_primitive_desc_create(&rpd,&wplain,eng,pw,eng,NULL));CK(dnnl_primitive_create(&r,rpd));
    dnnl_exec_arg_t ra[2]={{DNNL_ARG_FROM,wpm},{DNNL_ARG_TO,wm[c]}};CK(dnnl_primitive_execute(r,st,2,ra));CK(dnnl_stream_wait(st));
    ow[c]=aligned_alloc(64,WN*4); /* [OC/64][kh][kw][IC][64] */
    for(int64_t o=0;o<OC;o++)for(int64_t i=0;i<IC;i++)for(int kh=0;kh<K;kh++)for(int kw=0;kw<K;kw++){int64_t pn=o/(NV*16),oo=o%(NV*16); ow[c][(((pn*K+kh)*K+kw)*IC+i)*(NV*16)+oo]=wp[((o*IC+i)*K+kh)*K+kw];}
    od[c]=aligned_alloc(64,dsz); memset(od[c],0,dsz);
    float*q;dnnl_memory_get_data_handle(dm[c],(void**)&q);memset(q,0,dsz);
  }
  { dnnl_exec_arg_t a[5]={{DNNL_ARG_SRC,sm[0]},{DNNL_ARG_WEIGHTS,wm[0]},{DNNL_ARG_BIAS,bm},{DNNL_ARG_DST,dm[0]},{DNNL_ARG_SCRATCHPAD,spm}};
    CK(dnnl_primitive_execute(prim,st,5,a));CK(dnnl_stream_wait(st)); if(getenv("TAPS")) own_taps(xs[0],ow[0],bias,od[0],IC,OC,IH,IW,OH,K,S,sum,1,pfon); else own(xs[0],ow[0],bias,od[0],IC,OC,IH,IW,OH,K,S,sum,1,pfon);
    float*q;dnnl_memory_get_data_handle(dm[0],(void**)&q); double md=0; for(size_t i=0;i<dsz/4;i++){double d=q[i]-od[0][i]; if(d<0)d=-d; if(d>md)md=d;} printf("maxdiff %g\n",md);}
  double bd1=1e9,bo=1e9; double td[4096],to[4096]; int n=0;
  for(int r=0;r<rounds;r++){
    for(int k=0;k<2;k++){ int which=(r+k)&1; double tt=0;
      for(int c=0;c<ncopy;c++){ double t0=now();
        if(which==0){dnnl_exec_arg_t a[5]={{DNNL_ARG_SRC,sm[c]},{DNNL_ARG_WEIGHTS,wm[c]},{DNNL_ARG_BIAS,bm},{DNNL_ARG_DST,dm[c]},{DNNL_ARG_SCRATCHPAD,spm}};CK(dnnl_primitive_execute(prim,st,5,a));CK(dnnl_stream_wait(st));}
        else if(getenv("TAPS")) own_taps(xs[c],ow[c],bias,od[c],IC,OC,IH,IW,OH,K,S,sum,1,pfon); else own(xs[c],ow[c],bias,od[c],IC,OC,IH,IW,OH,K,S,sum,1,pfon);
        double t=now()-t0; if(which==0){if(t<bd1)bd1=t;} else {if(t<bo)bo=t;} tt+=t; }
      if(which==0)td[n]=tt/ncopy; else to[n]=tt/ncopy; }
    n++;
  }
  int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
  qsort(td,n,8,cmp);qsort(to,n,8,cmp);
  double fl=2.0*IC*OC*OH*OW*K*K;
  printf("%ldx%ld %ld k%d s%d sum%d ncopy%d pf%d: %s best %.4f ms (%.0f GF/s) med %.4f | own best %.4f (%.0f GF/s) med %.4f | own/dnnl med %.3f\n",(long)IC,(long)OC,(long)IH,K,S,sum,ncopy,pfon,impl,bd1*1e3,fl/bd1/1e9,td[n/2]*1e3,bo*1e3,fl/bo/1e9,to[n/2]*1e3,to[n/2]/td[n/2]);
}
