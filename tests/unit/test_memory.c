/*
** Tracked memory: the host-side table of blocks (no header beside a block, so a device pointer is
** never read) and the ledger per device and tag. Thousands of blocks are allocated and freed in a
** scrambled order, so the table grows, its probe runs wrap and interior entries are removed; after
** every step each live block still reports its size and device, and the ledger its sum.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/error.h"
#include "tensor/ledger.h"
#include "tensor/memory.h"

#define BLOCKS 3000

typedef struct live {
  void *p;
  size_t bytes;
} live;

/* Every live block is found with its size and device; every freed one is gone. */
static void check_table(const live *blocks, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (blocks[i].p == NULL) continue;
    if (lamp_mem_size(blocks[i].p) != blocks[i].bytes)
      fail_msg("block %zu: size %zu, expected %zu", i, lamp_mem_size(blocks[i].p), blocks[i].bytes);
    assert_int_equal(lamp_mem_device(blocks[i].p), LAMP_HOST);
  }
}

static size_t workspace_now(void) { return lamp_ledger_get(LAMP_HOST, LAMP_MEM_WORKSPACE).current; }

static void test_many_blocks_in_scrambled_order(void **state) {
  (void)state;
  static live blocks[BLOCKS];
  size_t base = workspace_now(), sum = 0;
  uint64_t r = 12345;
  for (size_t i = 0; i < BLOCKS; i++) {
    r = r * 6364136223846793005ull + 1442695040888963407ull;
    blocks[i].bytes = 1 + (size_t)(r >> 40) % 300;
    blocks[i].p = lamp_mem_alloc(LAMP_HOST, LAMP_MEM_WORKSPACE, blocks[i].bytes);
    assert_non_null(blocks[i].p);
    assert_int_equal((uintptr_t)blocks[i].p % 64, 0);
    const unsigned char *bytes = blocks[i].p;
    for (size_t k = 0; k < blocks[i].bytes; k++) assert_int_equal(bytes[k], 0); /* zero-filled */
    sum += blocks[i].bytes;
  }
  assert_int_equal(workspace_now() - base, sum);
  check_table(blocks, BLOCKS);
  /* free every third block, then the rest in a scrambled order, checking as the table thins */
  for (size_t i = 0; i < BLOCKS; i += 3) {
    lamp_mem_free(blocks[i].p);
    sum -= blocks[i].bytes;
    blocks[i].p = NULL;
  }
  check_table(blocks, BLOCKS);
  assert_int_equal(workspace_now() - base, sum);
  for (size_t step = 0, i = 0; step < BLOCKS; step++, i = (i + 1777) % BLOCKS) {
    if (blocks[i].p == NULL) continue;
    lamp_mem_free(blocks[i].p);
    sum -= blocks[i].bytes;
    blocks[i].p = NULL;
    if (step % 500 == 0) check_table(blocks, BLOCKS);
  }
  assert_int_equal(sum, 0);
  assert_int_equal(workspace_now(), base);
}

/* A pointer the table did not hand out is ignored by free and has no size; NULL likewise. */
static void test_foreign_pointers(void **state) {
  (void)state;
  int on_stack = 0;
  size_t base = workspace_now();
  lamp_mem_free(&on_stack);
  lamp_mem_free(NULL);
  assert_int_equal(lamp_mem_size(&on_stack), 0);
  assert_int_equal(lamp_mem_size(NULL), 0);
  assert_int_equal(lamp_mem_device(&on_stack), LAMP_HOST);
  void *p = lamp_mem_alloc(LAMP_HOST, LAMP_MEM_WORKSPACE, 100);
  lamp_mem_free(p);
  lamp_mem_free(p); /* a second free finds nothing: no double count */
  assert_int_equal(workspace_now(), base);
}

/* The ledger keeps each device apart, and a total per device. */
static void test_ledger_per_device(void **state) {
  (void)state;
  lamp_ledger_entry host_total = lamp_ledger_get(LAMP_HOST, LAMP_MEM_TAG_COUNT);
  lamp_ledger_add(LAMP_CUDA, LAMP_MEM_PARAMS, 1000);
  lamp_ledger_add(LAMP_CUDA, LAMP_MEM_GRADS, 24);
  assert_int_equal(lamp_ledger_get(LAMP_CUDA, LAMP_MEM_PARAMS).current, 1000);
  assert_int_equal(lamp_ledger_get(LAMP_CUDA, LAMP_MEM_TAG_COUNT).current, 1024);
  assert_int_equal(lamp_ledger_get(LAMP_CUDA, LAMP_MEM_TAG_COUNT).peak, 1024);
  assert_int_equal(lamp_ledger_get(LAMP_HOST, LAMP_MEM_TAG_COUNT).current, host_total.current);
  lamp_ledger_sub(LAMP_CUDA, LAMP_MEM_PARAMS, 1000);
  lamp_ledger_sub(LAMP_CUDA, LAMP_MEM_GRADS, 24);
  assert_int_equal(lamp_ledger_get(LAMP_CUDA, LAMP_MEM_TAG_COUNT).current, 0);
  assert_int_equal(lamp_ledger_get(LAMP_CUDA, LAMP_MEM_TAG_COUNT).peak, 1024);
  lamp_ledger_reset_peaks();
  assert_int_equal(lamp_ledger_get(LAMP_CUDA, LAMP_MEM_TAG_COUNT).peak, 0);
  assert_int_equal(lamp_ledger_get((lamp_device)LAMP_DEVICE_SLOTS, LAMP_MEM_PARAMS).current, 0); /* out of range */
}

