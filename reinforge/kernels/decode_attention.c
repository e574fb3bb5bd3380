/* One decode step of attention, for reinforge.kernels.decode_attention (which says why and how
   it is built). For each row b and head h, with kv = h / (H / KVH):

     out[b, h] = softmax_t(scale * q[b, h] . k[b, kv, t] + bias[b, t]) @ v[b, kv, t],  t in [0, T)

   The H / KVH heads that share a kv head run one after the other, so each cached key and value
   comes from memory once per row and kv head. bias is 0 on attended slots and -inf on masked ones, whose weight is
   exactly 0. Every row needs one attended slot (a decode step's own token always is). */
#include <float.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "exp_nonpositive.h"

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
    float *restrict acc = malloc(sizeof(float) * D);
    if (!weights || !acc) {
        free(weights); free(acc);
        return 1;
    }
    for (int64_t b = 0; b < B; b++) {
        const float *restrict bias_b = bias + b * bias_stride_b;
        for (int64_t h = 0; h < H; h++) {
            /* The heads of one kv head run one after another: their keys and values come from
               memory for the first and from the cache for the others. */
            const float *restrict query = q + b * q_stride_b + h * q_stride_h;
            const float *restrict keys = k + b * kv_stride_b + (h / rep) * kv_stride_h;
            const float *restrict values = v + b * kv_stride_b + (h / rep) * kv_stride_h;
            float max = -FLT_MAX;
            for (int64_t t = 0; t < T; t++) {
                const float *restrict key = keys + t * kv_stride_t;
                float s = 0.f;
                #pragma omp simd reduction(+:s)
                for (int64_t d = 0; d < D; d++) s += query[d] * key[d];
                s = s * scale + bias_b[t];
                weights[t] = s;
                max = s > max ? s : max;
            }
            float sum = 0.f;
            #pragma omp simd reduction(+:sum)
            for (int64_t t = 0; t < T; t++) {
                const float e = exp_nonpositive(weights[t] - max);
                weights[t] = e;
                sum += e;
            }
            memset(acc, 0, sizeof(float) * D);
            for (int64_t t = 0; t < T; t++) {
                const float w = weights[t];
                const float *restrict value = values + t * kv_stride_t;
                #pragma omp simd
                for (int64_t d = 0; d < D; d++) acc[d] += w * value[d];
            }
            float *restrict o = out + (b * H + h) * D;
            const float inv = 1.f / sum;
            for (int64_t d = 0; d < D; d++) o[d] = acc[d] * inv;
        }
    }
    free(weights); free(acc);
    return 0;
}
