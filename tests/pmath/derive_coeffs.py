#!/usr/bin/env python3
"""derive_coeffs.py - derives every constant and polynomial in ref/kernels/pmath.c.

    python3 tests/pmath/derive_coeffs.py          # print the generated C block
    python3 tests/pmath/derive_coeffs.py --check  # compare it with pmath.c

Nothing here is copied from a math library. Each polynomial is the
Chebyshev interpolant of the target function at the Chebyshev points of
the first kind on the interval pmath.c uses, computed with 200-bit mpmath
arithmetic, converted to ordinary (monomial) coefficients in that same
precision and only then rounded to the nearest double. Chebyshev
interpolation is within a small factor of the minimax polynomial, which is
plenty when the target is fp64 accuracy for fp32 results.

For every fit the script evaluates the polynomial exactly as pmath.c does
(Python floats are IEEE doubles and Python never fuses a multiply-add) on a
dense grid and reports the worst relative error against mpmath, so the
comment next to each table in pmath.c can quote a measured figure.

The degrees were chosen as the smallest that bring the fit error below
about 2^-53 (one fp64 rounding); beyond that, rounding of the evaluation
dominates and more terms buy nothing.
"""
import math
import re
import sys

import mpmath as mp

mp.mp.prec = 200


def rd(v):
    """Round an mpmath number to the nearest double."""
    return float(mp.mpf(v))


def cheb_monomial(f, a, b, deg):
    """Monomial coefficients c[0..deg] (in the variable u itself, not a
    shifted one) of the Chebyshev interpolant of f on [a, b]."""
    a, b = mp.mpf(a), mp.mpf(b)
    n = deg + 1
    mid, half = (a + b) / 2, (b - a) / 2
    nodes = [mp.cos(mp.pi * (k + mp.mpf(1) / 2) / n) for k in range(n)]
    vals = [f(mid + half * t) for t in nodes]
    # Chebyshev coefficients in t in [-1, 1].
    cheb = []
    for j in range(n):
        s = mp.fsum(vals[k] * mp.cos(mp.pi * j * (k + mp.mpf(1) / 2) / n) for k in range(n))
        cheb.append(s * (1 if j == 0 else 2) / n)
    # Expand sum_j cheb[j] T_j(t) into powers of t (T_{j+1} = 2t T_j - T_{j-1}).
    tpow = [mp.mpf(0)] * n
    tprev, tcur = [mp.mpf(1)], [mp.mpf(0), mp.mpf(1)]
    for j in range(n):
        tj = tprev if j == 0 else tcur
        for i, c in enumerate(tj):
            tpow[i] += cheb[j] * c
        if j >= 1:
            nxt = [mp.mpf(0)] * (len(tcur) + 1)
            for i, c in enumerate(tcur):
                nxt[i + 1] += 2 * c
            for i, c in enumerate(tprev):
                nxt[i] -= c
            tprev, tcur = tcur, nxt
    # Substitute t = (u - mid) / half and expand into powers of u.
    upow = [mp.mpf(0)] * n
    for i, c in enumerate(tpow):
        # ((u - mid)/half)^i = sum_k binom(i,k) u^k (-mid)^(i-k) / half^i
        for k in range(i + 1):
            upow[k] += c * mp.binomial(i, k) * (-mid) ** (i - k) / half ** i
    return upow


def shifted_monomial(f, a, b, deg):
    """Coefficients in t = (x - mid) / half in [-1, 1] (for the erf pieces,
    whose intervals are far from 0)."""
    mid, half = (mp.mpf(a) + mp.mpf(b)) / 2, (mp.mpf(b) - mp.mpf(a)) / 2
    return cheb_monomial(lambda t: f(mid + half * t), -1, 1, deg)


def horner(coefs, u):
    """The evaluation order pmath.c uses: c[d], then p = p*u + c[i]."""
    p = coefs[-1]
    for c in reversed(coefs[:-1]):
        p = p * u + c
    return p


def hexd(v):
    return float(v).hex()


def worst_rel(name, ref, approx, xs):
    w = 0.0
    for x in xs:
        with mp.workprec(100):
            r = ref(mp.mpf(x))
        if r == 0:
            continue
        with mp.workprec(100):
            e = abs((mp.mpf(approx(x)) - r) / r)
        w = max(w, float(e))
    return w


def grid(a, b, n):
    return [a + (b - a) * i / (n - 1) for i in range(n)]


def fit(f, a, b, deg):
    return [rd(v) for v in cheb_monomial(f, a, b, deg)]


out = []
report = []


