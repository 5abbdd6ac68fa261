#!/bin/sh
# mpirun across the emulated hosts, started once per host by `fabemu emulate --mpi DIR`:
#   MPI_DIR=DIR MPI_PROGRAM=./mpi_allreduce fabemu emulate SCENARIO --mpi DIR -- sh examples/emulate/mpirun.sh
# Rank 0 runs mpirun, which reaches the other hosts through DIR/rsh-agent and talks to them over
# the emulated fabric (eth0); the other ranks wait until it is done.
if [ "$RANK" = 0 ]; then
  mpirun --allow-run-as-root --oversubscribe --hostfile "$MPI_DIR/hostfile" \
    --mca plm_rsh_agent "$MPI_DIR/rsh-agent" --mca btl tcp,self \
    --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 \
    -np "$WORLD_SIZE" --map-by node "$MPI_PROGRAM"
  rc=$?
  touch "$MPI_DIR/done"
  exit $rc
fi
while [ ! -e "$MPI_DIR/done" ]; do sleep 0.1; done
