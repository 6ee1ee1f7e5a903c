/* The AOT kernels for one floating type. Included by aot_kernels.c once per type with
 *   real   the element type (float or double)
 *   NAME   a macro that appends the type suffix to a function name
 *
 * Shapes (all arrays contiguous, row-major):
 *   X [B, n, F] streams, y [B, F] branch output, H [B, n, n], hp [B, n], a [B, n], c [B],
 *   Xout [B, n, F], u [B, F].
 * The stream map (DESIGN §6.3, with the next sub-layer's aggregation folded in), in its core form:
 *   Xout[b, i] = sum_j H[b, i, j] X[b, j] + hp[b, i] y[b]        (when H is given)
 *   u[b]       = sum_j a[b, j] X[b, j] + c[b] y[b]               (when a is given)
 * A NULL y means y = 0. The entry points below take the aggregation weights h instead of a, c.
 */

/* n = 4 with every operand present (each sub-layer's update + next aggregation): one pass with
 * the four streams in registers. */
static void NAME(forward_n4)(int64_t F, int64_t start, int64_t stop, const real *restrict xb,
                             const real *restrict yb, const real *restrict H, const real *restrict hp,
                             const real *restrict a, real c, real *restrict ob, real *restrict ub) {
    const real *x0 = xb, *x1 = xb + F, *x2 = xb + 2 * F, *x3 = xb + 3 * F;
    real *o0 = ob, *o1 = ob + F, *o2 = ob + 2 * F, *o3 = ob + 3 * F;
#pragma omp simd
    for (int64_t f = start; f < stop; ++f) {
        const real v0 = x0[f], v1 = x1[f], v2 = x2[f], v3 = x3[f], w = yb[f];
        o0[f] = H[0] * v0 + H[1] * v1 + H[2] * v2 + H[3] * v3 + hp[0] * w;
        o1[f] = H[4] * v0 + H[5] * v1 + H[6] * v2 + H[7] * v3 + hp[1] * w;
        o2[f] = H[8] * v0 + H[9] * v1 + H[10] * v2 + H[11] * v3 + hp[2] * w;
        o3[f] = H[12] * v0 + H[13] * v1 + H[14] * v2 + H[15] * v3 + hp[3] * w;
        ub[f] = a[0] * v0 + a[1] * v1 + a[2] * v2 + a[3] * v3 + c * w;
    }
}

/* o[f] = w v[f] + sum_k coef[k cstride] src[k sstride + f] for f < len (v NULL: w v = 0; src NULL:
 * no sum): the one pattern of the general stream passes, on blocks that stay in L1. */
static void NAME(weighted_sum)(real *o, int64_t len, real w, const real *v, int64_t K, const real *coef,
                               int64_t cstride, const real *src, int64_t sstride) {
    if (v) {
#pragma omp simd
        for (int64_t f = 0; f < len; ++f) o[f] = w * v[f];
    } else {
#pragma omp simd
        for (int64_t f = 0; f < len; ++f) o[f] = 0;
    }
    for (int64_t k = 0; src && k < K; ++k) {
        const real h = coef[k * cstride], *x = src + k * sstride;
#pragma omp simd
        for (int64_t f = 0; f < len; ++f) o[f] += h * x[f];
    }
}

