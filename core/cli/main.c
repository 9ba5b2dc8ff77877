/* The lamp executable (being written). */
#include <stdio.h>
int main(void) { return 0; }