/* A device without an allocator is refused by name; nothing is charged. */
static void test_device_without_memory(void **state) {
  (void)state;
  assert_null(lamp_mem_alloc(LAMP_CUDA, LAMP_MEM_PARAMS, 64));
  assert_string_equal(lamp_last_error(), "memory: device cuda has no allocator (its backend is not loaded)");
  assert_int_equal(lamp_ledger_get(LAMP_CUDA, LAMP_MEM_PARAMS).current, 0);
  assert_null(lamp_mem_alloc(LAMP_HOST, LAMP_MEM_TAG_COUNT, 64));
  assert_string_equal(lamp_last_error(), "memory: unknown tag 7");
}

/*
** The mapping of /proc/self/smaps that holds `p`: 1 with whether its VmFlags has `flag`, 0 where
** there is no such file (not Linux) or no mapping holds p.
*/
static int mapping_flag(const void *p, const char *flag, int *has) {
  FILE *f = fopen("/proc/self/smaps", "r");
  if (f == NULL) return 0;
  char line[512];
  int inside = 0, found = 0;
  uintptr_t at = (uintptr_t)p;
  while (fgets(line, sizeof line, f) != NULL) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) { /* a mapping's first line: "lo-hi perms ..." */
      inside = at >= lo && at < hi;
    } else if (inside && strncmp(line, "VmFlags:", 8) == 0) {
      *has = 0;
      for (char *word = strtok(line + 8, " \n"); word != NULL; word = strtok(NULL, " \n"))
        if (strcmp(word, flag) == 0) *has = 1;
      found = 1;
      break;
    }
  }
  fclose(f);
  return found;
}

/* Blocks of 2 MiB and more start on a 2 MiB boundary and are marked for transparent huge pages
   (VmFlags "hg") where the kernel has them; LAMP_HUGE_PAGES=0 keeps small pages. Either way the
   block is zeroed and its size recorded. */
static void test_large_blocks_ask_for_huge_pages(void **state) {
  (void)state;
  const size_t huge = (size_t)2 << 20, bytes = 2 * huge + 4100;
  unsetenv("LAMP_HUGE_PAGES");
  int thp = access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) == 0 && lamp_host_huge_pages();
  unsigned char *p = lamp_mem_alloc(LAMP_HOST, LAMP_MEM_ACTIVATIONS, bytes);
  assert_non_null(p);
  assert_int_equal(lamp_mem_size(p), bytes);
  assert_int_equal(p[0] | p[bytes / 2] | p[bytes - 1], 0);
  int has = -1;
  if (thp) {
    assert_int_equal((uintptr_t)p % huge, 0);
    assert_true(mapping_flag(p, "hg", &has));
    assert_int_equal(has, 1);
  }
  lamp_mem_free(p);

  setenv("LAMP_HUGE_PAGES", "0", 1);
  assert_false(lamp_host_huge_pages());
  p = lamp_mem_alloc(LAMP_HOST, LAMP_MEM_ACTIVATIONS, bytes);
  assert_non_null(p);
  assert_int_equal(p[0] | p[bytes - 1], 0);
  has = -1;
  if (mapping_flag(p, "hg", &has)) assert_int_equal(has, 0);
  lamp_mem_free(p);
  unsetenv("LAMP_HUGE_PAGES");

  /* Small blocks keep the 64-byte alignment of the heap's. */
  p = lamp_mem_alloc(LAMP_HOST, LAMP_MEM_ACTIVATIONS, 4096);
  assert_non_null(p);
  assert_int_equal((uintptr_t)p % 64, 0);
  lamp_mem_free(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_many_blocks_in_scrambled_order),
      cmocka_unit_test(test_foreign_pointers),
      cmocka_unit_test(test_ledger_per_device),
      cmocka_unit_test(test_device_without_memory),
      cmocka_unit_test(test_large_blocks_ask_for_huge_pages),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
