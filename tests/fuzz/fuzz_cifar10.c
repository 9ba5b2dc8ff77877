/* libFuzzer harness for the CIFAR-10 reader's from-memory entry point. */
#include <stdint.h>

#include "data/cifar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  lamp_cifar10 out;
  if (lamp_cifar10_parse(data, size, "fuzz", &out) == LAMP_OK) lamp_cifar10_free(&out);
  return 0;
}
