/*
 * A random crop's plan made in C, for the region decoder's batch call: the JPEG header read,
 * RandomResizedCrop's draws (and a flip's) made from the sample's seed as torch's CPU
 * generator makes them, and the region and DCT scale chosen, as fastload's Python planner
 * does it (fastload/pixels/image.py probe, fastload/transforms/ RandomResizedCrop.params,
 * fastload/backends/base.py plan_jpeg, fastload/pixels/resampling.py kernel_region). The same
 * numbers, not similar ones: tests/backends/test_crop_plans.py compares both planners on
 * thousands of draws. Anything off the common road (another format, an EXIF orientation, a
 * truncated file, a crop the kernel does not take as it is) is left to Python, which then
 * plans the sample as before.
 *
 * Why: in a process of worker threads the per-sample planning was most of the time a sample
 * holds the GIL; made here it runs with the GIL let go, in the same call as the decode.
 * Static functions only, included by fastload/backends/jpegregion.c; built with
 * -ffp-contract=off, so that no multiply-add is fused where Python rounds twice.
 */
#ifndef FASTLOAD_CROPPLANS_H
#define FASTLOAD_CROPPLANS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* --------------------------------------------------------------- torch's CPU generator */

/* MT19937, seeded as torch seeds its CPU generator: from the seed's low 32 bits. */
typedef struct {
    uint32_t state[624];
    int next;
} Twister;

static void
twister_seed(Twister *t, uint64_t seed)
{
    t->state[0] = (uint32_t)seed;
    for (int i = 1; i < 624; i++)
        t->state[i] = 1812433253u * (t->state[i - 1] ^ (t->state[i - 1] >> 30)) + (uint32_t)i;
    t->next = 624;
}

