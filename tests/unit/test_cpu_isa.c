/*
** LAMP_CPU_ISA (core/base/cpu.h) against what Linux says the CPU has (/proc/cpuinfo's flags):
** unset or `native`, lamp_cpu_has agrees with the flags; `avx2` hides every AVX-512 feature and
** keeps the rest; `sse` hides everything from AVX on; another value is ignored with one warning
** that names it. tests/CMakeLists.txt runs this program under each setting.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/cpu.h"
#include "base/log.h"

static const struct {
  lamp_isa isa;
  const char *flag;
  int avx512; /* hidden by avx2 */
} features[] = {
    {LAMP_ISA_AVX, "avx", 0},           {LAMP_ISA_AVX2, "avx2", 0},         {LAMP_ISA_FMA, "fma", 0},
    {LAMP_ISA_F16C, "f16c", 0},         {LAMP_ISA_AVX512F, "avx512f", 1},   {LAMP_ISA_AVX512BW, "avx512bw", 1},
    {LAMP_ISA_AVX512VL, "avx512vl", 1}, {LAMP_ISA_AVX512DQ, "avx512dq", 1}, {LAMP_ISA_AVX512BF16, "avx512_bf16", 1},
};

static char flags[8192]; /* " flag flag ... " of the first processor */

static int read_flags(void) {
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f == NULL) return 0;
  char line[8192];
  int found = 0;
  while (!found && fgets(line, sizeof line, f) != NULL) {
    if (strncmp(line, "flags", 5) != 0) continue;
    const char *colon = strchr(line, ':');
    if (colon == NULL) continue;
    snprintf(flags, sizeof flags, " %.*s ", (int)strcspn(colon + 1, "\n"), colon + 1);
    found = 1;
  }
  fclose(f);
  return found;
}

static int cpu_flag(const char *name) {
  char word[64];
  snprintf(word, sizeof word, " %s ", name);
  return strstr(flags, word) != NULL;
}

static char warnings[1024];
static int warning_count;

static void capture(lamp_log_level level, const char *line, void *userdata) {
  (void)userdata;
  if (level != LAMP_LOG_WARN) return;
  warning_count++;
  snprintf(warnings, sizeof warnings, "%s", line);
}

static void answers_follow_the_setting(void **state) {
  (void)state;
#if !defined(__x86_64__)
  skip();
#endif
  if (!read_flags()) skip();
  const char *cap = getenv("LAMP_CPU_ISA");
  int native = cap == NULL || *cap == '\0' || strcmp(cap, "native") == 0;
  int avx2 = cap != NULL && strcmp(cap, "avx2") == 0, sse = cap != NULL && strcmp(cap, "sse") == 0;
  int bogus = !native && !avx2 && !sse;
  lamp_log_set_sink(capture, NULL);
  for (size_t k = 0; k < sizeof features / sizeof *features; k++) {
    int expected = cpu_flag(features[k].flag) && !sse && !(avx2 && features[k].avx512);
    if (lamp_cpu_has(features[k].isa) != expected)
      fail_msg("LAMP_CPU_ISA=%s: lamp_cpu_has(%s) = %d, expected %d", cap ? cap : "(unset)", features[k].flag,
               lamp_cpu_has(features[k].isa), expected);
  }
  lamp_log_set_sink(NULL, NULL);
  if (bogus) {
    char want[256];
    snprintf(want, sizeof want,
             "warning: LAMP_CPU_ISA: expected native, avx2 or sse, found '%s'; using what the CPU has", cap);
    assert_int_equal(warning_count, 1); /* once, however often it is asked */
    assert_string_equal(warnings, want);
  } else {
    assert_int_equal(warning_count, 0);
  }
}

/* The vendor is what /proc/cpuinfo's vendor_id says, whatever LAMP_CPU_ISA hides. */
static void vendor_follows_cpuinfo(void **state) {
  (void)state;
#if !defined(__x86_64__)
  skip();
#endif
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f == NULL) skip();
  char line[512], id[64] = "";
  while (id[0] == '\0' && fgets(line, sizeof line, f) != NULL) {
    const char *colon = strncmp(line, "vendor_id", 9) == 0 ? strchr(line, ':') : NULL;
    if (colon != NULL) sscanf(colon + 1, "%63s", id);
  }
  fclose(f);
  if (id[0] == '\0') skip();
  lamp_vendor want = strcmp(id, "GenuineIntel") == 0   ? LAMP_VENDOR_INTEL
                     : strcmp(id, "AuthenticAMD") == 0 ? LAMP_VENDOR_AMD
                                                       : LAMP_VENDOR_OTHER;
  if (lamp_cpu_vendor() != want) fail_msg("vendor_id %s: lamp_cpu_vendor() = %d, expected %d", id, lamp_cpu_vendor(), want);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(answers_follow_the_setting),
                                     cmocka_unit_test(vendor_follows_cpuinfo)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
