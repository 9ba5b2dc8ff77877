/* Valid, with a library constructor: when LAMP_TEST_CTOR_MARK names a file, loading this library
** creates it. The tests use it to prove that no code of a refused or unsearched file ran. */
#include <stdio.h>
#include <stdlib.h>

#define FAKE_NAME "ctormark"
#include "fake_optim.h"

__attribute__((constructor)) static void mark_loaded(void) {
  const char *mark = getenv("LAMP_TEST_CTOR_MARK");
  FILE *f = mark != NULL ? fopen(mark, "w") : NULL;
  if (f != NULL) fclose(f);
}