/* ---- the stream map: forward ------------------------------------------------------------ */
static void NAME(streams_forward_core)(int64_t B, int64_t n, int64_t F, const real *X, const real *y,
                                      const real *H, const real *hp, const real *a, const real *c,
                                      real *Xout, real *u, int nthreads) {
    const int64_t chunks = (F + CHUNK - 1) / CHUNK;
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t task = 0; task < B * chunks; ++task) {
        const int64_t b = task / chunks, start = (task % chunks) * CHUNK;
        const int64_t stop = start + CHUNK < F ? start + CHUNK : F;
        const real *xb = X + b * n * F, *yb = y ? y + b * F : NULL;
        if (n == 4 && yb && Xout && u) {
            NAME(forward_n4)(F, start, stop, xb, yb, H + b * 16, hp + b * 4, a + b * 4, c[b], Xout + b * 4 * F,
                             u + b * F);
            continue;
        }
        for (int64_t f0 = start; f0 < stop; f0 += BLOCK) {
            const int64_t len = f0 + BLOCK < stop ? BLOCK : stop - f0;
            if (Xout)
                for (int64_t i = 0; i < n; ++i)
                    NAME(weighted_sum)(Xout + (b * n + i) * F + f0, len, yb ? hp[b * n + i] : 0, yb ? yb + f0 : NULL,
                                       n, H + (b * n + i) * n, 1, xb + f0, F);
            if (u)
                NAME(weighted_sum)(u + b * F + f0, len, yb ? c[b] : 0, yb ? yb + f0 : NULL, n, a + b * n, 1,
                                   xb + f0, F);
        }
    }
}

static real NAME(dot)(const real *p, const real *q, int64_t len) {
    real s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t f = 0; f < len; ++f) s += p[f] * q[f];
    return s;
}

/* n = 4 with every operand present: the whole backward in one pass, reductions in registers
 * (per block in the element type, then added to the double accumulators acc). */
#define RED4(p) p##0, p##1, p##2, p##3
static void NAME(backward_n4)(int64_t F, int64_t start, int64_t stop, const real *restrict xb,
                              const real *restrict yb, const real *restrict H, const real *restrict hp,
                              const real *restrict a, real c, const real *restrict Gb,
                              const real *restrict gub, real *restrict gXb, real *restrict gyb,
                              double *restrict acc) {
    const real *x0 = xb, *x1 = xb + F, *x2 = xb + 2 * F, *x3 = xb + 3 * F;
    const real *g0 = Gb, *g1 = Gb + F, *g2 = Gb + 2 * F, *g3 = Gb + 3 * F;
    real *d0 = gXb, *d1 = gXb + F, *d2 = gXb + 2 * F, *d3 = gXb + 3 * F;
    for (int64_t f0 = start; f0 < stop; f0 += BLOCK) {
        const int64_t f1 = f0 + BLOCK < stop ? f0 + BLOCK : stop;
        real RED4(s0), RED4(s1), RED4(s2), RED4(s3), RED4(sp), RED4(sa), sc;
        s00 = s01 = s02 = s03 = s10 = s11 = s12 = s13 = s20 = s21 = s22 = s23 = s30 = s31 = s32 = s33 = 0;
        sp0 = sp1 = sp2 = sp3 = sa0 = sa1 = sa2 = sa3 = sc = 0;
#pragma omp simd reduction(+ : RED4(s0), RED4(s1), RED4(s2), RED4(s3), RED4(sp), RED4(sa), sc)
        for (int64_t f = f0; f < f1; ++f) {
            const real v0 = x0[f], v1 = x1[f], v2 = x2[f], v3 = x3[f], w = yb[f];
            const real e0 = g0[f], e1 = g1[f], e2 = g2[f], e3 = g3[f], eu = gub[f];
            d0[f] = H[0] * e0 + H[4] * e1 + H[8] * e2 + H[12] * e3 + a[0] * eu;
            d1[f] = H[1] * e0 + H[5] * e1 + H[9] * e2 + H[13] * e3 + a[1] * eu;
            d2[f] = H[2] * e0 + H[6] * e1 + H[10] * e2 + H[14] * e3 + a[2] * eu;
            d3[f] = H[3] * e0 + H[7] * e1 + H[11] * e2 + H[15] * e3 + a[3] * eu;
            gyb[f] = hp[0] * e0 + hp[1] * e1 + hp[2] * e2 + hp[3] * e3 + c * eu;
            s00 += e0 * v0; s01 += e0 * v1; s02 += e0 * v2; s03 += e0 * v3;
            s10 += e1 * v0; s11 += e1 * v1; s12 += e1 * v2; s13 += e1 * v3;
            s20 += e2 * v0; s21 += e2 * v1; s22 += e2 * v2; s23 += e2 * v3;
            s30 += e3 * v0; s31 += e3 * v1; s32 += e3 * v2; s33 += e3 * v3;
            sp0 += e0 * w; sp1 += e1 * w; sp2 += e2 * w; sp3 += e3 * w;
            sa0 += v0 * eu; sa1 += v1 * eu; sa2 += v2 * eu; sa3 += v3 * eu;
            sc += w * eu;
        }
        const real sums[25] = {s00, s01, s02, s03, s10, s11, s12, s13, s20, s21, s22, s23, s30, s31, s32, s33,
                               sp0, sp1, sp2, sp3, sa0, sa1, sa2, sa3, sc};
        for (int r = 0; r < 25; ++r) acc[r] += sums[r];
    }
}
#undef RED4

