/** The one matrix question the device asks: is a symmetric positive semi-definite matrix well conditioned? */

/**
 * True iff the smallest eigenvalue of the symmetric PSD matrix `g` exceeds `ratio` times its largest (RAPPOR's check
 * that its design tells the candidate values apart): the largest by power iteration, then a Cholesky factorization
 * of g - ratio * lambda_max I, which exists iff every eigenvalue is above that.
 */
export function symmetricSmallestEigenvalueRatioAbove(g: Float64Array[], ratio: number): boolean {
  const n = g.length;
  let v = new Float64Array(n).fill(1 / Math.sqrt(n));
  let lambda = 0;
  for (let iter = 0; iter < 200; iter++) {
    const w = new Float64Array(n);
    for (let i = 0; i < n; i++) {
      const row = g[i];
      let s = 0;
      for (let j = 0; j < n; j++) s += row[j] * v[j];
      w[i] = s;
    }
    let norm = 0;
    for (let i = 0; i < n; i++) norm += w[i] * w[i];
    norm = Math.sqrt(norm);
    if (norm === 0) return false;
    for (let i = 0; i < n; i++) w[i] /= norm;
    const converged = Math.abs(norm - lambda) <= 1e-12 * norm;
    lambda = norm;
    v = w;
    if (converged) break;
  }
  const shift = ratio * lambda;
  const l = Array.from({ length: n }, () => new Float64Array(n));
  for (let j = 0; j < n; j++) {
    let d = g[j][j] - shift;
    const lj = l[j];
    for (let k = 0; k < j; k++) d -= lj[k] * lj[k];
    if (!(d > 0)) return false;
    const root = Math.sqrt(d);
    lj[j] = root;
    for (let i = j + 1; i < n; i++) {
      const li = l[i];
      let s = g[i][j];
      for (let k = 0; k < j; k++) s -= li[k] * lj[k];
      li[j] = s / root;
    }
  }
  return true;
}
