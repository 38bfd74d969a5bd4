/*
 * torch's antialiased uint8 resize (bilinear, bicubic), in plain C: the kernel of
 * fastload/pixels/resizing.c (see there for how it reproduces torch's numbers), shared with the
 * region decoder (fastload/backends/jpegregion.c), which resizes the region it decoded before
 * Python sees it. Static functions only: each extension compiles its own copy.
 */
#ifndef FASTLOAD_RESIZING_H
#define FASTLOAD_RESIZING_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
/* SSSE3's byte shuffle for the row pass, compiled for that target alone and chosen at run
 * time (every x86-64 CPU since 2011 has it; the baseline x86-64 build does not assume it) */
#if defined(__SSE2__) && defined(__GNUC__) && defined(__x86_64__)
#include <tmmintrin.h>
#define RESIZING_SSSE3 1
#endif

#include "floats.h"

#define MAX_CHANNELS 4

typedef struct {
    int *first;     /* each output pixel's first input pixel */
    int *count;     /* ... and how many it reads */
    int16_t *weights; /* `taps` per output pixel, zero-padded */
    int taps;         /* a multiple of four, past the last tap: weights read two or four at a time */
    int precision;
} Axis;

static double
triangle(double x)
{
    x = fabs(x);
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* Keys' cubic with a = -0.5, its two pieces written in torch's order of operations. */
static double
keys(double x)
{
    const double a = -0.5;
    x = fabs(x);
    if (x < 1.0)
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    if (x < 2.0)
        return ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
    return 0.0;
}

/* Frees what an axis holds; safe to call again (or on an axis never made). */
static void
axis_free(Axis *axis)
{
    free(axis->first);
    free(axis->count);
    free(axis->weights);
    axis->first = axis->count = NULL;
    axis->weights = NULL;
}

/* The span [start, start + span) of `in` pixels resampled to `out`: torch's weights where
 * start is 0 and span is `in` (a crop on whole pixels), and where the span falls between pixels
 * (a crop at a reduced DCT scale) the same kernel centred where torch's would be on the whole
 * image, reading no pixel outside the `in` that cover the span. 0, or -1 when out of memory. */
static int
axis_make(Axis *axis, int in, int out, int cubic, double start, double span)
{
    double (*filter)(double) = cubic ? keys : triangle;
    const double interp = cubic ? 4.0 : 2.0;
    const double scale = span / (double)out;
    const double support = scale >= 1.0 ? (interp * 0.5) * scale : interp * 0.5;
    const double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
    /* the most torch reads, then zeros to a multiple of four (weights read two and four at
     * a time, the pixels past the last tap with a zero weight) */
    const int most = (int)ceil(support) * 2 + 1;
    const int taps = (most + 3) & ~3;
    double *w = malloc(sizeof(double) * (size_t)out * (size_t)taps);
    axis->first = malloc(sizeof(int) * (size_t)out);
    axis->count = malloc(sizeof(int) * (size_t)out);
    axis->weights = malloc(sizeof(int16_t) * (size_t)out * (size_t)taps);
    axis->taps = taps;
    if (!w || !axis->first || !axis->count || !axis->weights) {
        free(w);
        axis_free(axis);
        return -1;
    }
    double largest = 0.0;
    for (int i = 0; i < out; i++) {
        double centre = start + scale * (i + 0.5), total = 0.0;
        long long first = (long long)(centre - support + 0.5);
        first = first < 0 ? 0 : first;
        long long end = (long long)(centre + support + 0.5);
        long long count = (end < in ? end : in) - first;
        /* torch clamps to `most` where rounding makes one more (its comment says so) */
        count = count < 0 ? 0 : (count > most ? most : count);
        double *row = w + (size_t)i * taps;
        for (int j = 0; j < taps; j++) {
            row[j] = j < count ? filter(((double)(j + first) - centre + 0.5) * invscale) : 0.0;
            total += row[j];
        }
        for (int j = 0; j < count && total != 0.0; j++) {
            row[j] /= total;
            largest = row[j] > largest ? row[j] : largest;
        }
        axis->first[i] = (int)first;
        axis->count[i] = (int)count;
    }
    int precision = 0;
    for (; precision < 22; precision++)
        if ((int)(0.5 + largest * (1 << (precision + 1))) >= (1 << 15))
            break;
    axis->precision = precision;
    for (size_t k = 0; k < (size_t)out * taps; k++) {
        double v = w[k] * (1 << precision);
        axis->weights[k] = (int16_t)(v < 0 ? (int)(-0.5 + v) : (int)(0.5 + v));
    }
    free(w);
    return 0;
}

static inline uint8_t
clamp_shift(int32_t sum, int precision)
{
    sum >>= precision;
    return (uint8_t)(sum < 0 ? 0 : (sum > 255 ? 255 : sum));
}

/* One output pixel of a row pass, channels 1 to 4, tap by tap. */
static inline void
pixel_scalar(const uint8_t *p, int channels, const int16_t *k, int count, int precision,
             uint8_t *dst, size_t plane)
{
    const int32_t half = (int32_t)1 << (precision - 1);
    int32_t sum[MAX_CHANNELS] = {half, half, half, half};
    for (int j = 0; j < count; j++, p += channels)
        for (int c = 0; c < channels; c++)
            sum[c] += p[c] * k[j];
    for (int c = 0; c < channels; c++)
        dst[c * plane] = clamp_shift(sum[c], precision);
}

#if defined(__SSE2__)
/* Taps j and j + 1's weights, as one int32 (low half: tap j). */
static inline __m128i
weight_pair(const int16_t *k, int j)
{
    int32_t both;
    memcpy(&both, k + j, sizeof both);
    return _mm_set1_epi32(both);
}

/* Two taps' pixels of a row, from the first's 8 bytes widened to int16 and interleaved with
 * themselves one pixel on: R0 R1 G0 G1 B0 B1 . . (one multiply-add by a weight pair gives the
 * three sums). */
static inline __m128i
pixel_pair(const uint8_t *p)
{
    __m128i px = _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)p), _mm_setzero_si128());
    return _mm_unpacklo_epi16(px, _mm_srli_si128(px, 6));
}

