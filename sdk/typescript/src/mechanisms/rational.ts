/**
 * Exact rationals on BigInt, for the few constants the Python side computes with `fractions.Fraction` (local
 * hashing's collision probability): the same correctly rounded double comes out.
 */

export interface Fraction {
  num: bigint; // any sign
  den: bigint; // > 0
}

function gcd(a: bigint, b: bigint): bigint {
  a = a < 0n ? -a : a;
  while (b !== 0n) [a, b] = [b, a % b];
  return a;
}

export function fraction(num: bigint, den: bigint = 1n): Fraction {
  if (den === 0n) throw new RangeError("zero denominator");
  if (den < 0n) [num, den] = [-num, -den];
  const g = gcd(num, den) || 1n;
  return { num: num / g, den: den / g };
}

export function sub(a: Fraction, b: Fraction): Fraction {
  return fraction(a.num * b.den - b.num * a.den, a.den * b.den);
}

function bitLength(x: bigint): number {
  return x === 0n ? 0 : x.toString(2).length;
}

/** The double nearest the fraction (ties to even), as Python's `float(Fraction)`. */
export function toDouble(f: Fraction): number {
  if (f.num === 0n) return 0;
  const negative = f.num < 0n;
  const n = negative ? -f.num : f.num;
  const d = f.den;
  // scale so that the quotient has 55 bits (53 + guard + sticky), then round
  let shift = 55 - (bitLength(n) - bitLength(d));
  let q: bigint, r: bigint;
  for (;;) {
    const scaledN = shift >= 0 ? n << BigInt(shift) : n;
    const scaledD = shift >= 0 ? d : d << BigInt(-shift);
    q = scaledN / scaledD;
    r = scaledN % scaledD;
    if (bitLength(q) >= 55) break;
    shift += 1;
  }
  // exponent of the result: value = q * 2^-shift; keep 53 bits (fewer when subnormal)
  let drop = bitLength(q) - 53;
  const exponent = bitLength(q) - 1 - shift; // floor(log2(value))
  if (exponent < -1022) drop += -1022 - exponent;
  const keep = q >> BigInt(drop);
  const rest = q - (keep << BigInt(drop));
  const halfway = 1n << BigInt(drop - 1);
  let mantissa = keep;
  if (rest > halfway || (rest === halfway && (r !== 0n || (keep & 1n) === 1n))) mantissa += 1n;
  const value = Number(mantissa) * 2 ** (drop - shift);
  return negative ? -value : value;
}
