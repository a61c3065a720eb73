/*
 * test_emu_kern_cuda.c - tests/kernels/test_kern_cuda.c on the emulated
 * CUDA runtime (cuda_emu_rt.h): every CUDA kernel byte-compared against its
 * CPU reference, with device memory that host code must not touch.
 */
#define DC_TEST_CUDA_EMU 1
#include "kernels/test_kern_cuda.c"
