/*
** Sizes checked before they are allocated: a model, a batch's activations or an optimizer state
** larger than the machine's physical memory is refused by name ("model: ... Linear(1000000000 ->
** 1000000000) ...") instead of failing in the allocator, or worse, being swapped to death.
** Memory the host addresses is measured against the physical memory (sysconf); a device with
** memory of its own reports no capacity today, so its sizes are left to its allocator.
*/
#ifndef LAMP_NN_FITS_H
#define LAMP_NN_FITS_H

#include <stddef.h>
#include <stdint.h>

#include "tensor/tensor.h"

/* The machine's physical memory in bytes; 0 when the system does not say. */
uint64_t lamp_physical_memory(void);

/* a * b + c, saturating at UINT64_MAX: sizes that overflow are simply too large. */
uint64_t lamp_size_mul_add(uint64_t a, uint64_t b, uint64_t c);

/*
** LAMP_OK when `bytes` may fit on `device`; otherwise LAMP_ERR_INVALID_ARG (the request is what is
** wrong) with "<what> needs N bytes, more than this machine's X.X GiB (M bytes) of physical
** memory<hint>" ("needs more than 18446744073709551614 bytes" for a saturated count). `what` is
** formatted like printf; hint may be NULL.
*/
lamp_status lamp_check_fits(lamp_device device, uint64_t bytes, const char *hint, const char *what, ...)
    __attribute__((format(printf, 4, 5)));

#endif