def emit_table(cname, coefs, comment):
    out.append("/* %s */" % comment)
    out.append("static const double %s[%d] = {" % (cname, len(coefs)))
    for v in coefs:
        out.append("    %s," % hexd(v))
    out.append("};")


def emit_const(cname, v, comment):
    out.append("static const double %s = %s; /* %s */" % (cname, hexd(v), comment))


def split_hi(v, bits):
    """v rounded to `bits` significant bits (so that small integers times it
    are exact), and the rest, rounded to double."""
    m, e = mp.frexp(v)
    hi = mp.mpf(mp.floor(m * 2 ** bits + mp.mpf(1) / 2)) * mp.mpf(2) ** (e - bits)
    return float(hi), rd(v - hi)


# ---------------------------------------------------------------- exp
# exp(x) = 2^k * exp(r), k = nearest(x / ln2) found by adding and
# subtracting 1.5 * 2^52 (round to nearest even, no integer conversion),
# r = x - k ln2 in [-ln2/2, ln2/2] (+ a hair). No table: every step is
# arithmetic or a bit copy, so the same code vectorises (pmath.c).
LN2 = mp.log(2)
EXP_INV = rd(1 / LN2)
EXP_SHIFT = 1.5 * 2.0 ** 52
EXP_C_HI, EXP_C_LO = split_hi(LN2, 32)  # |k| < 2^21 -> k*hi exact
R_EXP = rd(LN2 / 2 * (1 + mp.mpf(2) ** -20))
EXP_POLY = fit(mp.exp, -R_EXP, R_EXP, 11)


def c_exp_core(x):
    kb = x * EXP_INV + EXP_SHIFT  # two roundings, as in C without contraction
    kd = kb - EXP_SHIFT
    r = (x - kd * EXP_C_HI) - kd * EXP_C_LO
    p = horner(EXP_POLY, r)
    return p * 2.0 ** int(kd)  # pmath.c: 2^k built from kb's bits (exact)


report.append("exp_core on [-708, 708]: worst rel err %.3g (2^%.2f)" % (
    (w := worst_rel("exp", mp.exp, c_exp_core, grid(-708.0, 708.0, 8001))), math.log2(w)))
emit_table("EXP_POLY", EXP_POLY,
           "exp(r) on |r| <= ln2/2, degree 11; worst fit+eval rel error %.2g" % w)
emit_const("EXP_INV_LN2", EXP_INV, "1 / ln 2")
emit_const("EXP_C_HI", EXP_C_HI, "ln 2 to 32 bits: k * EXP_C_HI is exact for |k| < 2^21")
emit_const("EXP_C_LO", EXP_C_LO, "ln 2 - EXP_C_HI")
emit_const("SQRT2", rd(mp.sqrt(2)), "fl(sqrt 2), where log moves its mantissa")

# Overflow / underflow thresholds for fp32 results.
FLT_MAX = mp.mpf(2) ** 128 - mp.mpf(2) ** 104
OVF = mp.log(FLT_MAX + mp.mpf(2) ** 103)  # exp(x) >= this rounds to inf
UNF = mp.log(mp.mpf(2) ** -150)            # exp(x) <= 2^-150 rounds to +0


def f32_bits(f):
    import struct
    return struct.unpack("<i", struct.pack("<f", f))[0]


def f32_from_bits(i):
    import struct
    return struct.unpack("<f", struct.pack("<i", i))[0]


def f32_step(f, up):
    """The next float up or down from the float f (f != 0)."""
    i = f32_bits(f)
    return f32_from_bits(i + 1 if (i >= 0) == up else i - 1)


def f32_below(v):
    """Largest float strictly below v (|v| a normal fp32 magnitude)."""
    f = f32_from_bits(f32_bits(float(v)))
    while mp.mpf(f) >= v:
        f = f32_step(f, False)
    while mp.mpf(f32_step(f, True)) < v:
        f = f32_step(f, True)
    return f


def f32_above(v):
    """Smallest float strictly above v."""
    f = f32_from_bits(f32_bits(float(v)))
    while mp.mpf(f) <= v:
        f = f32_step(f, True)
    while mp.mpf(f32_step(f, False)) > v:
        f = f32_step(f, False)
    return f


EXPF_MAX = f32_below(OVF)   # largest x with finite exp(x) in fp32
EXPF_MIN = f32_above(UNF)   # smallest x with exp(x) > 0 in fp32
out.append("#define EXPF_MAX %sf /* largest float x whose exp(x) rounds below inf */" % EXPF_MAX.hex())
out.append("#define EXPF_MIN %sf /* smallest float x whose exp(x) rounds above +0 */" % EXPF_MIN.hex())
report.append("expf thresholds: max %r (%s), min %r (%s)" % (EXPF_MAX, EXPF_MAX.hex(), EXPF_MIN, EXPF_MIN.hex()))

