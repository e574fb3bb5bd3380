/* RMSNorm, SwiGLU and rotary embedding, forward and backward, one pass each, for reinforge.kernels.layers
   (which says why). float32, contiguous rows. Every function returns 0, or 1 when it ran out of memory.

   rms_norm:  y = w * x * r,  r = 1 / sqrt(mean(x^2) + eps) per row (transformers' LlamaRMSNorm)
     backward: with xh = x * r and g = dy * w:  dx = r * (g - xh * mean(g * xh)),  dw = sum over rows of dy * xh
   swiglu:    y = silu(gate) * up,  silu(a) = a * sigmoid(a)   (Shazeer 2020, "GLU Variants Improve Transformer")
     backward: d_up = dy * silu(gate),  d_gate = dy * up * sigmoid(gate) * (1 + gate * (1 - sigmoid(gate)))
   rotary:    y[t, h, d] = x[t, h, d] cos[t, d] + x[t, h, d'] sin[t, d],  d' = (d + D/2) mod D, with sin's
              first half negated (transformers' x cos + rotate_half(x) sin; Su et al. 2021, RoFormer)
     backward: dx[t, h, d] = dy[t, h, d] cos[t, d] + dy[t, h, d'] sin[t, d'] (the transposed rotation) */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "exp_nonpositive.h"

/* sigmoid(a) from exp(-|a|), which never overflows. */
static inline float sigmoid(float a) {
    const float e = exp_nonpositive(-fabsf(a));
    return (a >= 0.f ? 1.f : e) / (1.f + e);
}

int rms_norm_forward(const float *x, const float *w, float *y, float *inv_rms, int64_t rows, int64_t H, float eps) {
    for (int64_t row = 0; row < rows; row++) {
        const float *restrict xr = x + row * H;
        float *restrict yr = y + row * H;
        float squares = 0.f;
        #pragma omp simd reduction(+:squares)
        for (int64_t i = 0; i < H; i++) squares += xr[i] * xr[i];
        const float r = 1.f / sqrtf(squares / H + eps);
        inv_rms[row] = r;
        #pragma omp simd
        for (int64_t i = 0; i < H; i++) yr[i] = w[i] * (xr[i] * r);
    }
    return 0;
}

/* dw (H floats) is overwritten. */
int rms_norm_backward(const float *x, const float *w, const float *inv_rms, const float *dy, float *dx, float *dw, int64_t rows, int64_t H) {
    float *restrict acc = calloc(H, sizeof(float));
    if (!acc) return 1;
    for (int64_t row = 0; row < rows; row++) {
        const float *restrict xr = x + row * H, *restrict dyr = dy + row * H;
        float *restrict dxr = dx + row * H;
        const float r = inv_rms[row];
        float dot = 0.f;
        #pragma omp simd reduction(+:dot)
        for (int64_t i = 0; i < H; i++) {
            const float xh = xr[i] * r;
            dot += dyr[i] * w[i] * xh;
            acc[i] += dyr[i] * xh;
        }
        const float mean = dot / H;
        #pragma omp simd
        for (int64_t i = 0; i < H; i++) dxr[i] = r * (dyr[i] * w[i] - xr[i] * r * mean);
    }
    memcpy(dw, acc, sizeof(float) * H);
    free(acc);
    return 0;
}

/* gate and up: rows of `cols` values, `in_stride` apart (the two halves of one [rows, 2 cols]
   projection, or two tensors); y [rows, cols] contiguous. */
int swiglu_forward(const float *gate, const float *up, int64_t in_stride, float *y, int64_t rows, int64_t cols) {
    for (int64_t row = 0; row < rows; row++) {
        const float *restrict g = gate + row * in_stride, *restrict u = up + row * in_stride;
        float *restrict yr = y + row * cols;
        #pragma omp simd
        for (int64_t i = 0; i < cols; i++) yr[i] = g[i] * sigmoid(g[i]) * u[i];
    }
    return 0;
}

int swiglu_backward(const float *gate, const float *up, const float *dy, float *d_gate, float *d_up, int64_t n) {
    #pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        const float a = gate[i], s = sigmoid(a);
        d_up[i] = dy[i] * a * s;
        d_gate[i] = dy[i] * up[i] * s * (1.f + a * (1.f - s));
    }
    return 0;
}

/* x: T rows `x_stride` apart, each H heads of D; y [T, H, D] contiguous; cos, sin: T rows of D,
   `cs_stride` apart. transpose = 1 applies the transposed rotation (the backward). */
int rotary(const float *x, int64_t x_stride, const float *cos, const float *sin, int64_t cs_stride, float *y,
           int64_t T, int64_t H, int64_t D, int transpose) {
    const int64_t half = D / 2;
    for (int64_t t = 0; t < T; t++) {
        const float *restrict c = cos + t * cs_stride, *restrict s = sin + t * cs_stride;
        for (int64_t h = 0; h < H; h++) {
            const float *restrict xr = x + t * x_stride + h * D;
            float *restrict yr = y + (t * H + h) * D;
            if (transpose) {
                #pragma omp simd
                for (int64_t d = 0; d < half; d++) yr[d] = xr[d] * c[d] + xr[d + half] * s[d + half];
                #pragma omp simd
                for (int64_t d = half; d < D; d++) yr[d] = xr[d] * c[d] + xr[d - half] * s[d - half];
            } else {
                #pragma omp simd
                for (int64_t d = 0; d < half; d++) yr[d] = xr[d] * c[d] + xr[d + half] * s[d];
                #pragma omp simd
                for (int64_t d = half; d < D; d++) yr[d] = xr[d] * c[d] + xr[d - half] * s[d];
            }
        }
    }
    return 0;
}
