/* links.h — `tfbench links`: what the links deliver. With GPUs, first the copy matrices between rank 0's node's GPUs
 * (bench/links_gpu.c). A matrix of point-to-point bandwidth (one way
 * and both ways) and latency for every pair of ranks, then nccl-tests-style sweeps of all-reduce, all-gather,
 * reduce-scatter, broadcast and send/receive over message sizes (-b, -e, -f; warm-up at every size) with time,
 * algorithm and bus bandwidth and a #wrong count from a pass on data whose exact result is known. Buffers are the
 * backend's memory (--device: GPU memory with the CUDA backend) and the transport is the communication interface
 * (MPI for host memory, NCCL for GPU memory). Returns the exit status. */
#ifndef TFB_LINKS_H
#define TFB_LINKS_H

int tfb_links_main(int argc, char **argv);

#endif