static inline __m128i
to_bytes(__m128i a, __m128i b, int precision)
{
    __m128i words = _mm_packs_epi32(_mm_srai_epi32(a, precision), _mm_srai_epi32(b, precision));
    return _mm_packus_epi16(words, _mm_setzero_si128());
}

/* Rows' three sums (R, G, B, in lanes 0-2) shifted, clamped and stored into the planes. */
static inline void
store_rows(const __m128i *sum, int n, int precision, uint8_t *dst, size_t next, size_t plane)
{
    for (int r = 0; r < n; r += 2) {
        uint64_t two = (uint64_t)_mm_cvtsi128_si64(
            to_bytes(sum[r], r + 1 < n ? sum[r + 1] : sum[r], precision));
        for (int c = 0; c < 3; c++) {
            dst[c * plane + r * next] = (uint8_t)(two >> (8 * c));
            if (r + 1 < n)
                dst[c * plane + (r + 1) * next] = (uint8_t)(two >> (8 * (c + 4)));
        }
    }
}

/* One output pixel of three channels, two taps a step (SSE2). */
static inline void
pixel_sse2(const uint8_t *p, const int16_t *k, int count, int precision, uint8_t *dst,
           size_t plane)
{
    __m128i sum = _mm_set1_epi32((int32_t)1 << (precision - 1));
    for (int j = 0; j < count; j += 2, p += 6)
        sum = _mm_add_epi32(sum, _mm_madd_epi16(pixel_pair(p), weight_pair(k, j)));
    store_rows(&sum, 1, precision, dst, 0, plane);
}
#endif

#if defined(RESIZING_SSSE3)
/* The same pixel of four rows (`stride` bytes apart, each output `next` bytes after the one
 * above) with SSSE3: four taps a step from one 16-byte load a row, two byte shuffles making
 * the taps' (R0 R1 G0 G1 B0 B1) int16 pairs. Reads up to 16 bytes from each step's first tap:
 * the caller keeps it for pixels with that room. */
