/*
 * fastload.backends._jpegregion: decode one region of a JPEG at a DCT scale, with the libjpeg
 * API of libjpeg-turbo (>= 1.5; Debian/Ubuntu: libjpeg62-turbo-dev or libjpeg-turbo8-dev).
 *
 * A baseline JPEG is one Huffman-coded stream, so every row above the region must still be
 * entropy-decoded; jpeg_skip_scanlines() does only that for them (no inverse DCT, upsampling or
 * colour conversion), jpeg_crop_scanline() limits those steps to the region's columns, and the
 * decode stops after the region's last row, leaving the rest of the stream unread.
 *
 * A JPEG with restart markers on a grid of MCUs (fastload.pack's pixels="seekable" writes
 * them; restarts.c) is decoded faster still: the restart intervals around the region are
 * copied into a smaller JPEG of their own (the DC predictions restart at each marker, so each
 * interval stands alone), and only that is entropy-decoded.
 *
 * Python's side (fastload/backends/region.py) plans the region; this file decodes it, and
 * for a region that is then only resized (a random crop), resizes it too (decode_resized, with
 * fastload/pixels/resizing.h: torch's numbers), so that the decoded pixels never reach Python.
 * Errors from libjpeg come back here by longjmp and leave as ValueError; every allocation is
 * in libjpeg's pools, the pixels' buffer or the cut-out JPEG (freed on every way out), so
 * nothing leaks on an error. The GIL is let go once a call, from the cut of the restart
 * intervals to the last row (and the resize): in a process of worker threads each hand-over
 * of the GIL is a wait.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <setjmp.h>
#include <stdio.h> /* jpeglib.h needs FILE and size_t first */
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#include "../pixels/resizing.h"
#include "cropplans.h"
#include "restarts.h"

/* kept out of decode(), whose setjmp would otherwise make the compiler keep the inlined
 * function's locals in memory (and warn that they might be clobbered) */
#if defined(__GNUC__)
#define NOINLINE __attribute__((noinline))
#else
#define NOINLINE
#endif

#define STRINGIFY_(x) #x
#define STRINGIFY(x) STRINGIFY_(x)

/* Whole-image decode modes, returned to Python for its counters. */
enum { MODE_REGION = 0, MODE_PROGRESSIVE = 1, MODE_ROWS = 2, MODE_RESTARTS = 3 };

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
    int warned;
} Errors;

static void
on_error(j_common_ptr cinfo)
{
    Errors *errors = (Errors *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, errors->message);
    longjmp(errors->jump, 1);
}

/* Keep the first warning (corrupt data that libjpeg worked around): Python raises it, as the
 * turbojpeg backend does. Trace messages (level >= 0) are dropped, and nothing is printed. */
static void
on_message(j_common_ptr cinfo, int level)
{
    Errors *errors = (Errors *)cinfo->err;
    if (level < 0 && !errors->warned) {
        (*cinfo->err->format_message)(cinfo, errors->message);
        errors->warned = 1;
    }
}

/* Cropping columns is safe for the sampling factors real cameras and encoders write (1 or 2);
 * libjpeg-turbo before 3.0 miscomputes cropped widths for 4x2 and 2x4 components with DCT
 * scaling (its ChangeLog, 3.0.0), so those images are decoded across their full width. */
static int
usual_sampling(j_decompress_ptr cinfo)
{
    for (int i = 0; i < cinfo->num_components; i++) {
        jpeg_component_info *c = &cinfo->comp_info[i];
        if (c->h_samp_factor > 2 || c->v_samp_factor > 2)
            return 0;
    }
    return 1;
}

static JDIMENSION
clamp(long long value, JDIMENSION high)
{
    return value < 0 ? 0 : value > (long long)high ? high : (JDIMENSION)value;
}

static unsigned
be16(const unsigned char *p)
{
    return (unsigned)p[0] << 8 | p[1];
}

/* The region's restart intervals as a JPEG of their own, and where it lies in the scaled image. */
typedef struct {
    unsigned char *data; /* malloc'd; NULL when the image has no usable restart grid */
    size_t len;
    JDIMENSION left, top; /* the sub-image's origin, in pixels of the scaled image */
    JDIMENSION width, height; /* the whole image's size at the scale */
} SubImage;

/* What the headers say, for a baseline JPEG with one scan of all components. */
typedef struct {
    size_t sof, scan; /* offsets of the SOF marker and of the first entropy-coded byte */
    unsigned width, height, interval, mcu_w, mcu_h;
} Layout;