/* ---- the stream map: backward ------------------------------------------------------------
 * G [B, n, F] = dL/dXout (NULL: zero), gu [B, F] = dL/du (NULL: zero). Writes
 *   gX [B, n, F]: gX[b, j] = sum_i H[b, i, j] G[b, i] + a[b, j] gu[b]     (when gX is given)
 *   gy [B, F]:    gy[b]    = sum_i hp[b, i] G[b, i] + c[b] gu[b]          (when gy is given)
 * and the reductions over F (summed per chunk, then over chunks in a fixed order, so the result
 * does not depend on the number of threads); returns 0, or 1 when out of memory:
 *   gH [B, n, n] = G X^T, ghp [B, n] = G y, ga [B, n] = X gu, gc [B] = y . gu   (each when given)
 */
static int NAME(streams_backward_core)(int64_t B, int64_t n, int64_t F, const real *X, const real *y,
                                      const real *H, const real *hp, const real *a, const real *c,
                                      const real *G, const real *gu, real *gX, real *gy, real *gH,
                                      real *ghp, real *ga, real *gc, int nthreads) {
    const int64_t chunks = (F + CHUNK - 1) / CHUNK;
    const int64_t R = n * n + 2 * n + 1; /* gH, ghp, ga, gc */
    double *partial = (double *)calloc((size_t)(B * chunks * R), sizeof(double));
    if (!partial) return 1;
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t task = 0; task < B * chunks; ++task) {
        const int64_t b = task / chunks, start = (task % chunks) * CHUNK;
        const int64_t stop = start + CHUNK < F ? start + CHUNK : F;
        const real *xb = X + b * n * F, *yb = y ? y + b * F : NULL;
        const real *Gb = G ? G + b * n * F : NULL, *gub = gu ? gu + b * F : NULL;
        double *acc = partial + task * R;
        if (n == 4 && yb && Gb && gub && gX && gy && gH && ghp && ga && gc) {
            NAME(backward_n4)(F, start, stop, xb, yb, H + b * 16, hp + b * 4, a + b * 4, c[b], Gb, gub,
                              gX + b * 4 * F, gy + b * F, acc);
            continue;
        }
        for (int64_t f0 = start; f0 < stop; f0 += BLOCK) {
            const int64_t len = f0 + BLOCK < stop ? BLOCK : stop - f0;
            if (gX)
                for (int64_t j = 0; j < n; ++j)
                    NAME(weighted_sum)(gX + (b * n + j) * F + f0, len, gub ? a[b * n + j] : 0, gub ? gub + f0 : NULL,
                                       n, H ? H + b * n * n + j : NULL, n, Gb ? Gb + f0 : NULL, F);
            if (gy && yb)
                NAME(weighted_sum)(gy + b * F + f0, len, gub ? c[b] : 0, gub ? gub + f0 : NULL, n, hp + b * n, 1,
                                   Gb ? Gb + f0 : NULL, F);
            if (Gb) {
                for (int64_t i = 0; i < n; ++i) {
                    const real *g = Gb + i * F + f0;
                    if (gH)
                        for (int64_t j = 0; j < n; ++j) acc[i * n + j] += NAME(dot)(g, xb + j * F + f0, len);
                    if (ghp && yb) acc[n * n + i] += NAME(dot)(g, yb + f0, len);
                }
            }
            if (gub) {
                const real *g = gub + f0;
                if (ga)
                    for (int64_t j = 0; j < n; ++j) acc[n * n + n + j] += NAME(dot)(xb + j * F + f0, g, len);
                if (gc && yb) acc[n * n + 2 * n] += NAME(dot)(yb + f0, g, len);
            }
        }
    }
    for (int64_t b = 0; b < B; ++b) {
        for (int64_t r = 0; r < R; ++r) {
            double s = 0;
            for (int64_t k = 0; k < chunks; ++k) s += partial[(b * chunks + k) * R + r];
            if (r < n * n) {
                if (gH) gH[b * n * n + r] = (real)s;
            } else if (r < n * n + n) {
                if (ghp) ghp[b * n + r - n * n] = (real)s;
            } else if (r < n * n + 2 * n) {
                if (ga) ga[b * n + r - n * n - n] = (real)s;
            } else if (gc) {
                gc[b] = (real)s;
            }
        }
    }
    free(partial);
    return 0;
}

