/**
 * The special functions the gradient randomizers need, in plain doubles (the Python mechanisms take them from SciPy):
 * the standard normal quantile (`ndtri`, Wichura's AS241, "Algorithm AS 241: the percentage points of the normal
 * distribution", Applied Statistics 37(3), 1988: about 1e-16 relative), log-gamma (Stirling's series), the regularized
 * incomplete beta function (its continued fraction, Numerical Recipes' Lentz form) and its inverse in x (bisection
 * refined by Newton steps), and the logistic function. Pure: no I/O, no randomness.
 */

const SPLIT1 = 0.425;
const SPLIT2 = 5.0;
const CONST1 = 0.180625;
const CONST2 = 1.6;
// AS241 PPND16's coefficients: p near 1/2 (A, B), not near 0 or 1 (C, D), near 0 or 1 (E, F).
const A = [3.3871328727963666080, 1.3314166789178437745e2, 1.9715909503065514427e3, 1.3731693765509461125e4,
  4.5921953931549871457e4, 6.7265770927008700853e4, 3.3430575583588128105e4, 2.5090809287301226727e3];
const B = [1, 4.2313330701600911252e1, 6.8718700749205790830e2, 5.3941960214247511077e3, 2.1213794301586595867e4,
  3.9307895800092710610e4, 2.8729085735721942674e4, 5.2264952788528545610e3];
const C = [1.42343711074968357734, 4.63033784615654529590, 5.76949722146069140550, 3.64784832476320460504,
  1.27045825245236838258, 2.41780725177450611770e-1, 2.27238449892691845833e-2, 7.74545014278341407640e-4];
const D = [1, 2.05319162663775882187, 1.67638483018380384940, 6.89767334985100004550e-1, 1.48103976427480074590e-1,
  1.51986665636164571966e-2, 5.47593808499534494600e-4, 1.05075007164441684324e-9];
const E = [6.65790464350110377720, 5.46378491116411436990, 1.78482653991729133580, 2.96560571828504891230e-1,
  2.65321895265761230930e-2, 1.24266094738807843860e-3, 2.71155556874348757815e-5, 2.01033439929228813265e-7];
const F = [1, 5.99832206555887937690e-1, 1.36929880922735805310e-1, 1.48753612908506148525e-2,
  7.86869131145613259100e-4, 1.84631831751005468180e-5, 1.42151175831644588870e-7, 2.04426310338993978564e-15];

function poly(c: readonly number[], x: number): number {
  let s = c[c.length - 1];
  for (let i = c.length - 2; i >= 0; i--) s = s * x + c[i];
  return s;
}

/** The standard normal quantile Phi^{-1}(p) (SciPy's `ndtri`): -Infinity at 0, Infinity at 1, NaN outside [0, 1]. */
export function ndtri(p: number): number {
  if (!(p >= 0 && p <= 1)) return NaN;
  if (p === 0) return -Infinity;
  if (p === 1) return Infinity;
  const q = p - 0.5;
  if (Math.abs(q) <= SPLIT1) {
    const r = CONST1 - q * q;
    return (q * poly(A, r)) / poly(B, r);
  }
  const r = Math.sqrt(-Math.log(q < 0 ? p : 1 - p));
  const z = r <= SPLIT2 ? poly(C, r - CONST2) / poly(D, r - CONST2) : poly(E, r - SPLIT2) / poly(F, r - SPLIT2);
  return q < 0 ? -z : z;
}