static int
read_layout(const unsigned char *d, size_t n, Layout *out)
{
    size_t at = 2;
    unsigned components = 0, hmax = 1, vmax = 1;
    out->sof = 0;
    out->interval = 0;
    if (n < 4 || d[0] != 0xFF || d[1] != 0xD8)
        return 0;
    while (at + 4 <= n) {
        if (d[at] != 0xFF)
            return 0;
        unsigned marker = d[at + 1];
        if (marker == 0xFF) { /* fill byte */
            at++;
            continue;
        }
        if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD8))
            return 0; /* a marker with no length, out of place here */
        size_t length = be16(d + at + 2);
        if (length < 2 || at + 2 + length > n)
            return 0;
        const unsigned char *p = d + at + 4;
        if (marker == 0xC0 || marker == 0xC1) {
            if (length < 8 || p[0] != 8)
                return 0;
            out->sof = at;
            out->height = be16(p + 1);
            out->width = be16(p + 3);
            components = p[5];
            if (components == 0 || length < 8 + 3 * components)
                return 0;
            for (unsigned i = 0; i < components; i++) {
                unsigned h = p[7 + 3 * i] >> 4, v = p[7 + 3 * i] & 15;
                if (h < 1 || h > 2 || v < 1 || v > 2) /* usual_sampling's rule */
                    return 0;
                hmax = h > hmax ? h : hmax;
                vmax = v > vmax ? v : vmax;
            }
        } else if ((marker >= 0xC2 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 &&
                    marker != 0xCC) ||
                   marker == 0xDC) {
            return 0; /* progressive, lossless, arithmetic-coded, or a DNL-sized image */
        } else if (marker == 0xDD) {
            if (length < 4)
                return 0;
            out->interval = be16(p);
        } else if (marker == 0xDA) {
            /* one scan must hold every component */
            if (out->sof == 0 || length < 6 + 2 * components || p[0] != components)
                return 0;
            out->scan = at + 2 + length;
            /* a single component's MCU is one block, whatever its sampling factors */
            out->mcu_w = components == 1 ? 8 : 8 * hmax;
            out->mcu_h = components == 1 ? 8 : 8 * vmax;
            return out->width > 0 && out->height > 0 && out->interval > 0;
        }
        at += 2 + length;
    }
    return 0;
}

static JDIMENSION
div_up(long long a, long long b)
{
    return (JDIMENSION)((a + b - 1) / b);
}

/* Build the sub-image of the intervals around region [x0, x1) x [y0, y1) (scaled pixels, one
 * pixel of margin added, as decode() does), when the image has restart intervals that tile its
 * MCU rows and the region leaves some of them out. Markers are renumbered in their new order.
 * Leaves sub->data NULL (the whole stream is decoded instead) for anything else, a stream whose
 * markers are out of order or missing included: the ordinary decode reports what is wrong. */
static NOINLINE void
cut_region(const unsigned char *d, size_t n, int reduce, long long x0, long long y0,
           long long x1, long long y1, long long max_pixels, SubImage *sub)
{
    Layout l = {0};
    sub->data = NULL;
    if (!read_layout(d, n, &l) || (long long)l.width * l.height > max_pixels)
        return;
    unsigned row_mcus = div_up(l.width, l.mcu_w);
    if (row_mcus % l.interval != 0)
        return;
    unsigned per_row = row_mcus / l.interval, mcu_rows = div_up(l.height, l.mcu_h);
    JDIMENSION width = div_up(l.width, reduce), height = div_up(l.height, reduce);
    /* an interval's size in scaled pixels: each 8 x 8 block becomes (8 / reduce)^2 */
    unsigned step_x = l.mcu_w / reduce * l.interval, step_y = l.mcu_h / reduce;
    unsigned c0 = clamp(x0 - 1, width) / step_x, c1 = div_up(clamp(x1 + 1, width), step_x);
    unsigned r0 = clamp(y0 - 1, height) / step_y, r1 = div_up(clamp(y1 + 1, height), step_y);
    if (c1 <= c0 || r1 <= r0 || (c0 == 0 && c1 == per_row && r0 == 0))
        return;
    /* libjpeg-turbo upsamples chroma "fancily" only in an image over 2 chroma samples wide,
     * which one MCU at 1/4 scale is not: two MCUs keep the whole image's upsampling */
    if ((c1 - c0) * l.interval < 2 && per_row > 1) {
        if (c1 < per_row)
            c1++;
        else
            c0--;
    }
    size_t count = (size_t)(r1 - r0) * (c1 - c0);
    unsigned char *out = malloc(n + 2 * count + 2); /* at most: everything, 2 bytes a marker */
    if (out == NULL)
        return;
    memcpy(out, d, l.scan);
    unsigned sub_w = (c1 == per_row ? l.width : c1 * l.interval * l.mcu_w) -
                     c0 * l.interval * l.mcu_w;
    unsigned sub_h = (r1 == mcu_rows ? l.height : r1 * l.mcu_h) - r0 * l.mcu_h;
    out[l.sof + 5] = (unsigned char)(sub_h >> 8);
    out[l.sof + 6] = (unsigned char)sub_h;
    out[l.sof + 7] = (unsigned char)(sub_w >> 8);
    out[l.sof + 8] = (unsigned char)sub_w;
    size_t size = l.scan, start = l.scan, at = l.scan, copied = 0;
    unsigned long long k = 0, last = (unsigned long long)(r1 - 1) * per_row + c1 - 1;
    for (;;) {
        const unsigned char *ff = memchr(d + at, 0xFF, n - at);
        if (ff == NULL || (size_t)(ff - d) + 1 >= n)
            break; /* no end of image: leave it to the ordinary decode */
        size_t j = (size_t)(ff - d);
        unsigned next = d[j + 1];
        if (next == 0x00 || next == 0xFF) { /* a stuffed zero, or fill before a marker */
            at = j + 1;
            continue;
        }
        int restart = next >= 0xD0 && next <= 0xD7;
        if (restart && next - 0xD0 != (k & 7))
            break;
        unsigned row = (unsigned)(k / per_row), column = (unsigned)(k % per_row);
        if (row >= r0 && column >= c0 && column < c1) {
            memcpy(out + size, d + start, j - start);
            size += j - start;
            out[size++] = 0xFF;
            out[size++] = k == last ? 0xD9 : (unsigned char)(0xD0 + (copied & 7));
            copied++;
        }
        if (k == last) {
            sub->data = out;
            sub->len = size;
            sub->left = c0 * step_x;
            sub->top = r0 * step_y;
            sub->width = width;
            sub->height = height;
            return;
        }
        if (!restart)
            break; /* the stream ended before the region's last interval */
        k++;
        start = at = j + 2;
    }
    free(out);
}