/* ---- the stream map with the aggregation weights ------------------------------------------
 * The public entry points take the aggregation weights h [B, n] of the current streams,
 *   current = H X + hp y   (when H is given; else current = X and y must be NULL)
 *   u       = sum_i h[b, i] current[b, i] = sum_j a_j X_j + c y,  a = H^T h, c = h . hp,
 * and write current to Xout (when given) and u (when h is given). */
static void NAME(aggregation_weights)(int64_t B, int64_t n, const real *H, const real *hp, const real *y,
                                      const real *h, real *a, real *c) {
    for (int64_t b = 0; b < B; ++b) {
        c[b] = 0;
        for (int64_t j = 0; j < n; ++j) {
            real s = 0;
            if (H)
                for (int64_t i = 0; i < n; ++i) s += h[b * n + i] * H[(b * n + i) * n + j];
            a[b * n + j] = H ? s : h[b * n + j];
        }
        if (H && y)
            for (int64_t i = 0; i < n; ++i) c[b] += h[b * n + i] * hp[b * n + i];
    }
}

int NAME(aot_streams_forward)(int64_t B, int64_t n, int64_t F, const real *X, const real *y,
                              const real *H, const real *hp, const real *h, real *Xout, real *u,
                              int nthreads) {
    real *a = NULL, *c = NULL;
    if (h) {
        a = (real *)malloc((size_t)(B * (n + 1)) * sizeof(real));
        if (!a) return 1;
        c = a + B * n;
        NAME(aggregation_weights)(B, n, H, hp, y, h, a, c);
    }
    NAME(streams_forward_core)(B, n, F, X, H ? y : NULL, H, hp, a, c, H ? Xout : NULL, h ? u : NULL, nthreads);
    free(a);
    return 0;
}

/* Gradients of the above from G = dL/dcurrent (NULL: zero) and gu = dL/du (NULL: zero); writes
 * gX, gy, gH, ghp, gh (each when given; gy and ghp need y, gH and ghp need H). */
int NAME(aot_streams_backward)(int64_t B, int64_t n, int64_t F, const real *X, const real *y,
                               const real *H, const real *hp, const real *h, const real *G,
                               const real *gu, real *gX, real *gy, real *gH, real *ghp, real *gh,
                               int nthreads) {
    if (!H) y = NULL, G = NULL;
    if (!h) gu = NULL;
    real *work = (real *)calloc((size_t)(B * (2 * n + 2 + n * n + n)), sizeof(real));
    if (!work) return 1;
    real *a = work, *c = a + B * n, *ga = c + B, *gc = ga + B * n, *gH_ = gc + B, *ghp_ = gH_ + B * n * n;
    if (h) NAME(aggregation_weights)(B, n, H, hp, y, h, a, c);
    int status = NAME(streams_backward_core)(B, n, F, X, y, H, hp, a, c, G, gu, gX, y ? gy : NULL,
                                             H ? gH_ : NULL, (H && y) ? ghp_ : NULL, h ? ga : NULL,
                                             (h && y) ? gc : NULL, nthreads);
    for (int64_t b = 0; b < B && !status; ++b) {
        /* the chain rule through a = H^T h and c = h . hp */
        for (int64_t i = 0; i < n; ++i) {
            real s = 0;
            if (H)
                for (int64_t j = 0; j < n; ++j) s += H[(b * n + i) * n + j] * ga[b * n + j];
            else
                s = ga[b * n + i];
            if (H && y) s += hp[b * n + i] * gc[b];
            if (gh) gh[b * n + i] = s;
            if (gH && H)
                for (int64_t j = 0; j < n; ++j)
                    gH[(b * n + i) * n + j] = gH_[(b * n + i) * n + j] + (h ? h[b * n + i] * ga[b * n + j] : 0);
            if (ghp && H && y) ghp[b * n + i] = ghp_[b * n + i] + (h ? h[b * n + i] * gc[b] : 0);
        }
    }
    free(work);
    return status;
}

