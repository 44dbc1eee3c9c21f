/* INCRBYFLOAT arithmetic exactly as Redis 7 does it (util.c string2ld / ld2string,
 * t_string.c incrbyfloatCommand): x87 80-bit `long double`, parsed with strtold and printed
 * with "%.17Lf" minus trailing zeros. Rust has no 80-bit float, and f64 gives different
 * text (0.1 -> "0.10000000000000001"), so this one function is C. */
#include <errno.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LONG_DOUBLE_CHARS 5 * 1024

static int string2ld(const char *s, size_t slen, long double *dp) {
    char buf[MAX_LONG_DOUBLE_CHARS];
    long double value;
    char *eptr;

    if (slen == 0 || slen >= sizeof(buf)) return 0;
    memcpy(buf, s, slen);
    buf[slen] = '\0';

    errno = 0;
    value = strtold(buf, &eptr);
    if (isspace((unsigned char)buf[0]) || eptr[0] != '\0' || (size_t)(eptr - buf) != slen ||
        ((errno == ERANGE) &&
         (value == HUGE_VAL || value == -HUGE_VAL || fpclassify(value) == FP_ZERO)) ||
        errno == EINVAL || isnan(value))
        return 0;

    if (dp) *dp = value;
    return 1;
}

/* Returns the length written to `out` (>= 0), -1 if an input is not a float, -2 if the sum
 * is NaN or infinite. `out` must hold MAX_LONG_DOUBLE_CHARS bytes. A missing current value is
 * passed as cur == NULL (counts as 0). */
long ringlet_incrbyfloat(const char *cur, size_t curlen, const char *incr, size_t incrlen,
                         char *out, size_t outcap) {
    long double value = 0, by;
    if (cur != NULL && !string2ld(cur, curlen, &value)) return -1;
    if (!string2ld(incr, incrlen, &by)) return -1;
    value += by;
    if (isnan(value) || isinf(value)) return -2;

    /* ld2string(buf, len, value, LD_STR_HUMAN) */
    int l = snprintf(out, outcap, "%.17Lf", value);
    if (l < 0 || (size_t)l + 1 > outcap) return 0; /* Redis then stores "" */
    if (strchr(out, '.') != NULL) {
        char *p = out + l - 1;
        while (*p == '0') {
            p--;
            l--;
        }
        if (*p == '.') l--;
    }
    if (l == 2 && out[0] == '-' && out[1] == '0') {
        out[0] = '0';
        l = 1;
    }
    return l;
}
