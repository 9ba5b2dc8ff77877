/*
** What the processor can do, asked once per process: the instruction sets the kernels choose
** between at run time. A build runs on any x86-64; each kernel takes the fastest path that both
** the CPU and the operating system allow (AVX state saved by the OS, AVX-512 state too). Every
** feature test of the code base, tests included, goes through here.
**
** LAMP_CPU_ISA caps the answer below what the CPU has: `avx2` hides every AVX-512 feature,
** `sse` everything from AVX on (the x86-64 baseline); `native`, or no value, takes the CPU's
** own. It makes a run choose the kernels another machine would, and lets the tests run each
** fallback on a CPU that would never take it. Another value is ignored with a warning.
*/
#ifndef LAMP_BASE_CPU_H
#define LAMP_BASE_CPU_H

typedef enum lamp_isa {
  LAMP_ISA_AVX = 0,
  LAMP_ISA_AVX2,
  LAMP_ISA_FMA,
  LAMP_ISA_F16C,
  LAMP_ISA_AVX512F,
  LAMP_ISA_AVX512BW,
  LAMP_ISA_AVX512VL,
  LAMP_ISA_AVX512DQ,
  LAMP_ISA_AVX512BF16,
  LAMP_ISA_XGETBV1, /* XGETBV with ECX = 1 reads XINUSE (which register states are in use) */
  LAMP_ISA_COUNT
} lamp_isa;

/* 1 when the CPU has the feature and the OS saves the registers it uses; 0 elsewhere (and on
   every feature off x86-64). */
int lamp_cpu_has(lamp_isa isa);

/* Who made the processor (CPUID's vendor string). For the few choices an instruction set cannot
   make: the same instruction can run at very different rates on different makers' cores. */
typedef enum lamp_vendor { LAMP_VENDOR_OTHER = 0, LAMP_VENDOR_INTEL, LAMP_VENDOR_AMD } lamp_vendor;

lamp_vendor lamp_cpu_vendor(void);

#endif
