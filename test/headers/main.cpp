// The generated translation units only need to compile and link; nothing runs.
int main() { return 0; }
