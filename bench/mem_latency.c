#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <time.h>
#include <sys/mman.h>
int main(int argc, char **argv) {
    size_t bytes = (size_t)atol(argv[1]) << 20;
    size_t n = bytes / 64;
    char *buf = mmap(NULL, bytes, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0);
    madvise(buf, bytes, MADV_HUGEPAGE);
    size_t *perm = malloc(n * sizeof(size_t));
    for (size_t i = 0; i < n; i++) perm[i] = i;
    srand(1);
    for (size_t i = n - 1; i > 0; i--) { size_t j = ((size_t)rand() * RAND_MAX + rand()) % (i + 1); size_t t = perm[i]; perm[i] = perm[j]; perm[j] = t; }
    for (size_t i = 0; i < n; i++) *(char **)(buf + perm[i] * 64) = buf + perm[(i + 1) % n] * 64;
    char *p = buf + perm[0] * 64;
    size_t steps = 20000000;
    struct timespec a, b; clock_gettime(CLOCK_MONOTONIC, &a);
    for (size_t i = 0; i < steps; i++) p = *(char **)p;
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ns = ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / steps;
    printf("%zu MiB: %.1f ns per dependent load (%p)\n", bytes >> 20, ns, p);
    return 0;
}
