/* A growable text buffer for the header writer and the info dump; a failed allocation sticks,
   so callers check once at the end. */
#ifndef LAMP_CHECKPOINT_STRBUF_H
#define LAMP_CHECKPOINT_STRBUF_H

#include <stddef.h>

typedef struct ckpt_strbuf {
  char *text; /* malloc'ed, always NUL-terminated once anything was added */
  size_t len;
  size_t cap;
  int failed;
} ckpt_strbuf;

void ckpt_strbuf_add(ckpt_strbuf *b, const char *s, size_t n);
void ckpt_strbuf_printf(ckpt_strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ckpt_strbuf_free(ckpt_strbuf *b);

#endif