/* ---- the pooled summary carried through an update ----------------------------------------
 * pooled_out[b, i] = sum_j H[b, i, j] pooled[b, j] + hp[b, i] ybar[b],  ybar[b] = mean_s y[b, s]
 * with y [B, S, D], pooled and pooled_out [B, n, D], ybar [B, D]: the spatial mean of the updated
 * streams from the mean of the old ones (the update is linear). */
int NAME(aot_carry_forward)(int64_t B, int64_t n, int64_t S, int64_t D, const real *y, const real *H,
                            const real *hp, const real *pooled, real *ybar, real *out) {
    double *acc = (double *)malloc((size_t)D * sizeof(double));
    if (!acc) return 1;
    for (int64_t b = 0; b < B; ++b) {
        for (int64_t d = 0; d < D; ++d) acc[d] = 0;
        for (int64_t s = 0; s < S; ++s) {
            const real *row = y + (b * S + s) * D;
#pragma omp simd
            for (int64_t d = 0; d < D; ++d) acc[d] += row[d];
        }
        real *yb = ybar + b * D;
        for (int64_t d = 0; d < D; ++d) yb[d] = (real)(acc[d] / (double)S);
        for (int64_t i = 0; i < n; ++i) {
            real *o = out + (b * n + i) * D;
            const real w = hp[b * n + i];
#pragma omp simd
            for (int64_t d = 0; d < D; ++d) o[d] = w * yb[d];
            for (int64_t j = 0; j < n; ++j) {
                const real h = H[(b * n + i) * n + j], *pj = pooled + (b * n + j) * D;
#pragma omp simd
                for (int64_t d = 0; d < D; ++d) o[d] += h * pj[d];
            }
        }
    }
    free(acc);
    return 0;
}

/* Gradients of the above from gout [B, n, D]: gH [B, n, n] and ghp [B, n] are added to, gpooled
 * [B, n, D] is written, and the gradient of y, a broadcast over s, is added to gy [B, S, D] (each
 * skipped when NULL). */
int NAME(aot_carry_backward)(int64_t B, int64_t n, int64_t S, int64_t D, const real *H, const real *hp,
                             const real *pooled, const real *ybar, const real *gout, real *gH, real *ghp,
                             real *gpooled, real *gy) {
    real *gybar = (real *)malloc((size_t)D * sizeof(real));
    if (!gybar) return 1;
    for (int64_t b = 0; b < B; ++b) {
        const real *g = gout + b * n * D;
        for (int64_t i = 0; i < n; ++i) {
            if (gH)
                for (int64_t j = 0; j < n; ++j) gH[(b * n + i) * n + j] += NAME(dot)(g + i * D, pooled + (b * n + j) * D, D);
            if (ghp) ghp[b * n + i] += NAME(dot)(g + i * D, ybar + b * D, D);
        }
        for (int64_t j = 0; j < n && gpooled; ++j) {
            real *o = gpooled + (b * n + j) * D;
            for (int64_t d = 0; d < D; ++d) o[d] = 0;
            for (int64_t i = 0; i < n; ++i) {
                const real h = H[(b * n + i) * n + j], *gi = g + i * D;
#pragma omp simd
                for (int64_t d = 0; d < D; ++d) o[d] += h * gi[d];
            }
        }
        for (int64_t d = 0; d < D; ++d) gybar[d] = 0;
        for (int64_t i = 0; i < n; ++i) {
            const real w = hp[b * n + i] / (real)S, *gi = g + i * D;
#pragma omp simd
            for (int64_t d = 0; d < D; ++d) gybar[d] += w * gi[d];
        }
        for (int64_t s = 0; s < S && gy; ++s) {
            real *row = gy + (b * S + s) * D;
#pragma omp simd
            for (int64_t d = 0; d < D; ++d) row[d] += gybar[d];
        }
    }
    free(gybar);
    return 0;
}

