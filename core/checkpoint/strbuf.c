#include "checkpoint/strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int reserve(ckpt_strbuf *b, size_t extra) {
  if (b->failed) return 0;
  if (b->len + extra + 1 <= b->cap) return 1;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->len + extra + 1) {
    if (cap > ((size_t)-1) / 2) {
      b->failed = 1;
      return 0;
    }
    cap *= 2;
  }
  char *p = realloc(b->text, cap);
  if (p == NULL) {
    b->failed = 1;
    return 0;
  }
  b->text = p;
  b->cap = cap;
  return 1;
}

void ckpt_strbuf_add(ckpt_strbuf *b, const char *s, size_t n) {
  if (!reserve(b, n)) return;
  memcpy(b->text + b->len, s, n);
  b->len += n;
  b->text[b->len] = '\0';
}

void ckpt_strbuf_printf(ckpt_strbuf *b, const char *fmt, ...) {
  char small[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) {
    b->failed = 1;
    return;
  }
  if ((size_t)n < sizeof small) {
    ckpt_strbuf_add(b, small, (size_t)n);
    return;
  }
  if (!reserve(b, (size_t)n)) return;
  va_start(ap, fmt);
  vsnprintf(b->text + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

void ckpt_strbuf_free(ckpt_strbuf *b) {
  free(b->text);
  b->text = NULL;
  b->len = b->cap = 0;
  b->failed = 0;
}