__attribute__((target("ssse3"))) static inline void
four_rows_ssse3(const uint8_t *p, size_t stride, const int16_t *k, int count, int precision,
                uint8_t *dst, size_t next, size_t plane)
{
    const __m128i first = _mm_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1);
    const __m128i second =
        _mm_setr_epi8(6, -1, 9, -1, 7, -1, 10, -1, 8, -1, 11, -1, -1, -1, -1, -1);
    __m128i sum[4];
    for (int r = 0; r < 4; r++)
        sum[r] = _mm_set1_epi32((int32_t)1 << (precision - 1));
    for (int j = 0; j < count; j += 4, p += 12) {
        __m128i w01 = weight_pair(k, j), w23 = weight_pair(k, j + 2);
        for (int r = 0; r < 4; r++) {
            __m128i v = _mm_loadu_si128((const __m128i *)(p + r * stride));
            __m128i taps = _mm_add_epi32(_mm_madd_epi16(_mm_shuffle_epi8(v, first), w01),
                                         _mm_madd_epi16(_mm_shuffle_epi8(v, second), w23));
            sum[r] = _mm_add_epi32(sum[r], taps);
        }
    }
    store_rows(sum, 4, precision, dst, next, plane);
}
#endif

typedef void (*FourRows)(const uint8_t *, size_t, const int16_t *, int, int, uint8_t *, size_t,
                         size_t);

/* Rows of `channels`-interleaved pixels (`stride` bytes apart, `length` bytes readable from
 * src) resampled along the row into planes: out[c * plane] is channel c of the first row's
 * first output pixel (mirrored: of its last); each row's output `width` bytes after the last.
 * Three channels go four rows at a time (the weights loaded once for the four) by `four`,
 * which reads up to `reach` bytes from a pixel's first tap for a row; inlined into each
 * variant below with `four` a constant. */
static inline __attribute__((always_inline)) void
row_loop(const uint8_t *src, size_t stride, int rows, size_t length, int channels,
         const Axis *x, int width, int mirror, uint8_t *dst, size_t plane, FourRows four,
         size_t reach)
{
    for (int r = 0; r < rows;) {
        const int n = channels == 3 && four != NULL ? (rows - r >= 4 ? 4 : 1) : 1;
        const uint8_t *row = src + (size_t)r * stride;
        uint8_t *out_row = dst + (size_t)r * width;
        for (int i = 0; i < width; i++) {
            const size_t at = (size_t)x->first[i] * channels;
            const size_t room = length - (size_t)r * stride - at;
            const int16_t *k = x->weights + (size_t)i * x->taps;
            const int count = x->count[i];
            uint8_t *out = out_row + (mirror ? width - 1 - i : i);
#if defined(__SSE2__)
            if (n == 4 && (size_t)count * 3 + reach + 3 * stride <= room) {
                four(row + at, stride, k, count, x->precision, out, width, plane);
                continue;
            }
            if (n == 1 && channels == 3 && (size_t)count * 3 + 11 <= room) {
                pixel_sse2(row + at, k, count, x->precision, out, plane);
                continue;
            }
#endif
            for (int q = 0; q < n; q++)
                pixel_scalar(row + at + q * stride, channels, k, count, x->precision,
                             out + q * width, plane);
        }
        r += n;
    }
}

/* Without SSSE3: a row at a time (SSE2's two taps a step where there is SSE2) */
static void
row_pass_plain(const uint8_t *src, size_t stride, int rows, size_t length, int channels,
               const Axis *x, int width, int mirror, uint8_t *dst, size_t plane)
{
    row_loop(src, stride, rows, length, channels, x, width, mirror, dst, plane, NULL, 0);
}

#if defined(RESIZING_SSSE3)
__attribute__((target("ssse3"))) static void
row_pass_ssse3(const uint8_t *src, size_t stride, int rows, size_t length, int channels,
               const Axis *x, int width, int mirror, uint8_t *dst, size_t plane)
{
    row_loop(src, stride, rows, length, channels, x, width, mirror, dst, plane,
             four_rows_ssse3, 16);
}
#endif

static void
row_pass(const uint8_t *src, size_t stride, int rows, size_t length, int channels,
         const Axis *x, int width, int mirror, uint8_t *dst, size_t plane)
{
#if defined(RESIZING_SSSE3)
    if (__builtin_cpu_supports("ssse3")) {
        row_pass_ssse3(src, stride, rows, length, channels, x, width, mirror, dst, plane);
        return;
    }
#endif
    row_pass_plain(src, stride, rows, length, channels, x, width, mirror, dst, plane);
}

