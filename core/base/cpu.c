/*
** CPU feature detection: CPUID for what the processor implements, XGETBV for what the OS saves
** on a context switch (an instruction set whose registers the OS does not save must not be used).
** The answers are computed once and kept.
*/
#include "base/cpu.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

static unsigned features; /* bit i: lamp_isa i */
static lamp_vendor vendor;
static pthread_once_t detect_once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__) || defined(__i386__)
#define XCR0_AVX 0x6u     /* the XMM and YMM halves */
#define XCR0_AVX512 0xe6u /* those, the opmask registers and both ZMM halves */

static unsigned read_xcr0(void) {
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  (void)hi;
  return lo;
}

static unsigned bit_if(int present, lamp_isa isa) { return present ? 1u << isa : 0u; }

/* Leaf 0 spells the vendor in EBX, EDX, ECX. */
static lamp_vendor detect_vendor(void) {
  unsigned max, b, c, d;
  char name[13];
  __cpuid(0, max, b, c, d);
  memcpy(name, &b, 4), memcpy(name + 4, &d, 4), memcpy(name + 8, &c, 4);
  name[12] = '\0';
  if (strcmp(name, "GenuineIntel") == 0) return LAMP_VENDOR_INTEL;
  if (strcmp(name, "AuthenticAMD") == 0) return LAMP_VENDOR_AMD;
  return LAMP_VENDOR_OTHER;
}

static void detect(void) {
  unsigned eax, ebx, ecx, edx;
  vendor = detect_vendor();
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return;
  unsigned xcr0 = (ecx & bit_OSXSAVE) ? read_xcr0() : 0;
  int avx_state = (xcr0 & XCR0_AVX) == XCR0_AVX, avx512_state = (xcr0 & XCR0_AVX512) == XCR0_AVX512;
  int avx = avx_state && (ecx & bit_AVX);
  unsigned f = bit_if(avx, LAMP_ISA_AVX) | bit_if(avx && (ecx & bit_FMA), LAMP_ISA_FMA) |
               bit_if(avx && (ecx & bit_F16C), LAMP_ISA_F16C);
  unsigned ebx7 = 0, eax7_1 = 0, eaxd = 0;
  if (__get_cpuid_max(0, NULL) >= 7) {
    __cpuid_count(7, 0, eax, ebx7, ecx, edx);
    __cpuid_count(7, 1, eax7_1, ebx, ecx, edx);
  }
  if (__get_cpuid_max(0, NULL) >= 0xd) __cpuid_count(0xd, 1, eaxd, ebx, ecx, edx);
  f |= bit_if(avx && (ebx7 & bit_AVX2), LAMP_ISA_AVX2);
  int avx512 = avx && avx512_state && (ebx7 & bit_AVX512F);
  f |= bit_if(avx512, LAMP_ISA_AVX512F) | bit_if(avx512 && (ebx7 & bit_AVX512BW), LAMP_ISA_AVX512BW) |
       bit_if(avx512 && (ebx7 & bit_AVX512VL), LAMP_ISA_AVX512VL) |
       bit_if(avx512 && (ebx7 & bit_AVX512DQ), LAMP_ISA_AVX512DQ) |
       bit_if(avx512 && (eax7_1 & (1u << 5)), LAMP_ISA_AVX512BF16) |
       bit_if(avx && (eaxd & (1u << 2)), LAMP_ISA_XGETBV1);
  features = f;
}
#else
static void detect(void) { features = 0; }
#endif

#define AVX512_FEATURES \
  ((1u << LAMP_ISA_AVX512F) | (1u << LAMP_ISA_AVX512BW) | (1u << LAMP_ISA_AVX512VL) | (1u << LAMP_ISA_AVX512DQ) | \
   (1u << LAMP_ISA_AVX512BF16))
#define AVX_FEATURES \
  (AVX512_FEATURES | (1u << LAMP_ISA_AVX) | (1u << LAMP_ISA_AVX2) | (1u << LAMP_ISA_FMA) | (1u << LAMP_ISA_F16C))

/* The features LAMP_CPU_ISA hides (see cpu.h). XGETBV1 stays: it tells what the OS tracks, not
   which kernels may run. */
static unsigned capped_features(const char *cap) {
  if (cap == NULL || *cap == '\0' || strcmp(cap, "native") == 0) return 0;
  if (strcmp(cap, "avx2") == 0) return AVX512_FEATURES;
  if (strcmp(cap, "sse") == 0) return AVX_FEATURES;
  lamp_log(LAMP_LOG_WARN, NULL, "LAMP_CPU_ISA: expected native, avx2 or sse, found '%s'; using what the CPU has", cap);
  return 0;
}

static void detect_capped(void) {
  detect();
  features &= ~capped_features(getenv("LAMP_CPU_ISA"));
}

int lamp_cpu_has(lamp_isa isa) {
  if ((unsigned)isa >= LAMP_ISA_COUNT) return 0;
  pthread_once(&detect_once, detect_capped);
  return (features >> isa) & 1u;
}

lamp_vendor lamp_cpu_vendor(void) {
  pthread_once(&detect_once, detect_capped);
  return vendor;
}
