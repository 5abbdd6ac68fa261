/* An MPI All-Reduce of each rank's (rank + 1), checked against n (n + 1) / 2.
 * Built with mpicc and launched by examples/emulate/mpirun.sh across `fabemu emulate`'s hosts. */
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long v = rank + 1, sum = 0;
    MPI_Allreduce(&v, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    printf("mpi rank %d of %d sum %ld\n", rank, size, sum);
    MPI_Finalize();
    return sum == (long)size * (size + 1) / 2 ? 0 : 1;
}