/* One output row of a plane from rows of the row pass (`stride` apart), along the columns.
 * With SSE2, 16 outputs a step, their sums kept in registers over the taps, two taps at a
 * time: the two rows' bytes interleaved and widened to int16, one multiply-add of both
 * weights per four sums (SSE2 has no 32-bit multiply to vectorize the plain loop with). */
static void
column_pass(const uint8_t *rows, size_t stride, const Axis *y, int i, int width, uint8_t *dst)
{
    const int32_t half = (int32_t)1 << (y->precision - 1);
    const int16_t *k = y->weights + (size_t)i * y->taps;
    const uint8_t *top = rows + (size_t)y->first[i] * stride;
    const int count = y->count[i];
    int x = 0;
#if defined(__SSE2__)
    const __m128i zero = _mm_setzero_si128(), shift = _mm_cvtsi32_si128(y->precision);
    for (; x + 16 <= width; x += 16) {
        __m128i sum[4];
        for (int q = 0; q < 4; q++)
            sum[q] = _mm_set1_epi32(half);
        /* count + 1 taps at most: the padding's zero weight pairs with an odd count's last;
         * its row is read only where it exists */
        for (int j = 0; j < count; j += 2) {
            const uint8_t *a = top + (size_t)j * stride + x;
            __m128i va = _mm_loadu_si128((const __m128i *)a);
            __m128i vb = j + 1 < count ? _mm_loadu_si128((const __m128i *)(a + stride)) : zero;
            __m128i both = weight_pair(k, j);
            __m128i lo = _mm_unpacklo_epi8(va, vb), hi = _mm_unpackhi_epi8(va, vb);
            sum[0] = _mm_add_epi32(sum[0], _mm_madd_epi16(_mm_unpacklo_epi8(lo, zero), both));
            sum[1] = _mm_add_epi32(sum[1], _mm_madd_epi16(_mm_unpackhi_epi8(lo, zero), both));
            sum[2] = _mm_add_epi32(sum[2], _mm_madd_epi16(_mm_unpacklo_epi8(hi, zero), both));
            sum[3] = _mm_add_epi32(sum[3], _mm_madd_epi16(_mm_unpackhi_epi8(hi, zero), both));
        }
        for (int q = 0; q < 4; q++)
            sum[q] = _mm_sra_epi32(sum[q], shift);
        __m128i bytes = _mm_packus_epi16(_mm_packs_epi32(sum[0], sum[1]),
                                         _mm_packs_epi32(sum[2], sum[3]));
        _mm_storeu_si128((__m128i *)(dst + x), bytes);
    }
#endif
    for (; x < width; x++) {
        int32_t sum = half;
        for (int j = 0; j < count; j++)
            sum += top[(size_t)j * stride + x] * k[j];
        dst[x] = clamp_shift(sum, y->precision);
    }
}

/* A float32 output: channel c's byte v written as v * factor[c] + shift[c] (a normalize, in
 * the order and float rounding of fastload's batch normalize: a multiply, then an add), as
 * planes or, `interleaved`, pixel by pixel (channels last: out_h x out_w x channels). */
typedef struct {
    float factor[MAX_CHANNELS], shift[MAX_CHANNELS];
    int interleaved;
} FloatOut;

/* One output row's bytes (channel c's at src + c * plane) written as floats: row `i` of each
 * plane of dst (out_h x width apart), or row `i` of interleaved pixels. */
static void
floats_row(const uint8_t *src, size_t plane, int channels, int width, int i, int out_h,
           const FloatOut *f, float *dst)
{
    const size_t out_plane = (size_t)width * out_h;
    if (!f->interleaved) {
        for (int c = 0; c < channels; c++)
            floats_streamed(src + c * plane, dst + c * out_plane + (size_t)i * width,
                            (size_t)width, f->factor[c], f->shift[c]);
        return;
    }
    floats_interleaved(src, plane, (size_t)width, channels, f->factor, f->shift,
                       dst + (size_t)i * width * channels);
}

