/* y = x W^T + b for the engine's decode step, on a weight laid out once in column panels, for
   reinforge.kernels.decode_gemm (which says why). float32. Returns 0.

   Layout: W [N, K] (out, in) is stored as panels [ceil(N / 48)][K][48]: panel p holds output
   columns 48p .. 48p + 47 for every k, contiguous (the last one zero padded), so a panel is read
   as one sequential stream. Each panel is multiplied by the rows of x in blocks of 8 (24 vector
   accumulators: 8 rows x 48 columns), each output summed with fused multiply-adds over k in
   chunks of KC, in order, the chunks' sums added to the output one after another. While the
   first block of rows runs over a panel, the next panel (after the last: the first panel of the
   matrix multiplied next) is prefetched: at decode sizes (32 rows) a plain GEMM waits on the
   weight's memory, which here arrives while the previous panel is being multiplied. */
#include <stdint.h>
#include <stddef.h>

#define NB 48
#define KC 64  /* k summed in chunks of 64, the chunks' sums added in turn: a shorter rounding chain than one K-long sum */

#ifdef __AVX512F__
#include <immintrin.h>

int has_vector_path(void) { return 1; }

static inline __attribute__((always_inline)) void block(
    const float *x, int64_t ldx, const float *w, int64_t K, const float *bias, float *y, int64_t ldy, const int rows,
    __mmask16 m0, __mmask16 m1, __mmask16 m2, const float *next, int64_t next_len) {
    /* floats of `next` to prefetch per k, whole cache lines: `next` is all fetched by the end */
    const int64_t step = ((next_len + K - 1) / K + 15) / 16 * 16;
    __m512 a[8][3];
    for (int64_t k0 = 0; k0 < K; k0 += KC) {
        const int64_t k1 = k0 + KC < K ? k0 + KC : K;
        for (int r = 0; r < rows; r++) a[r][0] = a[r][1] = a[r][2] = _mm512_setzero_ps();
        for (int64_t k = k0; k < k1; k++) {
            const float *wk = w + k * NB;
            if (next)
                for (int64_t f = k * step; f < (k + 1) * step && f < next_len; f += 16)
                    _mm_prefetch((const char *)(next + f), _MM_HINT_T1);
            const __m512 w0 = _mm512_loadu_ps(wk), w1 = _mm512_loadu_ps(wk + 16), w2 = _mm512_loadu_ps(wk + 32);
            for (int r = 0; r < rows; r++) {
                const __m512 xr = _mm512_set1_ps(x[r * ldx + k]);
                a[r][0] = _mm512_fmadd_ps(xr, w0, a[r][0]);
                a[r][1] = _mm512_fmadd_ps(xr, w1, a[r][1]);
                a[r][2] = _mm512_fmadd_ps(xr, w2, a[r][2]);
            }
        }
        for (int r = 0; r < rows; r++) {  /* the chunk's sums added to the output's */
            float *yr = y + r * ldy;
            if (k0) {
                a[r][0] = _mm512_add_ps(a[r][0], _mm512_maskz_loadu_ps(m0, yr));
                a[r][1] = _mm512_add_ps(a[r][1], _mm512_maskz_loadu_ps(m1, yr + 16));
                a[r][2] = _mm512_add_ps(a[r][2], _mm512_maskz_loadu_ps(m2, yr + 32));
            }
            if (bias && k1 == K) {
                a[r][0] = _mm512_add_ps(a[r][0], _mm512_maskz_loadu_ps(m0, bias));
                a[r][1] = _mm512_add_ps(a[r][1], _mm512_maskz_loadu_ps(m1, bias + 16));
                a[r][2] = _mm512_add_ps(a[r][2], _mm512_maskz_loadu_ps(m2, bias + 32));
            }
            _mm512_mask_storeu_ps(yr, m0, a[r][0]);
            _mm512_mask_storeu_ps(yr + 16, m1, a[r][1]);
            _mm512_mask_storeu_ps(yr + 32, m2, a[r][2]);
        }
    }
}

static inline __mmask16 lanes(int64_t count) { return count >= 16 ? (__mmask16)0xFFFF : count <= 0 ? 0 : (__mmask16)((1u << count) - 1); }

int panel_linear(const float *x, int64_t ldx, const float *panels, const float *bias, float *y, int64_t ldy,
                 int64_t M, int64_t N, int64_t K, const float *after, int64_t after_len) {
    const int64_t count = (N + NB - 1) / NB;
    for (int64_t p = 0; p < count; p++) {
        const float *w = panels + p * K * NB;
        /* prefetched while this panel is multiplied: the next panel, or after the last one the
           first `after_len` floats of `after` (the first panel of the matrix multiplied next) */
        const float *next = p + 1 < count ? w + K * NB : after;
        const int64_t next_len = p + 1 < count ? K * NB : after_len;
        const int64_t left = N - p * NB;
        const __mmask16 m0 = lanes(left), m1 = lanes(left - 16), m2 = lanes(left - 32);
        const float *b = bias ? bias + p * NB : NULL;
        float *yp = y + p * NB;
        int64_t r = 0;
        for (; r + 8 <= M; r += 8) block(x + r * ldx, ldx, w, K, b, yp + r * ldy, ldy, 8, m0, m1, m2, r ? NULL : next, next_len);
        const float *pf = r ? NULL : next;
        switch (M - r) {  /* the rows left, each count its own unrolled copy */
            case 7: block(x + r * ldx, ldx, w, K, b, yp + r * ldy, ldy, 7, m0, m1, m2, pf, next_len); break;
            case 6: block(x + r * ldx, ldx, w, K, b, yp + r * ldy, ldy, 6, m0, m1, m2, pf, next_len); break;
            case 5: block(x + r * ldx, ldx, w, K, b, yp + r * ldy, ldy, 5, m0, m1, m2, pf, next_len); break;
            case 4: block(x + r * ldx, ldx, w, K, b, yp + r * ldy, ldy, 4, m0, m1, m2, pf, next_len); break;
            case 3: block(x + r * ldx, ldx, w, K, b, yp + r * ldy, ldy, 3, m0, m1, m2, pf, next_len); break;
            case 2: block(x + r * ldx, ldx, w, K, b, yp + r * ldy, ldy, 2, m0, m1, m2, pf, next_len); break;
            case 1: block(x + r * ldx, ldx, w, K, b, yp + r * ldy, ldy, 1, m0, m1, m2, pf, next_len); break;
            default: break;
        }
    }
    return 0;
}

#else  /* no AVX-512: the same sums in plain C (reinforge.kernels.decode_gemm uses torch's GEMM there) */

int has_vector_path(void) { return 0; }

int panel_linear(const float *x, int64_t ldx, const float *panels, const float *bias, float *y, int64_t ldy,
                 int64_t M, int64_t N, int64_t K, const float *after, int64_t after_len) {
    (void)after, (void)after_len;
    for (int64_t n = 0; n < N; n++) {
        const float *w = panels + (n / NB) * K * NB + n % NB;
        for (int64_t r = 0; r < M; r++) {
            float total = 0.f;
            for (int64_t k0 = 0; k0 < K; k0 += KC) {
                float sum = 0.f;
                for (int64_t k = k0; k < k0 + KC && k < K; k++) sum += x[r * ldx + k] * w[k * NB];
                total += sum;
            }
            y[r * ldy + n] = bias ? total + bias[n] : total;
        }
    }
    return 0;
}

#endif