/* A decoded region: its pixels and where they lie. */
typedef struct {
    unsigned char *pixels; /* rows x columns x 3, malloc'd */
    JDIMENSION rows, columns, left, top, scaled_width, scaled_height;
    int mode;
} Region;

/* What decode_region() returns besides 0. */
enum { FAILED = -1, NO_MEMORY = -2 };

/* Decode columns [x0, x1) and rows [y0, y1) (at least) of a JPEG at 1/reduce scale into
 * region->pixels. No Python calls: it runs without the GIL, from the cut of the restart
 * intervals to the last row. 0, or FAILED with the reason in `message` (JMSG_LENGTH_MAX
 * bytes), or NO_MEMORY; nothing is left allocated then. */
static int
decode_region(const unsigned char *data, size_t len, int reduce, long long x0, long long y0,
              long long x1, long long y1, long long max_pixels, Region *region, char *message)
{
    SubImage sub;
    cut_region(data, len, reduce, x0, y0, x1, y1, max_pixels, &sub);
    const unsigned char *source = data;
    size_t source_len = len;
    if (sub.data != NULL) {
        source = sub.data;
        source_len = sub.len;
        x0 -= sub.left;
        x1 -= sub.left;
        y0 -= sub.top;
        y1 -= sub.top;
    }

    struct jpeg_decompress_struct cinfo;
    Errors errors;
    /* changed after setjmp and read after a longjmp: volatile, so not cached in registers */
    unsigned char *volatile pixels = NULL;
    JDIMENSION left = 0, top = 0, bottom = 0, width = 0, scaled_width = 0;
    int mode = MODE_REGION, status = 0;

    cinfo.err = jpeg_std_error(&errors.pub);
    errors.pub.error_exit = on_error;
    errors.pub.emit_message = on_message;
    errors.warned = 0;
    if (setjmp(errors.jump)) {
        jpeg_destroy_decompress(&cinfo);
        free(sub.data);
        free(pixels);
        snprintf(message, JMSG_LENGTH_MAX, "libjpeg-turbo: %s", errors.message);
        return FAILED;
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, source, (unsigned long)source_len);
    jpeg_read_header(&cinfo, TRUE);
    if ((long long)cinfo.image_width * cinfo.image_height > max_pixels) {
        snprintf(message, JMSG_LENGTH_MAX, "image of %u x %u pixels is over max_pixels=%lld",
                 cinfo.image_width, cinfo.image_height, max_pixels);
        status = FAILED;
    } else {
        cinfo.out_color_space = JCS_RGB; /* grey too: libjpeg-turbo expands it */
        cinfo.scale_num = 1;
        cinfo.scale_denom = (unsigned int)reduce;
        /* the progressive scans are all entropy-decoded here, into coefficient buffers */
        jpeg_start_decompress(&cinfo);
        if (cinfo.progressive_mode)
            mode = MODE_PROGRESSIVE;
        else if (sub.data != NULL)
            mode = MODE_RESTARTS;
        scaled_width = cinfo.output_width;
        /* One pixel more on each side: "fancy" chroma upsampling treats a cropped region's
         * edges as the image's, so only pixels one inside them equal the full decode's. */
        left = clamp(x0 - 1, cinfo.output_width);
        width = clamp(x1 + 1, cinfo.output_width) - left;
        top = clamp(y0 - 1, cinfo.output_height);
        bottom = clamp(y1 + 1, cinfo.output_height);
        if (width == 0 || bottom <= top) {
            snprintf(message, JMSG_LENGTH_MAX,
                     "region [%lld, %lld) x [%lld, %lld) is empty in the %u x %u image", x0, x1,
                     y0, y1, cinfo.output_width, cinfo.output_height);
            status = FAILED;
        } else if (!usual_sampling(&cinfo)) {
            mode = MODE_ROWS;
            left = 0;
            width = cinfo.output_width;
            top = 0;
        } else if (width < cinfo.output_width) {
            /* A crop that leaves a chroma component under 2 samples wide makes libjpeg-turbo
             * upsample it plainly instead of "fancily": 4 pixels keep the whole decode's. */
            if (width < 4) {
                width = cinfo.output_width < 4 ? cinfo.output_width : 4;
                left = left + width > cinfo.output_width ? cinfo.output_width - width : left;
            }
            if (width < cinfo.output_width)
                jpeg_crop_scanline(&cinfo, &left, &width); /* left moves to an iMCU boundary */
        }
    }
    JDIMENSION rows = bottom - top;
    size_t stride = (size_t)cinfo.output_width * 3; /* the cropped width, after crop_scanline */
    if (status == 0 && (pixels = malloc(stride * rows)) == NULL)
        status = NO_MEMORY;
    if (status != 0) {
        jpeg_destroy_decompress(&cinfo);
        free(sub.data);
        return status;
    }
    JSAMPARRAY row_pointers = (JSAMPARRAY)(*cinfo.mem->alloc_small)(
        (j_common_ptr)&cinfo, JPOOL_IMAGE, rows * sizeof(JSAMPROW));
    for (JDIMENSION i = 0; i < rows; i++)
        row_pointers[i] = pixels + i * stride;
    if (top > 0)
        jpeg_skip_scanlines(&cinfo, top);
    while (cinfo.output_scanline < bottom) {
        JDIMENSION done = cinfo.output_scanline - top;
        if (jpeg_read_scanlines(&cinfo, row_pointers + done, rows - done) == 0) {
            /* only a suspending data source returns no rows; jpeg_mem_src never suspends */
            snprintf(errors.message, sizeof errors.message, "no rows returned at row %u",
                     cinfo.output_scanline);
            longjmp(errors.jump, 1);
        }
    }
    /* Down to the last row, read the stream to its end too, as a whole decode does (a
     * damaged tail shows there); otherwise the rows below the region are never read. */
    if (cinfo.output_scanline == cinfo.output_height)
        jpeg_finish_decompress(&cinfo);
    region->rows = rows;
    region->columns = cinfo.output_width;
    region->scaled_height = cinfo.output_height;
    jpeg_destroy_decompress(&cinfo);
    if (sub.data != NULL) { /* back to the whole image's coordinates */
        free(sub.data);
        left += sub.left;
        top += sub.top;
        scaled_width = sub.width;
        region->scaled_height = sub.height;
    }
    if (errors.warned) {
        free(pixels);
        snprintf(message, JMSG_LENGTH_MAX, "libjpeg-turbo: %s", errors.message);
        return FAILED;
    }
    region->pixels = pixels;
    region->left = left;
    region->top = top;
    region->scaled_width = scaled_width;
    region->mode = mode;
    return 0;
}

