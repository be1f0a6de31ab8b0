// What the fuzz tests share (a file of no tests of its own).

/** A deterministic generator (xorshift32), so a failure is reproducible from its seed. */
export function generator(seed) {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13; x >>>= 0;
    x ^= x >> 17;
    x ^= x << 5; x >>>= 0;
    return x / 4294967296;
  };
}
