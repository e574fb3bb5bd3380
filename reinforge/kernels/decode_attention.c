/* One decode step of attention, for reinforge.kernels.decode_attention (which says why and how
   it is built). For each row b and head h, with kv = h / (H / KVH):

     out[b, h] = softmax_t(scale * q[b, h] . k[b, kv, t] + bias[b, t]) @ v[b, kv, t],  t in [0, T)

   The H / KVH heads that share a kv head run one after the other, so each cached key and value
   comes from memory once per row and kv head. bias is 0 on attended slots and -inf on masked ones, whose weight is
   exactly 0. Every row needs one attended slot (a decode step's own token always is).

   The loops keep several independent sums in flight: one dot product of D floats ends in a
   horizontal sum that waits on the one before it, so KB keys are scored together (KB sums), and
   the weighted sum of the values runs in two interleaved accumulators (even and odd slots); the
   head dimension is a compile-time constant for 32, 64 and 128, so those accumulators live in
   registers (64 rows x 4 heads of 32, 20-70 cached slots: 1.04-1.16x one key at a time, the
   higher figures where the cache is hot; the rest of the call is waiting on memory). */
#include <float.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "exp_nonpositive.h"

#define KB 4
#define ALWAYS_INLINE static inline __attribute__((always_inline))

ALWAYS_INLINE void attend(
    const float *restrict query, const float *restrict keys, const float *restrict values, int64_t kv_stride_t,
    const float *restrict bias, int64_t T, const int64_t D, float scale, float *restrict weights, float *restrict o)
{
    float max = -FLT_MAX;
    int64_t t = 0;
    for (; t + KB <= T; t += KB) {
        const float *restrict k0 = keys + t * kv_stride_t, *restrict k1 = k0 + kv_stride_t;
        const float *restrict k2 = k1 + kv_stride_t, *restrict k3 = k2 + kv_stride_t;
        float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
        #pragma omp simd reduction(+:s0, s1, s2, s3)
        for (int64_t d = 0; d < D; d++) {
            s0 += query[d] * k0[d];
            s1 += query[d] * k1[d];
            s2 += query[d] * k2[d];
            s3 += query[d] * k3[d];
        }
        const float s[KB] = {s0, s1, s2, s3};
        for (int j = 0; j < KB; j++) {
            const float x = s[j] * scale + bias[t + j];
            weights[t + j] = x;
            max = x > max ? x : max;
        }
    }
    for (; t < T; t++) {
        const float *restrict key = keys + t * kv_stride_t;
        float s = 0.f;
        #pragma omp simd reduction(+:s)
        for (int64_t d = 0; d < D; d++) s += query[d] * key[d];
        const float x = s * scale + bias[t];
        weights[t] = x;
        max = x > max ? x : max;
    }
    float sum = 0.f;
    #pragma omp simd reduction(+:sum)
    for (int64_t u = 0; u < T; u++) {
        const float e = exp_nonpositive(weights[u] - max);
        weights[u] = e;
        sum += e;
    }
    float even[D], odd[D];
    for (int64_t d = 0; d < D; d++) even[d] = odd[d] = 0.f;
    for (t = 0; t + 2 <= T; t += 2) {
        const float w0 = weights[t], w1 = weights[t + 1];
        const float *restrict v0 = values + t * kv_stride_t, *restrict v1 = v0 + kv_stride_t;
        #pragma omp simd
        for (int64_t d = 0; d < D; d++) {
            even[d] += w0 * v0[d];
            odd[d] += w1 * v1[d];
        }
    }
    if (t < T) {
        const float w = weights[t];
        const float *restrict value = values + t * kv_stride_t;
        #pragma omp simd
        for (int64_t d = 0; d < D; d++) even[d] += w * value[d];
    }
    const float inv = 1.f / sum;
    for (int64_t d = 0; d < D; d++) o[d] = (even[d] + odd[d]) * inv;
}

/* Strides are in floats; the last dimension of q, k, v and bias is contiguous, and k and v share
   their strides. out is [B, H, D], contiguous. Returns 0, or 1 when scratch memory ran out. */
int decode_attention(
    const float *q, int64_t q_stride_b, int64_t q_stride_h,
    const float *k, const float *v, int64_t kv_stride_b, int64_t kv_stride_h, int64_t kv_stride_t,
    const float *bias, int64_t bias_stride_b,
    float *out, int64_t B, int64_t H, int64_t KVH, int64_t T, int64_t D, float scale)
{
    const int64_t rep = H / KVH;
    float *restrict weights = malloc(sizeof(float) * T);  /* scores, then exp(score - max) */
    if (!weights) return 1;
    for (int64_t b = 0; b < B; b++) {
        for (int64_t h = 0; h < H; h++) {
            /* The heads of one kv head run one after another: their keys and values come from
               memory for the first and from the cache for the others. */
            const float *query = q + b * q_stride_b + h * q_stride_h;
            const float *keys = k + b * kv_stride_b + (h / rep) * kv_stride_h;
            const float *values = v + b * kv_stride_b + (h / rep) * kv_stride_h;
            const float *bias_b = bias + b * bias_stride_b;
            float *o = out + (b * H + h) * D;
#define ATTEND(dim) attend(query, keys, values, kv_stride_t, bias_b, T, dim, scale, weights, o)
            switch (D) {
                case 32: ATTEND(32); break;
                case 64: ATTEND(64); break;
                case 128: ATTEND(128); break;
                default: ATTEND(D);
            }
        }
    }
    free(weights);
    return 0;
}