# ---------------------------------------------------------------- log
# x = 2^e * m, m in [sqrt(1/2), sqrt 2); log m = 2 atanh(s), s = (m-1)/(m+1),
# |s| <= 3 - 2 sqrt 2; 2 atanh(s) = 2 s Q(s^2), Q(u) = atanh(sqrt u)/sqrt u.
S_MAX = 3 - 2 * mp.sqrt(2)
U_LOG = rd(S_MAX ** 2 * (1 + mp.mpf(2) ** -20))


def q_log(u):
    if u == 0:
        return mp.mpf(1)
    s = mp.sqrt(u)
    return mp.atanh(s) / s


LOG_POLY = fit(q_log, 0, U_LOG, 7)
LOG_LN2_HI, LOG_LN2_LO = split_hi(LN2, 40)  # |e| < 2^8 -> e*hi exact


def c_log_m(m):
    s = (m - 1.0) / (m + 1.0)
    u = s * s
    return 2.0 * s * horner(LOG_POLY, u)


sq2 = math.sqrt(0.5)
w = worst_rel("log", mp.log, c_log_m, [x for x in grid(sq2, math.sqrt(2.0), 4001) if abs(x - 1) > 1e-12])
report.append("log(m) on [sqrt(1/2), sqrt 2): worst rel err %.3g (2^%.2f)" % (w, math.log2(w)))
emit_table("LOG_POLY", LOG_POLY,
           "Q(u) = atanh(sqrt u)/sqrt u on [0, (3-2sqrt2)^2], degree 7; "
           "worst rel error of 2 s Q(s^2) vs log m: %.2g" % w)
emit_const("LOG_LN2_HI", LOG_LN2_HI, "ln 2 to 40 bits: e * LOG_LN2_HI is exact for |e| < 2^13")
emit_const("LOG_LN2_LO", LOG_LN2_LO, "ln 2 - LOG_LN2_HI")

# ---------------------------------------------------------------- sin / cos
# After reduction r in [-pi/4, pi/4]: sin r = r S(r^2), cos r = C(r^2).
U_TRIG = rd((mp.pi / 4) ** 2 * (1 + mp.mpf(2) ** -20))


def s_sin(u):
    if u == 0:
        return mp.mpf(1)
    s = mp.sqrt(u)
    return mp.sin(s) / s


SIN_POLY = fit(s_sin, 0, U_TRIG, 6)
COS_POLY = fit(lambda u: mp.cos(mp.sqrt(u)), 0, U_TRIG, 7)
pi4 = float(mp.pi / 4)
xs = [x for x in grid(-pi4, pi4, 4001) if x != 0]
w_s = worst_rel("sin", mp.sin, lambda r: r * horner(SIN_POLY, r * r), xs)
w_c = worst_rel("cos", mp.cos, lambda r: horner(COS_POLY, r * r), xs)
report.append("sin/cos on [-pi/4, pi/4]: worst rel err %.3g / %.3g" % (w_s, w_c))
emit_table("SIN_POLY", SIN_POLY,
           "S(u) = sin(sqrt u)/sqrt u on [0, (pi/4)^2], degree 6; worst rel error of r S(r^2): %.2g" % w_s)
emit_table("COS_POLY", COS_POLY,
           "C(u) = cos(sqrt u) on [0, (pi/4)^2], degree 7; worst rel error: %.2g" % w_c)
PIO2_HI = rd(mp.pi / 2)
PIO2_LO = rd(mp.pi / 2 - PIO2_HI)
emit_const("PIO2_HI", PIO2_HI, "pi/2 rounded to double")
emit_const("PIO2_LO", PIO2_LO, "pi/2 - PIO2_HI")

# Bits of 2/pi for the exact reduction: word 0 holds, from its top bit,
# 26 zero bits (the bits of weight 2^25 .. 2^0, all zero since 2/pi < 1)
# followed by 2/pi's fraction bits b_1, b_2, ...
nbits = 26 + 198 + 32  # one spare word so a 96-bit window never reads past the end
frac = mp.mpf(2) / mp.pi
bits = [0] * 26
v = frac
for i in range(nbits - 26):
    v *= 2
    b = int(mp.floor(v))
    bits.append(b)
    v -= b