static PyObject *
raise_failed(int status, const char *message)
{
    if (status == NO_MEMORY)
        return PyErr_NoMemory();
    PyErr_SetString(PyExc_ValueError, message);
    return NULL;
}

/* A decoded region's pixels, owned, lent through the buffer protocol (numpy.frombuffer):
 * the decode writes them without the GIL, before any Python object can hold them. */
typedef struct {
    PyObject_HEAD unsigned char *data;
    Py_ssize_t len;
} Pixels;

static void
pixels_dealloc(Pixels *self)
{
    free(self->data);
    PyObject_Free(self);
}

static int
pixels_buffer(Pixels *self, Py_buffer *view, int flags)
{
    return PyBuffer_FillInfo(view, (PyObject *)self, self->data, self->len, 0, flags);
}

static PyBufferProcs pixels_procs = {(getbufferproc)pixels_buffer, NULL};

static PyTypeObject PixelsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "fastload.backends._jpegregion.Pixels",
    .tp_basicsize = sizeof(Pixels),
    .tp_dealloc = (destructor)pixels_dealloc,
    .tp_as_buffer = &pixels_procs,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A decoded region's RGB bytes (rows x columns x 3), read as a buffer.",
};

PyDoc_STRVAR(decode_doc,
"decode(data, reduce, x0, y0, x1, y1, max_pixels, /)\n"
"--\n\n"
"Decode columns [x0, x1) and rows [y0, y1) of the JPEG image at 1/reduce scale (pixels of\n"
"the scaled image) to RGB. The delivered region may be larger: columns start on the\n"
"scaled iMCU boundary at or before x0. Returns (pixels, rows, cols, left, top, width,\n"
"height, mode): a buffer of rows x cols x 3 bytes, where it lies in the scaled image\n"
"(left, top), the scaled image's width and height, and 0 (region), 1 (progressive: every\n"
"scan was entropy-decoded), 2 (unusual sampling: full-width rows from the top) or 3\n"
"(restarts: only the restart intervals around the region were entropy-decoded).\n"
"Raises ValueError for data libjpeg cannot decode or warns about, or an image of more\n"
"than max_pixels pixels. The GIL is let go once.");

static int
check_reduce(int reduce)
{
    if (reduce == 1 || reduce == 2 || reduce == 4 || reduce == 8)
        return 0;
    PyErr_Format(PyExc_ValueError, "reduce=%d; valid: 1, 2, 4, 8", reduce);
    return -1;
}

static PyObject *
decode(PyObject *module, PyObject *args)
{
    Py_buffer data;
    int reduce;
    long long x0, y0, x1, y1, max_pixels;
    if (!PyArg_ParseTuple(args, "y*iLLLLL:decode", &data, &reduce, &x0, &y0, &x1, &y1,
                          &max_pixels))
        return NULL;
    if (check_reduce(reduce) < 0) {
        PyBuffer_Release(&data);
        return NULL;
    }
    Region r;
    char message[JMSG_LENGTH_MAX];
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = decode_region((const unsigned char *)data.buf, (size_t)data.len, reduce, x0, y0,
                           x1, y1, max_pixels, &r, message);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    if (status != 0)
        return raise_failed(status, message);
    Pixels *pixels = PyObject_New(Pixels, &PixelsType);
    if (pixels == NULL) {
        free(r.pixels);
        return NULL;
    }
    pixels->data = r.pixels;
    pixels->len = (Py_ssize_t)r.rows * r.columns * 3;
    return Py_BuildValue("(NIIIIIIi)", (PyObject *)pixels, r.rows, r.columns, r.left, r.top,
                         r.scaled_width, r.scaled_height, r.mode);
}

