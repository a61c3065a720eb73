/*
 * test_emu_values.c - tests/kernels/test_kern_cuda_values.c on the
 * emulated CUDA runtime (cuda_emu_rt.h): the device payload decoders
 * against the CPU, with device memory that host code must not touch.
 */
#define DC_TEST_CUDA_EMU 1
#include "kernels/test_kern_cuda_values.c"
