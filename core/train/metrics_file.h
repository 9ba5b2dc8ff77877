/*
** A JSON Lines file of training records (docs/metrics.md). Each record is one line, handed to the
** kernel in a single write(2) together with its newline: there is no stdio buffer to lose when the
** process is killed, nor to split a line over two writes, so a killed run leaves whole lines only.
**
** The file is opened for appending when the Trainer is made, so a path that cannot be written is
** refused at once. Whether the run then starts the file afresh or continues it is decided later:
** by a resume (continue after the checkpoint's step) or else by the first record (start over).
*/
#ifndef LAMP_TRAIN_METRICS_FILE_H
#define LAMP_TRAIN_METRICS_FILE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "lamp/abi.h"

typedef struct lamp_metrics_file lamp_metrics_file;

/* Opens (creating it if missing, never truncating it) the file at path for appending. */
lamp_status lamp_metrics_file_open(lamp_metrics_file **out, const char *path);
void lamp_metrics_file_close(lamp_metrics_file *f);
const char *lamp_metrics_file_path(const lamp_metrics_file *f);

/* Empties the file: a run that did not resume writes its own records only. */
lamp_status lamp_metrics_file_start_over(lamp_metrics_file *f);

/*
** Continues the file after `step`: cuts it at the first record whose "step" is past it (a run
** killed after its last checkpoint wrote those, and the resumed run writes them again) or at an
** incomplete last line. *dropped: the lines cut.
*/
lamp_status lamp_metrics_file_continue(lamp_metrics_file *f, uint64_t step, size_t *dropped);

/* Appends the record as one line of compact JSON. A write that fails half-way is cut back off,
   so the file still holds whole lines only. */
lamp_status lamp_metrics_file_append(lamp_metrics_file *f, const json_t *record);

#endif
