/*
 * uint8 values written as normalized float32, v * factor + shift computed in float32 (a
 * multiply, then an add): the one kernel of fastload's CPU normalize of a uint8 batch
 * (fastload/gpu/normalizing.c) and of the float32 output of the resize that writes a batch as
 * it decodes it (fastload/pixels/resizing.h), which must give the same numbers. Both are compiled with
 * -ffp-contract=off, so that no compiler fuses the scalar lines into one rounding where the
 * vector ones round twice. Static functions only: each extension compiles its own copy.
 */
#ifndef FASTLOAD_FLOATS_H
#define FASTLOAD_FLOATS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* `n` values, one after another. */
static void
floats_plain(const uint8_t *src, float *dst, size_t n, float factor, float shift)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = (float)src[i] * factor + shift;
}

/* `n` values, one after another, with SSE2 sixteen a step, widened uint8 -> int32 -> float
 * and streamed: aligned stores that bypass the cache (a batch is read next by another process
 * or the copy to the GPU, not by the core that wrote it). The first values up to the
 * alignment, and the last ones, go one by one. The caller fences the streamed stores
 * (_mm_sfence) before the values are handed on. */
static void
floats_streamed(const uint8_t *src, float *dst, size_t n, float factor, float shift)
{
    size_t i = 0;
#if defined(__SSE2__)
    for (; i < n && ((uintptr_t)(dst + i) & 15); i++)
        dst[i] = (float)src[i] * factor + shift;
    const __m128 f = _mm_set1_ps(factor), s = _mm_set1_ps(shift);
    const __m128i zero = _mm_setzero_si128();
    for (; i + 16 <= n; i += 16) {
        __m128i bytes = _mm_loadu_si128((const __m128i *)(src + i));
        __m128i low = _mm_unpacklo_epi8(bytes, zero), high = _mm_unpackhi_epi8(bytes, zero);
        __m128i words[4] = {_mm_unpacklo_epi16(low, zero), _mm_unpackhi_epi16(low, zero),
                            _mm_unpacklo_epi16(high, zero), _mm_unpackhi_epi16(high, zero)};
        for (int k = 0; k < 4; k++)
            _mm_stream_ps(dst + i + 4 * k,
                          _mm_add_ps(_mm_mul_ps(_mm_cvtepi32_ps(words[k]), f), s));
    }
#endif
    floats_plain(src + i, dst + i, n - i, factor, shift);
}

/* `n` pixels of `channels` planes (channel c's values from src + c * plane) written pixel by
 * pixel: dst[k * channels + c]. With SSE2 and three channels, four pixels a step: each
 * channel's four values widened, scaled and shifted, then interleaved into
 * r0 g0 b0 r1 | g1 b1 r2 g2 | b2 r3 g3 b3 (plain stores: streaming ones measured slower for
 * this pattern). */
static void
floats_interleaved(const uint8_t *src, size_t plane, size_t n, int channels,
                   const float *factors, const float *shifts, float *dst)
{
    size_t k = 0;
#if defined(__SSE2__)
    if (channels == 3) {
        const __m128i zero = _mm_setzero_si128();
        __m128 f[3], s[3], v[3];
        for (int c = 0; c < 3; c++) {
            f[c] = _mm_set1_ps(factors[c]);
            s[c] = _mm_set1_ps(shifts[c]);
        }
        for (; k + 4 <= n; k += 4) {
            for (int c = 0; c < 3; c++) {
                int32_t four;
                memcpy(&four, src + c * plane + k, 4);
                __m128i words = _mm_unpacklo_epi8(_mm_cvtsi32_si128(four), zero);
                __m128 x = _mm_cvtepi32_ps(_mm_unpacklo_epi16(words, zero));
                v[c] = _mm_add_ps(_mm_mul_ps(x, f[c]), s[c]);
            }
            __m128 rg_lo = _mm_unpacklo_ps(v[0], v[1]), rg_hi = _mm_unpackhi_ps(v[0], v[1]);
            __m128 t0 = _mm_shuffle_ps(v[2], rg_lo, _MM_SHUFFLE(2, 2, 0, 0));
            __m128 t1 = _mm_shuffle_ps(rg_lo, v[2], _MM_SHUFFLE(1, 1, 3, 3));
            __m128 t2 = _mm_shuffle_ps(v[2], rg_hi, _MM_SHUFFLE(3, 2, 3, 2));
            float *out = dst + 3 * k;
            _mm_storeu_ps(out, _mm_shuffle_ps(rg_lo, t0, _MM_SHUFFLE(2, 0, 1, 0)));
            _mm_storeu_ps(out + 4, _mm_shuffle_ps(t1, rg_hi, _MM_SHUFFLE(1, 0, 2, 0)));
            _mm_storeu_ps(out + 8, _mm_shuffle_ps(t2, t2, _MM_SHUFFLE(1, 3, 2, 0)));
        }
    }
#endif
    for (; k < n; k++)
        for (int c = 0; c < channels; c++)
            dst[k * channels + c] = (float)src[c * plane + k] * factors[c] + shifts[c];
}

#endif