static uint32_t
twister_word(Twister *t)
{
    if (t->next >= 624) {
        for (int i = 0; i < 624; i++) {
            uint32_t y = (t->state[i] & 0x80000000u) | (t->state[(i + 1) % 624] & 0x7fffffffu);
            t->state[i] = t->state[(i + 397) % 624] ^ (y >> 1) ^ (y & 1u ? 0x9908b0dfu : 0u);
        }
        t->next = 0;
    }
    uint32_t y = t->state[t->next++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    return y ^ (y >> 18);
}

/* torch.empty(1).uniform_(low, high).item() on float32: 24 bits of a word scaled to [0, 1),
 * then times (high - low) plus low in float32, rounded once where this torch fuses the
 * multiply-add (fastload.sampling.torch_draws measures which), twice where it does not. */
static double
torch_uniform(Twister *t, double low, double high, int fused)
{
    const float low32 = (float)low;
    const float span = (float)((double)(float)high - (double)low32);
    const float x = (float)(twister_word(t) & 0xFFFFFFu) * (1.0f / 16777216.0f);
    if (fused)
        return (double)fmaf(x, span, low32);
    const float product = x * span;
    return (double)(product + low32);
}

/* --------------------------------------------------------------- the recipe */

typedef struct {
    int width, height;           /* RandomResizedCrop's output */
    double scale_lo, scale_hi;   /* its area range */
    double ratio_lo, ratio_hi;   /* its aspect range */
    int cubic;                   /* bicubic, else bilinear (antialiased either way) */
    double flip;                 /* RandomHorizontalFlip's p; negative: no flip op */
    int fused;                   /* torch's uniform_ rounds its multiply-add once */
    int exif;                    /* EXIF orientations are applied (exif_orientation=True) */
    long long max_pixels;
} CropRecipe;

/* What the batch call decodes for one sample: the region decoder's job. */
typedef struct {
    int reduce;    /* the DCT scale, 1 / reduce */
    double box[4]; /* in the scaled image's pixels: whole, or a span between them */
    int mirror;
} CropPlan;

/* A range of integers torch draws with one word (fastload.sampling.torch_draws.INTEGER_SPAN); a JPEG's
 * sides (at most 65,535) never reach it. */
#define ONE_WORD_SPAN (1LL << 24)

/* RandomResizedCrop.params: (top, left, h, w) of a width x height image. 0, or -1 where a
 * draw is one torch makes otherwise (Python's planner then draws). */
static int
crop_params(Twister *t, const CropRecipe *r, long long width, long long height, long long out[4])
{
    const double area = (double)(height * width);
    const double log_lo = log(r->ratio_lo), log_hi = log(r->ratio_hi);
    for (int attempt = 0; attempt < 10; attempt++) {
        double target = area * torch_uniform(t, r->scale_lo, r->scale_hi, r->fused);
        double aspect = exp(torch_uniform(t, log_lo, log_hi, r->fused));
        /* Python's round(): halves to even, as nearbyint in the default rounding mode */
        double w = nearbyint(sqrt(target * aspect)), h = nearbyint(sqrt(target / aspect));
        if (0 < w && w <= (double)width && 0 < h && h <= (double)height) {
            long long top_span = height - (long long)h + 1, left_span = width - (long long)w + 1;
            if (top_span >= ONE_WORD_SPAN || left_span >= ONE_WORD_SPAN)
                return -1;
            out[0] = twister_word(t) % top_span;
            out[1] = twister_word(t) % left_span;
            out[2] = (long long)h;
            out[3] = (long long)w;
            return 0;
        }
    }
    /* ten misses: the largest centred crop within the ratio range */
    const double in_ratio = (double)width / (double)height;
    long long w = width, h = height;
    if (in_ratio < r->ratio_lo)
        h = (long long)nearbyint((double)width / r->ratio_lo);
    else if (in_ratio > r->ratio_hi)
        w = (long long)nearbyint((double)height * r->ratio_hi);
    out[0] = (height - h) / 2;
    out[1] = (width - w) / 2;
    out[2] = h;
    out[3] = w;
    return 0;
}

/* fastload.pixels.resampling.whole_pixels for one value */
static int
whole(double v)
{
    return fabs(v - nearbyint(v)) < 1e-6;
}

static double
snapped(double v)
{
    return whole(v) ? nearbyint(v) : v;
}

/* plan_jpeg + kernel_region for a crop box (x0, y0, x1, y1) of a width x height image at
 * the recipe's output: 0, or -1 where the kernel does not take the box as it is (Python's
 * planner then renders it otherwise). */
static int
crop_plan(const CropRecipe *r, long long width, long long height, const double box[4],
          CropPlan *plan)
{
    const double shrink_x = (box[2] - box[0]) / r->width, shrink_y = (box[3] - box[1]) / r->height;
    const double shrink = shrink_x < shrink_y ? shrink_x : shrink_y;
    const int reduce = shrink >= 8 ? 8 : shrink >= 4 ? 4 : shrink >= 2 ? 2 : 1;
    const long long cols = (width + reduce - 1) / reduce, rows = (height + reduce - 1) / reduce;
    const double sx = (double)cols / (double)width, sy = (double)rows / (double)height;
    double x0 = box[0] * sx, y0 = box[1] * sy, x1 = box[2] * sx, y1 = box[3] * sy;
    const double eps = 1e-6 * (double)(rows > cols ? rows : cols);
    if (x0 < -eps || y0 < -eps || x1 > cols + eps || y1 > rows + eps)
        return -1; /* reaches outside: padded */
    x0 = x0 > 0.0 ? x0 : 0.0;
    y0 = y0 > 0.0 ? y0 : 0.0;
    x1 = x1 < (double)cols ? x1 : (double)cols;
    y1 = y1 < (double)rows ? y1 : (double)rows;
    plan->reduce = reduce;
    if (whole(x0) && whole(y0) && whole(x1) && whole(y1)) {
        double ends[4] = {nearbyint(x0), nearbyint(y0), nearbyint(x1), nearbyint(y1)};
        memcpy(plan->box, ends, sizeof ends);
        return 0;
    }
    const double fx = r->width / (x1 - x0), fy = r->height / (y1 - y0);
    if (whole(cols * fx) && whole(rows * fy) && whole(x0 * fx) && whole(y0 * fy))
        return -1; /* resized whole, then sliced */
    if (!(sx < 1.0 || sy < 1.0) || (r->width >= x1 - x0 && r->height >= y1 - y0))
        return -1; /* a warp that is not a reduced decode's shrinking span */
    double span[4] = {snapped(x0), snapped(y0), snapped(x1), snapped(y1)};
    memcpy(plan->box, span, sizeof span);
    return 0;
}

/* ----------------------------------------------------------------- the header */

static unsigned
cp_be16(const unsigned char *p)
{
    return (unsigned)p[0] << 8 | p[1];
}

static unsigned long
cp_read(const unsigned char *p, int size, int little)
{
    unsigned long v = 0;
    for (int k = 0; k < size; k++)
        v |= (unsigned long)p[little ? k : size - 1 - k] << (8 * k);
    return v;
}

/* fastload.pixels.image._exif_orientation: IFD0's Orientation (SHORT), 1 where absent or unusable. */
static int
exif_orientation(const unsigned char *tiff, size_t n)
{
    int little;
    if (n >= 2 && tiff[0] == 'I' && tiff[1] == 'I')
        little = 1;
    else if (n >= 2 && tiff[0] == 'M' && tiff[1] == 'M')
        little = 0;
    else
        return 1;
    if (n < 8)
        return 1;
    size_t ifd = cp_read(tiff + 4, 4, little);
    if (ifd > n || n - ifd < 2)
        return 1;
    size_t count = cp_read(tiff + ifd, 2, little);
    for (size_t k = 0; k < count; k++) {
        size_t entry = ifd + 2 + 12 * k;
        if (entry > n || n - entry < 4)
            return 1;
        if (cp_read(tiff + entry, 2, little) == 0x0112 && cp_read(tiff + entry + 2, 2, little) == 3) {
            if (n - entry < 10)
                return 1;
            unsigned long value = cp_read(tiff + entry + 8, 2, little);
            return value >= 1 && value <= 8 ? (int)value : 1;
        }
    }
    return 1;
}

static int
is_sof(unsigned marker)
{
    return marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 &&
           marker != 0xCC;
}

/* fastload.pixels.image._probe_jpeg and the checks of read_header and plan_jpeg: the size of a JPEG
 * the batch call can plan here. 0, or -1 for anything else (not a JPEG, no frame header,
 * too many pixels, no end-of-image marker in its second half, not grey or colour, an EXIF
 * orientation to apply): Python's planner reads those, and reports what is wrong. */
static int
crop_header(const unsigned char *d, size_t n, const CropRecipe *r, long long *width,
            long long *height)
{
    if (n < 3 || d[0] != 0xFF || d[1] != 0xD8 || d[2] != 0xFF)
        return -1;
    int orientation = 1;
    size_t at = 2;
    while (at + 4 <= n) {
        if (d[at] != 0xFF)
            return -1;
        unsigned marker = d[at + 1];
        if (marker == 0xFF) {
            at += 1;
            continue;
        }
        if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) {
            at += 2;
            continue;
        }
        size_t length = cp_be16(d + at + 2);
        size_t end = at + 2 + length < n ? at + 2 + length : n; /* a slice stops at the end */
        const unsigned char *segment = d + at + 4;
        size_t size = end > at + 4 ? end - (at + 4) : 0;
        if (marker == 0xE1 && size >= 6 && memcmp(segment, "Exif\0\0", 6) == 0) {
            orientation = exif_orientation(segment + 6, size - 6);
        } else if (is_sof(marker) && size >= 6) {
            long long h = cp_be16(segment + 1), w = cp_be16(segment + 3);
            int components = segment[5];
            if (w == 0 || h == 0 || w * h > r->max_pixels || (components != 1 && components != 3))
                return -1;
            if (r->exif && orientation != 1)
                return -1;
            /* fastload.pixels.image.is_truncated_jpeg: an end-of-image marker in the second half */
            int ended = 0;
            for (size_t k = n - 1; k >= n / 2 + 1 && !ended; k--)
                ended = d[k - 1] == 0xFF && d[k] == 0xD9;
            if (!ended)
                return -1;
            *width = w;
            *height = h;
            return 0;
        } else if (marker == 0xDA || marker == 0xD9) {
            return -1;
        }
        at += 2 + length;
    }
    return -1;
}

/* The sample's plan: its header read, its draws made from `seed`, its crop planned. 0, or -1
 * where Python's planner is to plan it. */
static int
plan_crop(const unsigned char *data, size_t n, uint64_t seed, const CropRecipe *r,
          CropPlan *plan)
{
    long long width, height, crop[4];
    if (crop_header(data, n, r, &width, &height) < 0)
        return -1;
    Twister t;
    twister_seed(&t, seed);
    if (crop_params(&t, r, width, height, crop) < 0)
        return -1;
    const long long top = crop[0], left = crop[1], h = crop[2], w = crop[3];
    const double box[4] = {(double)left, (double)top, (double)(left + w), (double)(top + h)};
    plan->mirror = r->flip >= 0.0 && torch_uniform(&t, 0.0, 1.0, r->fused) < r->flip;
    return crop_plan(r, width, height, box, plan);
}

#endif