/* The no-GIL part of decode_resized: decode the region holding the box, resize the box
 * into `out` (3 x height x width bytes; with `floats`, the floats it says). 0 and the
 * region's facts in `r` (its pixels freed), or FAILED with the reason in `message`, or
 * NO_MEMORY. */
static int
decode_box_resized(const unsigned char *data, size_t len, int reduce, const double box[4],
                   long long max_pixels, int width, int height, int cubic, int mirror,
                   void *out, const FloatOut *floats, Region *r, char *message)
{
    /* the whole pixels that cover the box (the box itself where it lies on whole pixels) */
    long long x0 = (long long)floor(box[0]), y0 = (long long)floor(box[1]);
    long long x1 = (long long)ceil(box[2]), y1 = (long long)ceil(box[3]);
    int status = decode_region(data, len, reduce, x0, y0, x1, y1, max_pixels, r, message);
    if (status != 0)
        return status;
    size_t stride = (size_t)r->columns * 3;
    if (x0 < r->left || y0 < r->top || x1 > (long long)r->left + r->columns ||
        y1 > (long long)r->top + r->rows) {
        snprintf(message, JMSG_LENGTH_MAX,
                 "box (%g, %g, %g, %g) is not inside the %u x %u image", box[0], box[1], box[2],
                 box[3], r->scaled_width, r->scaled_height);
        status = FAILED;
    } else {
        size_t at = (size_t)(y0 - r->top) * stride + (size_t)(x0 - r->left) * 3;
        ResizeJob job = {r->pixels + at, stride, (size_t)r->rows * stride - at, (int)(x1 - x0),
                         (int)(y1 - y0), 3, width, height, cubic, mirror,
                         floats == NULL ? (uint8_t *)out : NULL, box[0] - (double)x0,
                         box[1] - (double)y0, box[2] - box[0], box[3] - box[1], floats,
                         floats == NULL ? NULL : (float *)out};
        if (resize_planes(&job) < 0)
            status = NO_MEMORY;
    }
    free(r->pixels);
    r->pixels = NULL;
    return status;
}

/* A box refused: empty, reaching before the image, past what a long long holds, or NaN. */
static int
bad_box(const double box[4], int width, int height)
{
    const double most = 9e15; /* whole numbers are exact in a double up to 2**53 */
    return width < 1 || height < 1 || !(box[0] >= 0.0) || !(box[1] >= 0.0) ||
           !(box[2] > box[0]) || !(box[3] > box[1]) || !(box[2] < most) || !(box[3] < most);
}

PyDoc_STRVAR(decode_resized_doc,
"decode_resized(data, reduce, x0, y0, x1, y1, max_pixels, width, height, cubic, mirror, /)\n"
"--\n\n"
"decode(), then columns [x0, x1) and rows [y0, y1) of the scaled image resized to width x\n"
"height as torch's antialiased bilinear (cubic: bicubic) uint8 resize does, mirrored\n"
"left-right if asked, all with the GIL let go once. The box may fall between pixels (floats):\n"
"then the kernel is centred on the box's own positions and reads the whole pixels that\n"
"cover it. Returns (planes, width, height, mode):\n"
"a bytearray of 3 x height x width bytes (channels first), the scaled image's size and\n"
"decode()'s mode. Raises as decode() does, and ValueError for a box outside the image.");

static PyObject *
decode_resized(PyObject *module, PyObject *args)
{
    Py_buffer data;
    int reduce, width, height, cubic, mirror;
    long long max_pixels;
    double box[4];
    if (!PyArg_ParseTuple(args, "y*iddddLiipp:decode_resized", &data, &reduce, &box[0],
                          &box[1], &box[2], &box[3], &max_pixels, &width, &height, &cubic,
                          &mirror))
        return NULL;
    if (check_reduce(reduce) < 0) {
        PyBuffer_Release(&data);
        return NULL;
    }
    if (bad_box(box, width, height)) {
        PyBuffer_Release(&data);
        PyObject *shown = Py_BuildValue("(dddd)", box[0], box[1], box[2], box[3]);
        if (shown != NULL)
            PyErr_Format(PyExc_ValueError, "bad resize: box %R to %d x %d", shown, width, height);
        Py_XDECREF(shown);
        return NULL;
    }
    PyObject *planes = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)3 * width * height);
    if (planes == NULL) {
        PyBuffer_Release(&data);
        return NULL;
    }
    unsigned char *out = (unsigned char *)PyByteArray_AS_STRING(planes);
    Region r;
    char message[JMSG_LENGTH_MAX];
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = decode_box_resized((const unsigned char *)data.buf, (size_t)data.len, reduce, box,
                                max_pixels, width, height, cubic, mirror, out, NULL, &r,
                                message);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    if (status != 0) {
        Py_DECREF(planes);
        return raise_failed(status, message);
    }
    return Py_BuildValue("(NIIi)", planes, r.scaled_width, r.scaled_height, r.mode);
}

