// Two processes mimic a 2-rank all_gather by attach: each copies its own block into its recv buffer and reads
// the peer's block by process_vm_readv, in slices of S bytes; a shared-memory barrier between calls.
#define _GNU_SOURCE
#include <sys/uio.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e6+t.tv_nsec/1e3;}
int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
struct shared { _Atomic long gen[2]; long addr[2]; int pid[2]; };
static void barrier(struct shared*s,int me,long g){ atomic_store(&s->gen[me],g); while(atomic_load(&s->gen[!me])<g) __builtin_ia32_pause(); }
int main(int argc,char**argv){
  size_t B=strtoul(argv[1],0,0); int iters=atoi(argv[2]); int rounds=atoi(argv[3]);
  size_t slices[8]; int ns=0; for(int i=4;i<argc;i++) slices[ns++]=strtoul(argv[i],0,0);
  struct shared*s=mmap(0,4096,PROT_READ|PROT_WRITE,MAP_SHARED|MAP_ANONYMOUS,-1,0);
  int me = fork()==0 ? 1 : 0;
  char*send=malloc(B),*recv=malloc(2*B); memset(send,me+1,B); memset(recv,0,2*B);
  s->addr[me]=(long)send; s->pid[me]=getpid();
  long g=1; barrier(s,me,g++);
  pid_t peer=s->pid[!me]; char*remote=(char*)s->addr[!me];
  double*t=malloc(sizeof(double)*iters);
  for(int r=0;r<rounds;r++) for(int k=0;k<ns;k++){ size_t S=slices[k];
    for(int it=0;it<iters;it++){ barrier(s,me,g++); double t0=now();
      memcpy(recv+me*B,send,B);
      for(size_t off=0;off<B;off+=S){ size_t n=S<B-off?S:B-off; struct iovec l={recv+(!me)*B+off,n},rr={remote+off,n};
        if(process_vm_readv(peer,&l,1,&rr,1,0)!=(ssize_t)n){perror("cma");exit(1);} }
      barrier(s,me,g++); t[it]=now()-t0; }
    qsort(t,iters,sizeof(double),cmp);
    if(me==0) printf("block %zu slice %7zu: median %.1f us\n",B,S,t[iters/2]); fflush(stdout);
  }
  if(me==0) wait(0);
  return 0;
}