/* ---- the coefficients ---------------------------------------------------------------------
 * From the pooled streams p [B, N] (N = n D) and one sub-layer's parameters:
 *   z = p / sqrt(mean(p^2) + eps); proj = z [phi_pre | phi_post | phi_res]   [B, m], m = 2n + n^2
 *   h_pre = s / sum(s), s = sigmoid(alpha[0] proj_pre + b_pre); h_post = 2 sigmoid(alpha[1] proj_post + b_post)
 *   H = SinkhornKnopp(exp(alpha[2] proj_res + b_res), iters): in log space, columns then rows.
 * Saved for the backward: z [B, N], rinv [B] (1/rms), proj [B, m], iterates [B, 2 iters, n, n]
 * (exp of each half-step's normalized log matrix; the last one is H).
 */
static real NAME(sigmoid)(real t) { return (real)1 / ((real)1 + EXP(-t)); }

static void NAME(log_normalize)(real *L, real *S, int64_t n, int columns) {
    /* L -= logsumexp over rows i (columns == 1: each column sums to 1) or over j (each row);
     * S = exp(L) afterwards, from the same exponentials */
    for (int64_t k = 0; k < n; ++k) {
        const int64_t step = columns ? n : 1, first = columns ? k : k * n;
        real m = -INFINITY, s = 0;
        for (int64_t l = 0; l < n; ++l) m = L[first + l * step] > m ? L[first + l * step] : m;
        for (int64_t l = 0; l < n; ++l) {
            S[first + l * step] = EXP(L[first + l * step] - m);
            s += S[first + l * step];
        }
        const real lse = m + LOG(s);
        for (int64_t l = 0; l < n; ++l) {
            L[first + l * step] -= lse;
            S[first + l * step] /= s;
        }
    }
}

void NAME(aot_coefficients_forward)(int64_t B, int64_t n, int64_t N, int64_t iters, double eps,
                                    const real *p, const real *phi_pre, const real *phi_post,
                                    const real *phi_res, const real *b_pre, const real *b_post,
                                    const real *b_res, const real *alpha_pre, const real *alpha_post,
                                    const real *alpha_res, real *h_pre, real *h_post, real *H, real *z,
                                    real *rinv, real *proj, real *iterates) {
    const int64_t nn = n * n, m = 2 * n + nn;
    real L[NMAX * NMAX];
    for (int64_t b = 0; b < B; ++b) {
        const real *pb = p + b * N;
        real *zb = z + b * N, *pr = proj + b * m;
        double ss = 0;
        for (int64_t k = 0; k < N; ++k) ss += (double)pb[k] * pb[k];
        const real r = (real)(1.0 / sqrt(ss / (double)N + eps));
        rinv[b] = r;
        for (int64_t k = 0; k < N; ++k) zb[k] = pb[k] * r;
        real acc[2 * NMAX + NMAX * NMAX]; /* a local array: no aliasing with phi */
        for (int64_t q = 0; q < m; ++q) acc[q] = 0;
        for (int64_t k = 0; k < N; ++k) {
            const real zk = zb[k], *wpre = phi_pre + k * n, *wpost = phi_post + k * n, *wres = phi_res + k * nn;
            for (int64_t i = 0; i < n; ++i) acc[i] += zk * wpre[i];
            for (int64_t i = 0; i < n; ++i) acc[n + i] += zk * wpost[i];
            for (int64_t q = 0; q < nn; ++q) acc[2 * n + q] += zk * wres[q];
        }
        for (int64_t q = 0; q < m; ++q) pr[q] = acc[q];
        real total = 0;
        for (int64_t i = 0; i < n; ++i) {
            h_pre[b * n + i] = NAME(sigmoid)(alpha_pre[0] * pr[i] + b_pre[i]);
            total += h_pre[b * n + i];
        }
        for (int64_t i = 0; i < n; ++i) h_pre[b * n + i] /= total;
        for (int64_t i = 0; i < n; ++i) h_post[b * n + i] = 2 * NAME(sigmoid)(alpha_post[0] * pr[n + i] + b_post[i]);
        real mx = -INFINITY;
        for (int64_t q = 0; q < nn; ++q) {
            L[q] = alpha_res[0] * pr[2 * n + q] + b_res[q];
            mx = L[q] > mx ? L[q] : mx;
        }
        for (int64_t q = 0; q < nn; ++q) L[q] -= mx;
        real *it = iterates + b * 2 * iters * nn;
        for (int64_t k = 0; k < 2 * iters; ++k) NAME(log_normalize)(L, it + k * nn, n, k % 2 == 0);
        for (int64_t q = 0; q < nn; ++q) H[b * nn + q] = it[(2 * iters - 1) * nn + q];
    }
}