/* What every job of a batch call has, first in its struct: its bytes, where its planes go,
 * how it went. */
typedef struct {
    Py_buffer data;
    Py_ssize_t at; /* where its planes start in the output */
    int status;    /* the mode, or FAILED (or, for decode_drawn_many, LEFT) */
} Job;

/* Whether `size` bytes fit at `slot` of an output of `out_len` bytes. */
static int
slot_fits(Py_ssize_t slot, Py_ssize_t size, Py_ssize_t out_len)
{
    return slot >= 0 && size <= out_len && slot <= (out_len - size) / size;
}

/* The list of the jobs' statuses (`n` jobs of `stride` bytes each, a Job first in each), every
 * job's bytes and the output released, the jobs freed; NULL with an exception set. */
static PyObject *
finish_jobs(void *jobs, size_t stride, Py_ssize_t n, Py_buffer *out)
{
    PyObject *statuses = PyList_New(n);
    for (Py_ssize_t k = 0; k < n; k++) {
        Job *job = (Job *)((char *)jobs + (size_t)k * stride);
        PyBuffer_Release(&job->data);
        PyObject *status = statuses != NULL ? PyLong_FromLong(job->status) : NULL;
        if (status == NULL)
            Py_CLEAR(statuses);
        else
            PyList_SET_ITEM(statuses, k, status);
    }
    PyMem_Free(jobs);
    PyBuffer_Release(out);
    return statuses;
}

/* A batch call's output taken writable into `out`: bytes where `spec` is None, else float32
 * values made as `spec`, (factors, shifts, interleaved), says (read into `f`, see FloatOut).
 * The bytes each value takes; -1 with an exception set, `out` not taken. */
static int
take_output(PyObject *obj, PyObject *spec, Py_buffer *out, FloatOut *f)
{
    const int floats = spec != Py_None;
    if (floats) {
        double factor[3], shift[3];
        if (!PyTuple_Check(spec)) {
            PyErr_Format(PyExc_TypeError, "floats is a %.100s, not a tuple",
                         Py_TYPE(spec)->tp_name);
            return -1;
        }
        if (!PyArg_ParseTuple(spec, "(ddd)(ddd)p:floats", &factor[0], &factor[1], &factor[2],
                              &shift[0], &shift[1], &shift[2], &f->interleaved))
            return -1;
        for (int c = 0; c < 3; c++) {
            f->factor[c] = (float)factor[c];
            f->shift[c] = (float)shift[c];
        }
    }
    if (PyObject_GetBuffer(obj, out, PyBUF_WRITABLE | PyBUF_FORMAT) < 0)
        return -1;
    const char *format = out->format == NULL ? "B" : out->format;
    if (strcmp(format, floats ? "f" : "B") != 0) {
        PyErr_Format(PyExc_ValueError, "out holds values of format '%s'; it must be '%s' (%s)",
                     format, floats ? "f" : "B", floats ? "float32, as floats asks" : "uint8");
        PyBuffer_Release(out);
        return -1;
    }
    return floats ? 4 : 1;
}

/* One job of decode_resized_many, parsed while the GIL is held. */
typedef struct {
    Job job;
    int reduce, width, height, cubic, mirror;
    long long max_pixels;
    double box[4];
} ManyJob;

/* Parse `jobs` into `parsed` (n of them); -1 with an exception set, every buffer taken so far
 * released. */
static int
parse_jobs(PyObject *jobs, ManyJob *parsed, Py_ssize_t n, Py_ssize_t out_len, int itemsize)
{
    for (Py_ssize_t k = 0; k < n; k++) {
        ManyJob *j = &parsed[k];
        Py_ssize_t slot;
        PyObject *item = PyList_GET_ITEM(jobs, k);
        if (!PyTuple_Check(item)) {
            PyErr_Format(PyExc_TypeError, "job %zd is a %.100s, not a tuple", k,
                         Py_TYPE(item)->tp_name);
            for (Py_ssize_t i = 0; i < k; i++)
                PyBuffer_Release(&parsed[i].job.data);
            return -1;
        }
        int ok = PyArg_ParseTuple(item,
                                  "y*iddddLiippn:decode_resized_many job", &j->job.data,
                                  &j->reduce, &j->box[0], &j->box[1], &j->box[2], &j->box[3],
                                  &j->max_pixels, &j->width, &j->height, &j->cubic, &j->mirror,
                                  &slot);
        if (ok) {
            Py_ssize_t size = (Py_ssize_t)3 * itemsize * j->width * j->height;
            if (check_reduce(j->reduce) < 0)
                ok = 0;
            else if (bad_box(j->box, j->width, j->height) || !slot_fits(slot, size, out_len)) {
                PyObject *shown = Py_BuildValue("(dddd)", j->box[0], j->box[1], j->box[2],
                                                j->box[3]);
                if (shown != NULL)
                    PyErr_Format(PyExc_ValueError,
                                 "bad job %zd: box %R to %d x %d in slot %zd of %zd output bytes",
                                 k, shown, j->width, j->height, slot, out_len);
                Py_XDECREF(shown);
                ok = 0;
            }
            if (!ok)
                PyBuffer_Release(&j->job.data);
            j->job.at = slot * size;
        }
        if (!ok) {
            for (Py_ssize_t i = 0; i < k; i++)
                PyBuffer_Release(&parsed[i].job.data);
            return -1;
        }
    }
    return 0;
}

