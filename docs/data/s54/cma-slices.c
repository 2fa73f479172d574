#define _GNU_SOURCE
#include <sys/uio.h>
#include <sys/mman.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e6+t.tv_nsec/1e3;}
int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
int main(int argc,char**argv){
  size_t K=strtoul(argv[1],0,0); int iters=atoi(argv[2]); int thp=atoi(argv[3]);
  char*src=malloc(K+(4<<20)),*dst=malloc(K+(4<<20));
  if(thp<0){src=aligned_alloc(2<<20,K);dst=aligned_alloc(2<<20,K);}
  memset(src,1,K);memset(dst,2,K);
  pid_t p=getpid();
  size_t slices[]={256<<10,512<<10,1<<20,2<<20,4<<20,K};
  double *t=malloc(sizeof(double)*iters);
  for(int round=0;round<3;round++){
    for(int s=0;s<6;s++){size_t sl=slices[s]; if(sl>K) continue;
      for(int it=0;it<iters;it++){double t0=now();
        for(size_t off=0;off<K;off+=sl){struct iovec l={dst+off,sl},r={src+off,sl}; if(process_vm_readv(p,&l,1,&r,1,0)!=(ssize_t)sl){perror("cma");return 1;}}
        t[it]=now()-t0;}
      qsort(t,iters,sizeof(double),cmp);
      printf("K=%zu slice=%zu median %.1f us\n",K,sl,t[iters/2]);}
    for(int it=0;it<iters;it++){double t0=now(); memcpy(dst,src,K); t[it]=now()-t0;} qsort(t,iters,sizeof(double),cmp);printf("memcpy median %.1f\n",t[iters/2]);
  }
}