/* Gradients of the above from gh_pre [B, n], gh_post [B, n], gH [B, n, n] (each NULL: zero).
 * Writes gp [B, N] and the parameter gradients (overwritten, not accumulated); returns 0, or 1
 * when out of memory. */
int NAME(aot_coefficients_backward)(int64_t B, int64_t n, int64_t N, int64_t iters,
                                     const real *phi_pre, const real *phi_post, const real *phi_res,
                                     const real *b_pre, const real *alpha_pre,
                                     const real *alpha_post, const real *alpha_res, const real *h_pre,
                                     const real *h_post, const real *z, const real *rinv,
                                     const real *proj, const real *iterates, const real *gh_pre,
                                     const real *gh_post, const real *gH, real *gp, real *gphi_pre,
                                     real *gphi_post, real *gphi_res, real *gb_pre, real *gb_post,
                                     real *gb_res, real *galpha_pre, real *galpha_post,
                                     real *galpha_res) {
    const int64_t nn = n * n, m = 2 * n + nn;
    real *gt = (real *)calloc((size_t)(B * m), sizeof(real)); /* dL/d(logits), [B, m] */
    if (!gt) return 1;
    double ga_pre = 0, ga_post = 0, ga_res = 0;
    for (int64_t q = 0; q < n; ++q) gb_pre[q] = gb_post[q] = 0;
    for (int64_t q = 0; q < nn; ++q) gb_res[q] = 0;
    for (int64_t b = 0; b < B; ++b) {
        const real *pr = proj + b * m;
        real *g = gt + b * m;
        if (gh_pre) {
            /* h_pre = s / sum(s): dL/ds_i = (gh_i - sum_k gh_k h_k) / sum(s), ds/dt = s (1 - s) */
            real dot = 0, total = 0;
            for (int64_t i = 0; i < n; ++i) dot += gh_pre[b * n + i] * h_pre[b * n + i];
            for (int64_t i = 0; i < n; ++i) total += NAME(sigmoid)(alpha_pre[0] * pr[i] + b_pre[i]);
            for (int64_t i = 0; i < n; ++i) {
                const real s = NAME(sigmoid)(alpha_pre[0] * pr[i] + b_pre[i]);
                g[i] = (gh_pre[b * n + i] - dot) / total * s * (1 - s);
            }
        }
        if (gh_post)
            for (int64_t i = 0; i < n; ++i) {
                const real s = h_post[b * n + i] / 2;
                g[n + i] = gh_post[b * n + i] * 2 * s * (1 - s);
            }
        if (gH) {
            /* H = exp(L_last): dL/dL_last = gH * H; each half-step L' = L - lse(L) has the
             * vector-Jacobian product v -> v - S * sum(v) with S = exp(L') over the same axis. */
            const real *it = iterates + b * 2 * iters * nn;
            real v[NMAX * NMAX];
            for (int64_t q = 0; q < nn; ++q) v[q] = gH[b * nn + q] * it[(2 * iters - 1) * nn + q];
            for (int64_t k = 2 * iters - 1; k >= 0; --k) {
                const real *S = it + k * nn;
                const int columns = k % 2 == 0;
                for (int64_t a = 0; a < n; ++a) {
                    real s = 0;
                    for (int64_t l = 0; l < n; ++l) s += columns ? v[l * n + a] : v[a * n + l];
                    for (int64_t l = 0; l < n; ++l) {
                        if (columns) v[l * n + a] -= S[l * n + a] * s;
                        else v[a * n + l] -= S[a * n + l] * s;
                    }
                }
            }
            for (int64_t q = 0; q < nn; ++q) g[2 * n + q] = v[q]; /* the max shift has no gradient */
        }
        for (int64_t i = 0; i < n; ++i) {
            ga_pre += (double)g[i] * pr[i];
            gb_pre[i] += g[i];
            ga_post += (double)g[n + i] * pr[n + i];
            gb_post[i] += g[n + i];
        }
        for (int64_t q = 0; q < nn; ++q) {
            ga_res += (double)g[2 * n + q] * pr[2 * n + q];
            gb_res[q] += g[2 * n + q];
        }
        /* dL/dproj = alpha * dL/dlogits, in place */
        for (int64_t i = 0; i < n; ++i) {
            g[i] *= alpha_pre[0];
            g[n + i] *= alpha_post[0];
        }
        for (int64_t q = 0; q < nn; ++q) g[2 * n + q] *= alpha_res[0];
    }
    galpha_pre[0] = (real)ga_pre;
    galpha_post[0] = (real)ga_post;
    galpha_res[0] = (real)ga_res;
    /* dphi[k, q] = sum_b z[b, k] gproj[b, q];  dz[b, k] = sum_q gproj[b, q] phi[k, q] */
    real acc[2 * NMAX + NMAX * NMAX];
    for (int64_t k = 0; k < N; ++k) {
        for (int64_t q = 0; q < m; ++q) acc[q] = 0;
        for (int64_t b = 0; b < B; ++b) {
            const real zk = z[b * N + k], *g = gt + b * m;
            for (int64_t q = 0; q < m; ++q) acc[q] += zk * g[q];
        }
        for (int64_t i = 0; i < n; ++i) gphi_pre[k * n + i] = acc[i];
        for (int64_t i = 0; i < n; ++i) gphi_post[k * n + i] = acc[n + i];
        for (int64_t q = 0; q < nn; ++q) gphi_res[k * nn + q] = acc[2 * n + q];
    }
    for (int64_t b = 0; b < B; ++b) {
        real g[2 * NMAX + NMAX * NMAX];
        for (int64_t q = 0; q < m; ++q) g[q] = gt[b * m + q];
        const real *zb = z + b * N;
        real *gpb = gp + b * N;
        double zdot = 0;
        for (int64_t k = 0; k < N; ++k) {
            const real *wpre = phi_pre + k * n, *wpost = phi_post + k * n, *wres = phi_res + k * nn;
            real s = 0;
            for (int64_t i = 0; i < n; ++i) s += g[i] * wpre[i] + g[n + i] * wpost[i];
            for (int64_t q = 0; q < nn; ++q) s += g[2 * n + q] * wres[q];
            gpb[k] = s; /* dL/dz for now */
            zdot += (double)s * zb[k];
        }
        /* z = p r, r = (mean(p^2) + eps)^(-1/2): dL/dp = r (dL/dz - z mean(dL/dz . z)) */
        const real mean = (real)(zdot / (double)N), r = rinv[b];
        for (int64_t k = 0; k < N; ++k) gpb[k] = r * (gpb[k] - zb[k] * mean);
    }
    free(gt);
    return 0;
}