PyDoc_STRVAR(decode_resized_many_doc,
"decode_resized_many(jobs, out, floats=None, /)\n"
"--\n\n"
"decode_resized() for each job of a list, the GIL let go once for all of them. A job is\n"
"(data, reduce, x0, y0, x1, y1, max_pixels, width, height, cubic, mirror, slot): its 3 x\n"
"height x width planes are written into the writable uint8 buffer `out` from value\n"
"slot * 3 * height * width. With floats = (factors, shifts, interleaved), three of each,\n"
"`out` holds float32 and each byte v of channel c is written as v * factors[c] + shifts[c]\n"
"(float32 arithmetic, a multiply then an add) as it is resampled: as planes, or interleaved\n"
"pixel by pixel (height x width x 3 a slot). Returns a list, per job, of decode()'s mode, or\n"
"-1 where that file failed (decode_resized() on it alone says why). Raises ValueError for a\n"
"malformed job or an output of the wrong type.");

static PyObject *
decode_resized_many(PyObject *module, PyObject *args)
{
    PyObject *jobs, *target, *spec = Py_None;
    Py_buffer out;
    FloatOut floats;
    if (!PyArg_ParseTuple(args, "O!O|O:decode_resized_many", &PyList_Type, &jobs, &target,
                          &spec))
        return NULL;
    const int itemsize = take_output(target, spec, &out, &floats);
    if (itemsize < 0)
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(jobs);
    ManyJob *parsed = PyMem_Calloc(n > 0 ? (size_t)n : 1, sizeof(ManyJob));
    if (parsed == NULL) {
        PyBuffer_Release(&out);
        return PyErr_NoMemory();
    }
    if (parse_jobs(jobs, parsed, n, out.len, itemsize) < 0) {
        PyMem_Free(parsed);
        PyBuffer_Release(&out);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < n; k++) {
        ManyJob *j = &parsed[k];
        Region r;
        char message[JMSG_LENGTH_MAX];
        int status = decode_box_resized(
            (const unsigned char *)j->job.data.buf, (size_t)j->job.data.len, j->reduce, j->box,
            j->max_pixels, j->width, j->height, j->cubic, j->mirror,
            (unsigned char *)out.buf + j->job.at, itemsize == 4 ? &floats : NULL, &r, message);
        j->job.status = status == 0 ? r.mode : FAILED;
    }
    Py_END_ALLOW_THREADS
    return finish_jobs(parsed, sizeof(ManyJob), n, &out);
}

