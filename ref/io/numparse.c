/* numparse.c - strict numbers for flags and config files (numparse.h). */
#include "parity/numparse.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int num_flag_value(const char *flag, const char *val, perr_t *err) {
    if (!val) return perr_set(err, "%s needs a value", flag);
    if (!strncmp(val, "--", 2))
        return perr_set(err, "%s needs a value, got the flag '%s' (a value may not start with --)",
                        flag, val);
    return 0;
}

/* The one spelling of a number (numparse.h): an optional '-', then
 * digits; a fraction and an exponent where frac. strtoll and strtod
 * also take leading blanks, a '+', hex ("0x10", "0x1p4"), "inf" and
 * "nan": each is refused here, before they see the text. */
int num_is_decimal(const char *s, int frac) {
    const char *p = s + (*s == '-');
    size_t ip = strspn(p, "0123456789");
    p += ip;
    if (!frac) return ip > 0 && !*p;
    size_t fp = 0;
    if (*p == '.') fp = strspn(++p, "0123456789"), p += fp;
    if (ip + fp == 0) return 0;
    if (*p == 'e' || *p == 'E') {
        p += 1 + (p[1] == '+' || p[1] == '-');
        size_t ep = strspn(p, "0123456789");
        if (!ep) return 0;
        p += ep;
    }
    return !*p;
}

/* Not decimal: "inf" and "nan" said as what they are, else the spelling. */
static int not_decimal(const char *what, const char *s, perr_t *err) {
    char *end;
    const double v = strtod(s, &end);
    if (end != s && !*end && !isfinite(v) && s[0] != ' ')
        return perr_set(err, "%s: '%s' is not a finite number", what, s);
    return perr_set(err, "%s: expected a decimal number, got '%s'", what, s);
}

int num_parse_int(const char *what, const char *s, long long lo, long long hi, long long *out,
                  perr_t *err) {
    if (num_flag_value(what, s, err)) return -1;
    if (!num_is_decimal(s, 0))
        return perr_set(err, "%s: expected an integer in [%lld, %lld] (decimal digits), got '%s'",
                        what, lo, hi, s);
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end)
        return perr_set(err, "%s: expected an integer in [%lld, %lld], got '%s'", what, lo, hi, s);
    if (errno == ERANGE || v < lo || v > hi)
        return perr_set(err, "%s: '%s' is out of range: expected an integer in [%lld, %lld]", what,
                        s, lo, hi);
    *out = v;
    return 0;
}

int num_to_f32(const char *what, double x, float *out, perr_t *err) {
    if (!isfinite(x)) return perr_set(err, "%s: %g is not a finite number", what, x);
    if (fabs(x) > FLT_MAX)
        return perr_set(err, "%s: %g is beyond fp32's range (largest %.9g)", what, x,
                        (double)FLT_MAX);
    if (x != 0.0 && fabs(x) < FLT_MIN)
        return perr_set(err, "%s: %g underflows fp32 (nonzero magnitudes below %.9g lose "
                             "precision or become 0)",
                        what, x, (double)FLT_MIN);
    *out = (float)x;
    return 0;
}

int num_parse_f32(const char *what, const char *s, float *out, perr_t *err) {
    if (num_flag_value(what, s, err)) return -1;
    if (!num_is_decimal(s, 1)) return not_decimal(what, s, err);
    char *end;
    errno = 0;
    /* strtod, not strtof: a double holds every value we must refuse by
     * name (beyond fp32, or underflowing it) without saturating first */
    double v = strtod(s, &end);
    if (end == s || *end) return perr_set(err, "%s: expected a number, got '%s'", what, s);
    if (errno == ERANGE && fabs(v) > 1.0)
        return perr_set(err, "%s: '%s' is beyond fp32's range (largest %.9g)", what, s,
                        (double)FLT_MAX);
    if (errno == ERANGE || (v != 0.0 && fabs(v) < FLT_MIN))
        return perr_set(err, "%s: '%s' underflows fp32 (nonzero magnitudes below %.9g lose "
                             "precision or become 0)",
                        what, s, (double)FLT_MIN);
    return num_to_f32(what, v, out, err);
}

int num_parse_double(const char *what, const char *s, double lo, double hi, double *out,
                     perr_t *err) {
    if (num_flag_value(what, s, err)) return -1;
    if (!num_is_decimal(s, 1)) return not_decimal(what, s, err);
    errno = 0;
    const double v = strtod(s, NULL);
    if (!isfinite(v) || v < lo || v > hi)
        return perr_set(err, "%s: '%s' is out of range: expected a number in [%g, %g]", what, s, lo,
                        hi);
    *out = v;
    return 0;
}

int num_parse_int_list(const char *what, const char *s, long long lo, long long hi, int max,
                       long long *out, int *n, perr_t *err) {
    *n = 0;
    if (num_flag_value(what, s, err)) return -1;
    for (const char *at = s;;) {
        const char *comma = strchr(at, ',');
        const size_t len = comma ? (size_t)(comma - at) : strlen(at);
        char item[32];
        if (len >= sizeof item) /* longer than any integer in range */
            return perr_set(err, "%s: expected a comma-separated list of integers in [%lld, %lld], "
                                 "got '%s'", what, lo, hi, s);
        memcpy(item, at, len);
        item[len] = 0;
        if (*n == max) return perr_set(err, "%s: more than %d entries in '%s'", what, max, s);
        if (num_parse_int(what, item, lo, hi, &out[*n], err)) return -1;
        ++*n;
        if (!comma) return 0;
        at = comma + 1;
    }
}
