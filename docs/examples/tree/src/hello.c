int hello(void) { return 42; }
