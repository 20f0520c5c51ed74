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

int num_parse_int(const char *what, const char *s, long long lo, long long hi, long long *out,
                  perr_t *err) {
    if (num_flag_value(what, s, err)) return -1;
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