words = []
for wi in range(nbits // 32):
    word = 0
    for b in bits[32 * wi: 32 * wi + 32]:
        word = (word << 1) | b
    words.append(word)
out.append("/* 2/pi as a bit string: 26 leading zero bits (weights 2^25..2^0), then")
out.append(" * its binary fraction, 32 bits per word, most significant first. */")
out.append("static const uint32_t TWO_OVER_PI_BITS[%d] = {" % len(words))
for i in range(0, len(words), 4):
    out.append("    " + " ".join("0x%08x," % x for x in words[i:i + 4]))
out.append("};")

# ---------------------------------------------------------------- tanh
# |x| < 0.55: tanh x = x T(x^2), T(u) = tanh(sqrt u)/sqrt u.
U_TANH = rd(mp.mpf("0.55") ** 2 * (1 + mp.mpf(2) ** -20))


def t_tanh(u):
    if u == 0:
        return mp.mpf(1)
    s = mp.sqrt(u)
    return mp.tanh(s) / s


TANH_POLY = fit(t_tanh, 0, U_TANH, 10)
xs = [x for x in grid(-0.55, 0.55, 4001) if x != 0]
w = worst_rel("tanh", mp.tanh, lambda x: x * horner(TANH_POLY, x * x), xs)
report.append("tanh small on [-0.55, 0.55]: worst rel err %.3g" % w)
emit_table("TANH_POLY", TANH_POLY,
           "T(u) = tanh(sqrt u)/sqrt u on [0, 0.55^2], degree 10; worst rel error of x T(x^2): %.2g" % w)

# ---------------------------------------------------------------- erf
# |x| < 0.5: erf x = x E(x^2), E(u) = erf(sqrt u)/sqrt u.
# 0.5 <= |x| < 4: 14 pieces of width 1/4, each a polynomial in
# t = (|x| - center) * 8 in [-1, 1]. |x| >= 4: erf rounds to +-1 in fp32.
def e_erf(u):
    if u == 0:
        return 2 / mp.sqrt(mp.pi)
    s = mp.sqrt(u)
    return mp.erf(s) / s


ERF_SMALL = fit(e_erf, 0, rd(mp.mpf("0.25") * (1 + mp.mpf(2) ** -20)), 8)
xs = [x for x in grid(-0.5, 0.5, 4001) if x != 0]
w = worst_rel("erf", mp.erf, lambda x: x * horner(ERF_SMALL, x * x), xs)
report.append("erf small on [-0.5, 0.5]: worst rel err %.3g" % w)
emit_table("ERF_SMALL", ERF_SMALL,
           "E(u) = erf(sqrt u)/sqrt u on [0, 1/4], degree 8; worst rel error of x E(x^2): %.2g" % w)
ERF_DEG = 11
pieces = []
wpiece = 0.0
for i in range(14):
    a = mp.mpf("0.5") + mp.mpf(i) / 4
    b = a + mp.mpf(1) / 4
    c = [rd(v) for v in shifted_monomial(mp.erf, a, b, ERF_DEG)]
    pieces.append(c)
    cen = float(a + mp.mpf(1) / 8)
    xs = grid(float(a), float(b), 401)
    wpiece = max(wpiece, worst_rel("erfp", mp.erf, lambda x: horner(c, (x - cen) * 8.0), xs))
report.append("erf pieces on [0.5, 4]: worst rel err %.3g" % wpiece)
out.append("/* erf on [0.5 + i/4, 0.75 + i/4], i = 0..13, as polynomials of degree %d in"
           % ERF_DEG)
out.append(" * t = (|x| - (0.625 + i/4)) * 8; worst rel error %.2g. */" % wpiece)
out.append("static const double ERF_PIECES[14][%d] = {" % (ERF_DEG + 1))
for c in pieces:
    out.append("    {" + ", ".join(hexd(v) for v in c) + "},")
out.append("};")
# Check that fp32 erf really is +-1 from 4 on: erf(4) > 1 - 2^-25.
assert mp.erf(4) > 1 - mp.mpf(2) ** -25

# ---------------------------------------------------------------- gelu
emit_const("GELU_C", rd(mp.sqrt(2 / mp.pi)), "sqrt(2/pi)")

BEGIN = "/* BEGIN GENERATED by tests/pmath/derive_coeffs.py: do not edit by hand. */"
END = "/* END GENERATED */"
block = "\n".join([BEGIN] + out + [END])

if "--check" in sys.argv:
    path = "ref/kernels/pmath.c"
    src = open(path).read()
    m = re.search(re.escape(BEGIN) + r".*?" + re.escape(END), src, re.S)
    if not m or m.group(0) != block:
        print("pmath.c's generated block differs from derive_coeffs.py's output")
        sys.exit(1)
    print("pmath.c constants match derive_coeffs.py")
else:
    print(block)
    for line in report:
        print("// " + line, file=sys.stderr)
