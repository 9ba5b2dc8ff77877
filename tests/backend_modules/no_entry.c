/* A shared object in the module's place that is not a backend module: it exports no entry. */
__attribute__((visibility("default"))) int lamp_not_a_backend(void) { return 0; }
