"""A double as Java 17's ``Double.toString`` prints it, which is how Jackson (so Spark's from_json) writes a double.

Java 17 prints with ``jdk.internal.math.FloatingDecimal``'s ``dtoa``, a Steele & White digit loop whose stopping
test is symmetric and whose fast path keeps every digit of an integer below 2**63: its digits are often not the
shortest that read back (``2e23`` is ``2.0000000000000002E23``, ``5e-324`` is ``4.9E-324``, ``2.82879384806159e17`` is
``2.82879384806159008E17``), which is why this is not Python's ``repr``. Java 19 changed to the shortest digits
(Raffaello Giulietti's Schubfach); the replay's JVM is 17, so its values are these.

Written from a reading of OpenJDK 17's algorithm; the arithmetic that Java does in 32 or 64 bits is done here in the
same widths (``_int``, ``_long``), wrap-arounds included, so that the digits are Java's in every case, not only in
the ones its authors meant. ``tests/unit/test_java_double.py`` holds outputs of a real Java 17.
"""

from __future__ import annotations

import math
import struct

_EXP_SHIFT = 52  # bits of a double's fraction
_FRACT_HOB = 1 << _EXP_SHIFT  # the hidden bit
_EXP_BIAS = 1023
_MAX_SMALL_BIN_EXP = 62
_MIN_SMALL_BIN_EXP = -(63 // 3)
# About ceil(log2(5**i)) for i below 27 (Java's N_5_BITS): how the loop below picks 32-bit, 64-bit or big numbers.
_N_5_BITS = (0, 3, 5, 7, 10, 12, 14, 17, 19, 21, 24, 26, 28, 31, 33, 35, 38, 40, 42, 45, 47, 49, 52, 54, 56, 59, 61)
# For 2**i below 64, how many of its low decimal digits Java calls insignificant (the digits of 2**i, less one).
_INSIGNIFICANT_FOR_POW2 = tuple(max(len(str(1 << i)) - 1, 0) for i in range(64))


def _int(x: int) -> int:
    """``x`` as a Java int holds it (two's complement, 32 bits)."""
    return (x + 2**31) % 2**32 - 2**31


def _long(x: int) -> int:
    """``x`` as a Java long holds it (two's complement, 64 bits)."""
    return (x + 2**63) % 2**64 - 2**63


def _jdiv(a: int, b: int) -> int:
    """Java's integer division: the quotient truncated toward zero."""
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _divmod(a: int, b: int) -> tuple[int, int]:
    """Java's quotient and remainder (truncated toward zero): Python's, for the non-negative numbers met nearly always."""
    if a >= 0 and b > 0:
        return divmod(a, b)
    q = _jdiv(a, b)
    return q, a - b * q


def java_double_to_string(x: float) -> str:
    """``x`` as Java 17's ``Double.toString(x)`` prints it: ``1.0E23``, ``4.9E-324``, ``0.001``, ``1.0E-4``, ``NaN``."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    bits = struct.unpack("<q", struct.pack("<d", x))[0]
    negative = bits < 0
    fract = bits & (_FRACT_HOB - 1)
    bin_exp = (bits >> _EXP_SHIFT) & 0x7FF
    if bin_exp == 0:
        if fract == 0:
            return "-0.0" if negative else "0.0"
        leading_zeros = 64 - fract.bit_length()  # a subnormal: normalised, with fewer significant bits
        shift = leading_zeros - (63 - _EXP_SHIFT)
        fract <<= shift
        bin_exp = 1 - shift
        significant_bits = 64 - leading_zeros
    else:
        fract |= _FRACT_HOB
        significant_bits = _EXP_SHIFT + 1
    digits, dec_exponent = _dtoa(bin_exp - _EXP_BIAS, fract, significant_bits)
    return ("-" if negative else "") + _layout(digits, dec_exponent)


def _dtoa(bin_exp: int, fract: int, significant_bits: int) -> tuple[list[int], int]:
    """The decimal digits of ``fract * 2**(bin_exp - 52)`` and the exponent (value = 0.d1d2... * 10**exponent)."""
    tail_zeros = (fract & -fract).bit_length() - 1
    fract_bits = _EXP_SHIFT + 1 - tail_zeros  # significant bits of the fraction
    tiny_bits = max(0, fract_bits - bin_exp - 1)  # of them, right of the binary point
    # A whole number in a long (Java also asks that its bits and those of 5**tiny_bits fit 64, always so when
    # tiny_bits is 0): Java prints its digits, nearly all of them.
    if _MIN_SMALL_BIN_EXP <= bin_exp <= _MAX_SMALL_BIN_EXP and tiny_bits == 0:
        insignificant = 0
        if bin_exp > significant_bits:
            p2 = bin_exp - significant_bits - 1
            insignificant = _INSIGNIFICANT_FOR_POW2[p2] if 1 < p2 < 64 else 0
        value = fract << (bin_exp - _EXP_SHIFT) if bin_exp >= _EXP_SHIFT else fract >> (_EXP_SHIFT - bin_exp)
        return _long_digits(value, insignificant)

    # The general case: value = B / S * 10**dec_exp, M half an ulp scaled as B (Java's names).
    dec_exp = _estimate_dec_exp(fract, bin_exp)
    b5 = max(0, -dec_exp)
    b2 = b5 + tiny_bits + bin_exp
    s5 = max(0, dec_exp)
    s2 = s5 + tiny_bits
    m5 = b5
    m2 = b2 - significant_bits
    fract >>= tail_zeros
    b2 -= fract_bits - 1
    common = min(b2, s2)
    b2, s2, m2 = b2 - common, s2 - common, m2 - common
    if fract_bits == 1:  # a power of two: the next smaller double is half as far (Java halves M, both ways)
        m2 -= 1
    if m2 < 0:
        b2, s2, m2 = b2 - m2, s2 - m2, 0
    b_bits = fract_bits + b2 + (_N_5_BITS[b5] if b5 < len(_N_5_BITS) else b5 * 3)
    ten_s_bits = s2 + 1 + (_N_5_BITS[s5 + 1] if s5 + 1 < len(_N_5_BITS) else (s5 + 1) * 3)
    if b_bits < 64 and ten_s_bits < 64:
        wrap = _int if b_bits < 32 and ten_s_bits < 32 else _long
        return _small_digits(wrap, wrap(fract * 5**b5 << b2), wrap(5**s5 << s2), wrap(5**m5 << m2), dec_exp)
    return _big_digits(fract * 5**b5 << b2, 5**s5 << s2, 5**m5 << m2, dec_exp)


def _small_digits(wrap: object, b: int, s: int, m: int, dec_exp: int) -> tuple[list[int], int]:
    """Java's digit loop in ints or longs (``wrap``), overflows as Java has them."""
    assert callable(wrap)
    tens = wrap(s * 10)
    digits: list[int] = []
    # b stays below 10 s, which fits (Java sized the type so): only m, b + m and 2 b can wrap around.
    q, b = _divmod(b, s)
    b *= 10
    m = wrap(m * 10)
    low = b < m
    high = wrap(b + m) > tens
    if q == 0 and not high:
        dec_exp -= 1  # the estimate was one too high: no leading zero
    else:
        digits.append(q)
    if dec_exp < -3 or dec_exp >= 8:  # E-form needs a digit after the point
        low = high = False
    while not low and not high:
        q, b = _divmod(b, s)
        b *= 10
        m = wrap(m * 10)
        if m > 0:
            low = b < m
            high = wrap(b + m) > tens
        else:  # m overflowed: Java stops here
            low = high = True
        digits.append(q)
    low_difference = _sign(wrap(wrap(b << 1) - tens))
    return _rounded(digits, dec_exp + 1, low, high, low_difference)


def _big_digits(b: int, s: int, m: int, dec_exp: int) -> tuple[list[int], int]:
    """Java's digit loop in big numbers, whose "high" test is ``B + M >= 10 S`` (the smaller loops' is ``>``)."""
    ten_s = 10 * s
    m *= 10
    digits: list[int] = []
    q, b = divmod(b, s)
    b *= 10
    low = b < m
    high = b + m >= ten_s
    if q == 0 and not high:
        dec_exp -= 1
    else:
        digits.append(q)
    if dec_exp < -3 or dec_exp >= 8:
        low = high = False
    while not low and not high:
        q, b = divmod(b, s)
        b *= 10
        m *= 10
        low = b < m
        high = b + m >= ten_s
        digits.append(q)
    low_difference = _sign((b << 1) - ten_s) if high and low else 0
    return _rounded(digits, dec_exp + 1, low, high, low_difference)


def _sign(x: int) -> int:
    return (x > 0) - (x < 0)


def _rounded(digits: list[int], dec_exponent: int, low: bool, high: bool, low_difference: int) -> tuple[list[int], int]:
    """The last digit rounded by how the loop stopped (Java's roundup, whose carry out keeps the digits' count)."""
    if high and (not low or low_difference > 0 or (low_difference == 0 and digits[-1] % 2 == 1)):
        i = len(digits) - 1
        while digits[i] == 9 and i > 0:
            digits[i] = 0
            i -= 1
        if digits[i] == 9:  # every digit was 9: 1 followed by zeros, one place up
            digits[0] = 1
            dec_exponent += 1
        else:
            digits[i] += 1
    return digits, dec_exponent


def _long_digits(value: int, insignificant: int) -> tuple[list[int], int]:
    """A whole number's digits, its ``insignificant`` low ones rounded off (half up) and trailing zeros dropped."""
    exponent = 0
    if insignificant:
        pow10 = 10**insignificant
        value, residue = divmod(value, pow10)
        exponent += insignificant
        if residue >= pow10 >> 1:
            value += 1
    text = str(value)
    stripped = text.rstrip("0")
    return [int(c) for c in stripped], exponent + len(text)


def _estimate_dec_exp(fract: int, bin_exp: int) -> int:
    """floor(log10(value)), estimated in doubles as Java does (sometimes one too high; the loop corrects that)."""
    d2: float = struct.unpack("<d", struct.pack("<q", (_EXP_BIAS << _EXP_SHIFT) | (fract & (_FRACT_HOB - 1))))[0]
    d = (d2 - 1.5) * 0.289529654 + 0.176091259 + float(bin_exp) * 0.301029995663981
    return math.floor(d)


def _layout(digits: list[int], dec_exponent: int) -> str:
    """Java's layout of the digits: plain from 10**-3 up to 10**7, else one digit, a point and an exponent."""
    text = "".join(map(str, digits))
    n = len(text)
    if 0 < dec_exponent < 8:
        if n <= dec_exponent:
            return text + "0" * (dec_exponent - n) + ".0"
        return f"{text[:dec_exponent]}.{text[dec_exponent:]}"
    if -3 < dec_exponent <= 0:
        return "0." + "0" * -dec_exponent + text
    exponent = dec_exponent - 1
    return f"{text[0]}.{text[1:] or '0'}E{exponent}"
