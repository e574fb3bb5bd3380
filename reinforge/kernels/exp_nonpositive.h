/* exp(x) for x <= 0, in a form the compiler vectorizes, for the kernels of reinforge.kernels:
   x = n ln2 + r with |r| <= ln2 / 2 (ln2 in two parts, Cody and Waite), exp(r) by its degree-6
   Taylor polynomial (relative error < 2e-7 there), 2^n through the exponent bits. 0 below -87
   (where exp underflows), -inf included. */
#ifndef REINFORGE_EXP_NONPOSITIVE_H
#define REINFORGE_EXP_NONPOSITIVE_H
#include <stdint.h>

static inline float exp_nonpositive(float x) {
    float xc = x < -87.f ? -87.f : x;
    float n = __builtin_roundf(xc * 1.44269504088896341f);
    float r = xc - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.f + r * (1.f + r * (0.5f + r * (1.f / 6 + r * (1.f / 24 + r * (1.f / 120 + r * (1.f / 720))))));
    union { float f; int32_t i; } two_n;
    two_n.i = ((int32_t)n + 127) << 23;
    return x < -87.f ? 0.f : p * two_n.f;
}

#endif
