/*
 * cuda/nvrtc_signals.h: the process's signal handling, left as the
 * program set it, whatever NVRTC does.
 *
 * What NVRTC does (measured with a C program that reads every signal's
 * disposition around each call, and sends signals during a compile):
 * dlopen() and nvrtcCreateProgram() change nothing.  nvrtcCompileProgram()
 * of NVRTC 13.0 (the CUDA toolkit's) and 12.9 (the nvidia-cuda-nvrtc-cu12
 * wheel), through signal():
 *   - sets SIGINT to SIG_IGN for a moment, which discards a SIGINT that
 *     is pending, even one every thread blocks (a sigwait()ing program
 *     loses it);
 *   - unless SIGINT was ignored, hands SIGINT and SIGTERM to a handler of
 *     its own for the first part of the compile, which ends the process
 *     with exit status 4 and no message (a Python process's Ctrl-C too),
 *     and ignores SIGXFSZ;
 *   - puts the previous handlers back with signal(): the handler's address
 *     only, so SA_SIGINFO, SA_ONSTACK, SA_NODEFER and SA_RESETHAND are
 *     lost, SA_RESTART is added and the handler's mask is emptied.  Python
 *     installs its SIGINT handler without SA_RESTART so that Ctrl-C
 *     interrupts a blocking read; after one compile it no longer did
 *     (KeyboardInterrupt came only when the read returned).
 * NVRTC 13.2 (the nvidia-cuda-nvrtc 13.2.86 wheel) changes nothing.
 *
 * So the library does two things, both safe for any number of threads
 * compiling at once:
 *   1. kdt_nvrtc_signals_shield(), once NVRTC is loaded: NVRTC's own
 *      calls to signal() for SIGINT and SIGTERM are answered with the
 *      disposition in force, and change nothing (its import of signal()
 *      is pointed at a function of this module: the only way to keep a
 *      library from installing a handler); so nothing is discarded, and
 *      a signal during a compile reaches the program's handler, or ends
 *      the process as the program's disposition says.  Other signals go
 *      to libc as NVRTC asked;
 *   2. kdt_nvrtc_signals_hold() and kdt_nvrtc_signals_release() around
 *      NVRTC's load and each compile: every disposition is read before,
 *      and one that differs after is put back as it was (flags and mask
 *      included), unless the program changed it meanwhile to a handler of
 *      its own.  Holds nest across threads: the dispositions are read
 *      when none is held and put back when the last is released, so
 *      overlapping compiles never save each other's.
 *
 * Layer: cuda (includes base/ only).
 */
#ifndef KDT_NVRTC_SIGNALS_H
#define KDT_NVRTC_SIGNALS_H

/* Points the loaded NVRTC `handle`'s import of signal() at this module
 * (1 above).  Returns how many import slots it changed: 0 for an NVRTC
 * that does not import signal() (13.2), or where this cannot be done
 * (a format other than ELF RELA); 2 above still applies.  Call it once,
 * before the first compile. */
int kdt_nvrtc_signals_shield(void *handle);

/* 2 above: around NVRTC's load and each compile.  Every hold is paired
 * with one release, on the same or another thread. */
void kdt_nvrtc_signals_hold(void);
void kdt_nvrtc_signals_release(void);

#endif /* KDT_NVRTC_SIGNALS_H */
