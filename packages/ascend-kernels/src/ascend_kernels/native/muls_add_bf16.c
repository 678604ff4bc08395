/* One-pass bfloat16 muls_add for the CPU reference: out = bf16(float(x) * scale + float(y)).
 *
 * Built with -ffp-contract=off so the product is rounded to float32 before the add, exactly as
 * torch's float32 mul then add; one round-to-nearest-even cast at the end, as c10::BFloat16.
 * out may be x or y itself (each element is read before it is written), so no restrict.
 */
#include <stdint.h>
#include <string.h>

static inline float bf16_to_float(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline uint16_t float_to_bf16(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
    /* NaN stays a quiet NaN: rounding could otherwise carry its payload into infinity. */
    uint32_t quiet_nan = (bits >> 16) | 0x0040u;
    return (uint16_t)(((bits & 0x7fffffffu) > 0x7f800000u) ? quiet_nan : rounded);
}

void ascend_muls_add_bf16(const uint16_t *x, const uint16_t *y, uint16_t *out, int64_t n,
                          float scale) {
    for (int64_t i = 0; i < n; ++i) {
        float product = bf16_to_float(x[i]) * scale;
        out[i] = float_to_bf16(product + bf16_to_float(y[i]));
    }
}