/* A recipe tuple (see decode_drawn_many's doc) read into `r`; -1 with an exception set. */
static int
parse_recipe(PyObject *recipe, CropRecipe *r)
{
    if (!PyTuple_Check(recipe)) {
        PyErr_Format(PyExc_TypeError, "recipe is a %.100s, not a tuple", Py_TYPE(recipe)->tp_name);
        return -1;
    }
    if (!PyArg_ParseTuple(recipe, "iiddddpdppL:recipe", &r->width, &r->height, &r->scale_lo,
                          &r->scale_hi, &r->ratio_lo, &r->ratio_hi, &r->cubic, &r->flip,
                          &r->fused, &r->exif, &r->max_pixels))
        return -1;
    if (r->width < 1 || r->height < 1 || !(r->scale_lo <= r->scale_hi) ||
        !(r->ratio_lo > 0.0) || !(r->ratio_lo <= r->ratio_hi)) {
        PyErr_Format(PyExc_ValueError, "bad recipe %R: sizes must be positive, ranges (min, max)",
                     recipe);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(plan_crop_doc,
"plan_crop(data, seed, recipe, /)\n"
"--\n\n"
"The plan decode_drawn_many makes for one JPEG: (reduce, x0, y0, x1, y1, mirror), the box\n"
"in the pixels of the image at 1 / reduce; None where it leaves the sample to Python.");

static PyObject *
plan_crop_one(PyObject *module, PyObject *args)
{
    Py_buffer data;
    unsigned long long seed;
    PyObject *recipe;
    CropRecipe r;
    CropPlan plan;
    if (!PyArg_ParseTuple(args, "y*KO:plan_crop", &data, &seed, &recipe))
        return NULL;
    if (parse_recipe(recipe, &r) < 0) {
        PyBuffer_Release(&data);
        return NULL;
    }
    int status = plan_crop((const unsigned char *)data.buf, (size_t)data.len, seed, &r, &plan);
    PyBuffer_Release(&data);
    if (status < 0)
        Py_RETURN_NONE;
    return Py_BuildValue("(iddddO)", plan.reduce, plan.box[0], plan.box[1], plan.box[2],
                         plan.box[3], plan.mirror ? Py_True : Py_False);
}

/* One sample of decode_drawn_many, parsed while the GIL is held. */
typedef struct {
    Job job; /* its status: the mode; FAILED; or LEFT, not planned here */
    unsigned long long seed;
} DrawnJob;

enum { LEFT = -2 };

/* Parse `jobs` into `parsed`; -1 with an exception set, every buffer taken so far released. */
static int
parse_drawn(PyObject *jobs, DrawnJob *parsed, Py_ssize_t n, Py_ssize_t size, Py_ssize_t out_len)
{
    for (Py_ssize_t k = 0; k < n; k++) {
        DrawnJob *j = &parsed[k];
        Py_ssize_t slot;
        PyObject *item = PyList_GET_ITEM(jobs, k);
        int ok = PyTuple_Check(item) && PyArg_ParseTuple(item, "ny*K:decode_drawn_many job",
                                                         &slot, &j->job.data, &j->seed);
        if (ok && !slot_fits(slot, size, out_len)) {
            PyErr_Format(PyExc_ValueError, "bad job %zd: slot %zd of %zd output bytes", k, slot,
                         out_len);
            PyBuffer_Release(&j->job.data);
            ok = 0;
        } else if (!ok && !PyErr_Occurred()) {
            PyErr_Format(PyExc_TypeError, "job %zd is a %.100s, not a tuple", k,
                         Py_TYPE(item)->tp_name);
        }
        if (!ok) {
            for (Py_ssize_t i = 0; i < k; i++)
                PyBuffer_Release(&parsed[i].job.data);
            return -1;
        }
        j->job.at = slot * size;
    }
    return 0;
}

PyDoc_STRVAR(decode_drawn_many_doc,
"decode_drawn_many(jobs, recipe, out, floats=None, /)\n"
"--\n\n"
"A random crop of each JPEG drawn, planned, decoded and resized into the batch, the GIL let\n"
"go once for all of them. A job is (slot, data, seed). The recipe is (width, height,\n"
"scale_lo, scale_hi, ratio_lo, ratio_hi, cubic, flip, fused, exif, max_pixels):\n"
"RandomResizedCrop(size=(height, width), scale, ratio), bicubic or bilinear, antialiased,\n"
"then a RandomHorizontalFlip(p=flip) where flip >= 0, drawn from torch's CPU generator\n"
"seeded with the job's seed (fused: its float32 uniform_ rounds its multiply-add once),\n"
"EXIF orientations applied (exif) and headers over max_pixels refused as fastload's\n"
"planner does. Returns a list, per job, of decode()'s mode; -1 where the file failed to\n"
"decode; -2 where it was not planned here (fastload's Python planner plans it). `floats`:\n"
"a float32 output, as decode_resized_many() takes it.");

static PyObject *
decode_drawn_many(PyObject *module, PyObject *args)
{
    PyObject *jobs, *recipe, *target, *spec = Py_None;
    Py_buffer out;
    CropRecipe r;
    FloatOut floats;
    if (!PyArg_ParseTuple(args, "O!OO|O:decode_drawn_many", &PyList_Type, &jobs, &recipe,
                          &target, &spec))
        return NULL;
    const int itemsize = take_output(target, spec, &out, &floats);
    if (itemsize < 0)
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(jobs);
    DrawnJob *parsed = parse_recipe(recipe, &r) < 0
                           ? NULL
                           : PyMem_Calloc(n > 0 ? (size_t)n : 1, sizeof(DrawnJob));
    if (parsed == NULL) {
        PyBuffer_Release(&out);
        return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    }
    if (parse_drawn(jobs, parsed, n, (Py_ssize_t)3 * itemsize * r.width * r.height, out.len) <
        0) {
        PyMem_Free(parsed);
        PyBuffer_Release(&out);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < n; k++) {
        DrawnJob *j = &parsed[k];
        CropPlan plan;
        Region region;
        char message[JMSG_LENGTH_MAX];
        const unsigned char *data = (const unsigned char *)j->job.data.buf;
        const size_t len = (size_t)j->job.data.len;
        if (plan_crop(data, len, j->seed, &r, &plan) < 0) {
            j->job.status = LEFT;
            continue;
        }
        int status = decode_box_resized(data, len, plan.reduce, plan.box, r.max_pixels, r.width,
                                        r.height, r.cubic, plan.mirror,
                                        (unsigned char *)out.buf + j->job.at,
                                        itemsize == 4 ? &floats : NULL, &region, message);
        j->job.status = status == 0 ? region.mode : FAILED;
    }
    Py_END_ALLOW_THREADS
    return finish_jobs(parsed, sizeof(DrawnJob), n, &out);
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_VARARGS, decode_doc},
    {"decode_resized", decode_resized, METH_VARARGS, decode_resized_doc},
    {"decode_resized_many", decode_resized_many, METH_VARARGS, decode_resized_many_doc},
    {"decode_drawn_many", decode_drawn_many, METH_VARARGS, decode_drawn_many_doc},
    {"plan_crop", plan_crop_one, METH_VARARGS, plan_crop_doc},
    {"add_restarts", add_restarts, METH_VARARGS, add_restarts_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "_jpegregion",
    "Region decoding at a DCT scale with libjpeg-turbo's libjpeg API.",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__jpegregion(void)
{
    if (PyType_Ready(&PixelsType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
#ifdef LIBJPEG_TURBO_VERSION
    if (PyModule_AddStringConstant(m, "LIBJPEG_TURBO_VERSION",
                                   STRINGIFY(LIBJPEG_TURBO_VERSION)) < 0) {
#else
    if (PyModule_AddStringConstant(m, "LIBJPEG_TURBO_VERSION", "unknown") < 0) {
#endif
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
