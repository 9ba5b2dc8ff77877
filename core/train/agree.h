/*
** Whether every rank holds the same values: the trainer's check that the ranks build the same
** step (at creation) and feed it the same way (at the start of each lamp_trainer_train).
**
** Each rank lists its values as short texts under field names, in the same order on every rank.
** One all-reduce of 4 numbers (two 24-bit fingerprints of the texts, and their negations, under
** MAX) tells every rank whether all agree; only when they do not are the texts gathered, so the
** message can name the first field that differs and each rank's value. Every rank reaches the
** same verdict, so all of them take the gathering path together and none is left waiting.
*/
#ifndef LAMP_TRAIN_AGREE_H
#define LAMP_TRAIN_AGREE_H

#include <stddef.h>

#include "plugin/instance.h"

#define LAMP_AGREE_MAX_FIELDS 32
#define LAMP_AGREE_TEXT 64 /* bytes of a value's text, its terminating NUL included */

typedef struct lamp_agree {
  size_t n;
  const char *names[LAMP_AGREE_MAX_FIELDS];                /* "accum", "the batch size" */
  char values[LAMP_AGREE_MAX_FIELDS][LAMP_AGREE_TEXT];     /* "4", "fp16", "cosine (total 100)" */
} lamp_agree;

void lamp_agree_init(lamp_agree *a);

/* Adds a field (its text cut to LAMP_AGREE_TEXT - 1 bytes); name must outlive the check. The
   caller keeps to LAMP_AGREE_MAX_FIELDS: further fields are not added. */
void lamp_agree_add(lamp_agree *a, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* A double as the shortest text that reads back as it (0.1, 65536, 1e-08, nan), for values. */
const char *lamp_agree_number(double v, char *buf, size_t size);

/*
** Collective over comm (a no-op for one rank). On disagreement: LAMP_ERR_INVALID_USAGE with
** "<who>: the ranks disagree on <field>: rank 0 has <v0>, rank 1 has <v1>; <advice>". A failed
** collective keeps the communicator's message, after "<who>: checking that every rank has <what>".
*/
lamp_status lamp_agree_check(const lamp_agree *a, lamp_comm *comm, const char *who, const char *what,
                             const char *advice);

#endif
