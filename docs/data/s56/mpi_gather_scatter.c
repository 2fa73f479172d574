/* MPI_Gather / MPI_Scatter timed as ../shared/peers/mpi_coll.c times the other collectives (3 untimed
 * calls, then 200 iterations up to 64 KiB, 40 up to 4 MiB, 10 above; the slowest rank's mean), for a
 * side-by-side look at chorus-perf gather/scatter, which compare.sh does not cover.
 *   usage: mpi_gather_scatter gather|scatter [min_bytes] [max_bytes]
 * Sizes as nccl-tests' gather_perf/scatter_perf count them: the root's whole buffer; root 0; float32. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const char* coll = argc > 1 ? argv[1] : "gather";
  const int gather = !strcmp(coll, "gather");
  const int inplace = getenv("IN_PLACE") && atoi(getenv("IN_PLACE"));  /* IN_PLACE=1: MPI_IN_PLACE on the root */
  size_t minb = argc > 2 ? strtoull(argv[2], 0, 10) : 8, maxb = argc > 3 ? strtoull(argv[3], 0, 10) : (64u << 20);
  float *s = malloc(maxb + 64), *r = malloc(maxb + 64);
  if (rank == 0) printf("# mpi %s nranks %d\n# %10s %12s %10s %10s %8s\n", coll, n, "size", "time_us", "algbw", "busbw", "#wrong");
  for (size_t b = minb; b <= maxb; b *= 2) {
    size_t per = b / 4 / n;
    if (!per) continue;
    for (size_t i = 0; i < per * n; i++) s[i] = (float)(rank * 1000 + i % 997);
    if (inplace && gather && rank == 0) for (size_t i = 0; i < per; i++) r[i] = s[i];  /* the root's own block */
    if (inplace && !gather && rank == 0) for (size_t i = 0; i < per * n; i++) r[i] = s[i];  /* scatter: r is send */
    int iters = b <= (1 << 16) ? 200 : (b <= (1 << 22) ? 40 : 10);
#define RUN()                                                                          \
  do {                                                                                 \
    if (gather) MPI_Gather(inplace && rank == 0 ? MPI_IN_PLACE : s, (int)per, MPI_FLOAT, r, (int)per, MPI_FLOAT, 0,  \
                           MPI_COMM_WORLD);                                                                    \
    else MPI_Scatter(s, (int)per, MPI_FLOAT, inplace && rank == 0 ? MPI_IN_PLACE : r, (int)per, MPI_FLOAT, 0,  \
                     MPI_COMM_WORLD);                                                                          \
  } while (0)
    for (int w = 0; w < 3; w++) RUN();
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int it = 0; it < iters; it++) RUN();
    double t = (MPI_Wtime() - t0) / iters, tmax;
    MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    long wrong = 0, wall;
    if (gather && rank == 0) {
      for (int j = 0; j < n; j++)
        for (size_t i = 0; i < per; i++) wrong += r[j * per + i] != (float)(j * 1000 + i % 997);
    } else if (!gather) {
      for (size_t i = 0; i < per; i++) wrong += r[i] != (float)((rank * per + i) % 997);
    }
    MPI_Reduce(&wrong, &wall, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    size_t bytes = per * 4 * n;
    if (rank == 0) {
      double alg = bytes / tmax / 1e9;
      printf("  %10zu %12.2f %10.3f %10.3f %8ld\n", bytes, tmax * 1e6, alg, alg * (n - 1) / n, wall);
      fflush(stdout);
    }
  }
  MPI_Finalize();
  return 0;
}
