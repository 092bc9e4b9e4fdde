/* libnextb.so: NEEDED by rtld_next after libnexta.so. See rtld_next.c. */
int probe(void);

int probe(void) { return 3; }
