/*
 * cuda_emu_rt.h - the emulated CUDA runtime of the `emu` test suite (C API).
 *
 * kernels/kern_cuda.cu compiled for the CPU (tests/kernels/cuda_emu.h's
 * thread model) over a runtime whose "device memory" is an arena that host
 * code must never touch: the arena is mapped PROT_NONE and opened (under
 * one process-wide lock) only while an emulated kernel, copy or memset
 * runs.  A CPU read or write of a device pointer from anywhere else faults;
 * the SIGSEGV handler prints "host code touched emulated device memory"
 * with the address and a backtrace naming the caller, then aborts.
 * Copies are counted per direction: the bytes that would cross PCIe.
 *
 * dc_emu_install() puts the emulated table behind kern_cuda.h
 * (kernels/kern_cuda_ops.h), so the engine's device paths run on it.
 * Limits: the gate is process-wide (mprotect has no per-thread view), so
 * while one thread's emulated kernel runs another thread's stray access is
 * not caught; kernels run one at a time; streams are synchronous (but
 * each piece of work must name a live stream or the default one).
 */
#ifndef DC_TESTS_CUDA_EMU_RT_H
#define DC_TESTS_CUDA_EMU_RT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Map the arena (once), install the SIGSEGV check and the emulated table
 *  behind kern_cuda.h. */
void dc_emu_install(void);
/** Back to the build's table (the arena stays mapped). */
void dc_emu_uninstall(void);
/** Bytes copied host -> device and device -> host since the last reset. */
void dc_emu_pcie(uint64_t *h2d, uint64_t *d2h);
void dc_emu_pcie_reset(void);
/** The same, counted for the copies thread `th` made (since it first
 *  copied; not reset): one receiver's bytes when several run in a process.
 *  0 when th never copied. */
int dc_emu_pcie_of(pthread_t th, uint64_t *h2d, uint64_t *d2h);
/** 1 when p lies in the emulated device arena. */
int dc_emu_is_device(const void *p);
/** Bytes currently allocated in the arena. */
size_t dc_emu_live_bytes(void);
/** Work (launches, copies, memsets, synchronizations) this thread queued
 *  on the default stream (not reset); work on a stream never created or
 *  destroyed aborts.  Live streams (cudaStreamCreateWithFlags). */
uint64_t dc_emu_default_stream_ops(void);
size_t dc_emu_live_streams(void);
/** Kernel launches since install (a test can check that work ran there). */
uint64_t dc_emu_launches(void);
/** Host bytes page-locked now (cudaHostRegister), and the bytes copied to
 *  the device from page-locked ranges (not reset). */
size_t dc_emu_locked_bytes(void);
uint64_t dc_emu_h2d_locked(void);

#ifdef __cplusplus
}
#endif
#endif /* DC_TESTS_CUDA_EMU_RT_H */
