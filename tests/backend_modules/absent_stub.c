/* The library needs_library.c links against; its soname, liblamp_absent.so.1, names no file. */
__attribute__((visibility("default"))) int lamp_absent_function(void) { return 0; }
