/* numparse.h - numbers from flags and config files, strictly.
 *
 * A value is taken only when all of it is a number that fits where it
 * goes; otherwise the message names the flag or field and says which
 * rule failed: not a number, out of the integer range, beyond fp32's
 * range, or underflowing fp32 (a nonzero value below fp32's normal range
 * would lose precision or become 0, and a hyperparameter that silently
 * becomes 0 changes the run). Numbers have one spelling, decimal
 * (num_is_decimal): no blanks, no '+', no hex, no "inf" or "nan", so a
 * value means what it reads as. JSON numbers follow JSON's grammar,
 * which is the same (json.c).
 */
#ifndef PARITY_NUMPARSE_H
#define PARITY_NUMPARSE_H

#include "parity/error.h"

/* A command-line flag's value: present and not itself a flag ("--x"). */
int num_flag_value(const char *flag, const char *val, perr_t *err);
/* Whether s is all one decimal number: -?[0-9]+ and, with frac, an
 * optional .[0-9]* and exponent e[+-]?[0-9]+ (".5" and "5." too). */
int num_is_decimal(const char *s, int frac);
/* A decimal integer in [lo, hi]. `what` names the flag or field. */
int num_parse_int(const char *what, const char *s, long long lo, long long hi, long long *out,
                  perr_t *err);
/* A finite decimal number that fp32 represents without underflow. */
int num_parse_f32(const char *what, const char *s, float *out, perr_t *err);
/* The same rule for a value already parsed as a double (JSON). */
int num_to_f32(const char *what, double x, float *out, perr_t *err);
/* A finite decimal number in [lo, hi] (sizes in MB, rates). */
int num_parse_double(const char *what, const char *s, double lo, double hi, double *out,
                     perr_t *err);
/* A comma-separated list of decimal integers in [lo, hi], at most max
 * of them, into out[0 .. *n): "3,3,2". */
int num_parse_int_list(const char *what, const char *s, long long lo, long long hi, int max,
                       long long *out, int *n, perr_t *err);

#endif