typedef struct {
    const uint8_t *src; /* the region's top-left pixel */
    size_t stride;      /* bytes from one source row to the next */
    size_t length;      /* bytes readable from src */
    int in_w, in_h, channels, out_w, out_h, cubic, mirror;
    uint8_t *dst;       /* channels x out_h x out_w; NULL when `floats` says otherwise */
    /* the span resized, in the region's pixels: (0, 0, in_w, in_h) for the whole region */
    double start_x, start_y, span_w, span_h;
    /* a float32 output instead (see FloatOut), written to fdst as each row is resampled */
    const FloatOut *floats;
    float *fdst;
} ResizeJob;

/* Whether an axis needs resampling: anything but the region's pixels one for one. */
static int
axis_moves(int in, int out, double start, double span)
{
    return in != out || start != 0.0 || span != (double)in;
}

/* Resize as the job says: 0, or -1 when out of memory. No Python calls: runs without the GIL. */
static int
resize_planes(const ResizeJob *job)
{
    Axis x = {0}, y = {0};
    const int resize_x = axis_moves(job->in_w, job->out_w, job->start_x, job->span_w);
    const int resize_y = axis_moves(job->in_h, job->out_h, job->start_y, job->span_h);
    if ((resize_x &&
         axis_make(&x, job->in_w, job->out_w, job->cubic, job->start_x, job->span_w) < 0) ||
        (resize_y &&
         axis_make(&y, job->in_h, job->out_h, job->cubic, job->start_y, job->span_h) < 0)) {
        axis_free(&x);
        return -1;
    }
    /* the rows the column pass reads: all of them when it does not run */
    int top = 0, bottom = job->in_h;
    if (resize_y) {
        top = y.first[0];
        bottom = y.first[job->out_h - 1] + y.count[job->out_h - 1];
    }
    const int channels = job->channels, width = job->out_w;
    const size_t out_plane = (size_t)job->out_w * job->out_h;
    const size_t mid_plane = (size_t)width * job->in_h;
    /* the row pass's output: the final planes, unless the columns still move, or the bytes
     * are to become floats (then a row's bytes at a time, in `line`) */
    const int floats = job->floats != NULL;
    const int staged = resize_y || floats;
    uint8_t *mid = staged ? malloc(resize_y ? mid_plane * channels : out_plane * channels)
                          : NULL;
    uint8_t *line = floats && resize_y ? malloc((size_t)width * channels) : NULL;
    if ((staged && !mid) || (floats && resize_y && !line)) {
        free(line);
        free(mid);
        axis_free(&x);
        axis_free(&y);
        return -1;
    }
    uint8_t *rows = staged ? mid : job->dst;
    const size_t plane = resize_y ? mid_plane : out_plane;
    if (resize_x)
        row_pass(job->src + (size_t)top * job->stride, job->stride, bottom - top,
                 job->length - (size_t)top * job->stride, channels, &x, width, job->mirror,
                 rows + (size_t)top * width, plane);
    for (int r = top; r < bottom && !resize_x; r++) {
        const uint8_t *src = job->src + (size_t)r * job->stride;
        uint8_t *dst = rows + (size_t)r * width;
        for (int i = 0; i < width; i++) {
            int at = job->mirror ? width - 1 - i : i;
            for (int c = 0; c < channels; c++)
                dst[c * plane + at] = src[(size_t)i * channels + c];
        }
    }
    if (resize_y && !floats)
        for (int c = 0; c < channels; c++)
            for (int i = 0; i < job->out_h; i++)
                column_pass(mid + c * mid_plane, width, &y, i, width,
                            job->dst + c * out_plane + (size_t)i * width);
    for (int i = 0; floats && i < job->out_h; i++) {
        if (resize_y)
            for (int c = 0; c < channels; c++)
                column_pass(mid + c * mid_plane, width, &y, i, width, line + (size_t)c * width);
        const uint8_t *bytes = resize_y ? line : mid + (size_t)i * width;
        floats_row(bytes, resize_y ? (size_t)width : out_plane, channels, width, i, job->out_h,
                   job->floats, job->fdst);
    }
#if defined(__SSE2__)
    if (floats)
        _mm_sfence(); /* the streamed floats are seen before the batch is handed on */
#endif
    free(line);
    free(mid);
    axis_free(&x);
    axis_free(&y);
    return 0;
}

#endif
