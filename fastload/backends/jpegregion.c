/*
 * fastload.backends._jpegregion: decode one region of a JPEG at a DCT scale, with the libjpeg
 * API of libjpeg-turbo (>= 1.5; Debian/Ubuntu: libjpeg62-turbo-dev or libjpeg-turbo8-dev).
 *
 * A baseline JPEG is one Huffman-coded stream, so every row above the region must still be
 * entropy-decoded; jpeg_skip_scanlines() does only that for them (no inverse DCT, upsampling or
 * colour conversion), jpeg_crop_scanline() limits those steps to the region's columns, and the
 * decode stops after the region's last row, leaving the rest of the stream unread.
 *
 * Python's side (fastload/backends/region.py) plans the region; this file only decodes it.
 * Errors from libjpeg come back here by longjmp and leave as ValueError; every allocation is
 * in libjpeg's pools or the returned bytearray, so nothing leaks on an error. The GIL is
 * released while libjpeg works.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <setjmp.h>
#include <stdio.h> /* jpeglib.h needs FILE and size_t first */

#include <jpeglib.h>

#define STRINGIFY_(x) #x
#define STRINGIFY(x) STRINGIFY_(x)

/* Whole-image decode modes, returned to Python for its counters. */
enum { MODE_REGION = 0, MODE_PROGRESSIVE = 1, MODE_ROWS = 2 };

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

PyDoc_STRVAR(decode_doc,
"decode(data, reduce, x0, y0, x1, y1, max_pixels, /)\n"
"--\n\n"
"Decode columns [x0, x1) and rows [y0, y1) of the JPEG image at 1/reduce scale (pixels of\n"
"the scaled image) to RGB. The delivered region may be larger: columns start on the\n"
"scaled iMCU boundary at or before x0. Returns (pixels, rows, cols, left, top, width,\n"
"height, mode): a bytearray of rows x cols x 3 bytes, where it lies in the scaled image\n"
"(left, top), the scaled image's width and height, and 0 (region), 1 (progressive: every\n"
"scan was entropy-decoded) or 2 (unusual sampling: full-width rows from the top).\n"
"Raises ValueError for data libjpeg cannot decode or warns about, or an image of more\n"
"than max_pixels pixels.");

static PyObject *
decode(PyObject *module, PyObject *args)
{
    Py_buffer data;
    int reduce;
    long long x0, y0, x1, y1, max_pixels;
    if (!PyArg_ParseTuple(args, "y*iLLLLL:decode", &data, &reduce, &x0, &y0, &x1, &y1,
                          &max_pixels))
        return NULL;
    if (reduce != 1 && reduce != 2 && reduce != 4 && reduce != 8) {
        PyBuffer_Release(&data);
        return PyErr_Format(PyExc_ValueError, "reduce=%d; valid: 1, 2, 4, 8", reduce);
    }

    struct jpeg_decompress_struct cinfo;
    Errors errors;
    /* changed after setjmp and read after a longjmp: volatile, so not cached in registers */
    PyThreadState *volatile unlocked = NULL;
    PyObject *volatile pixels = NULL;
    char refused[160] = "";
    JDIMENSION left = 0, top = 0, bottom = 0, width = 0, scaled_width = 0;
    int mode = MODE_REGION;

    cinfo.err = jpeg_std_error(&errors.pub);
    errors.pub.error_exit = on_error;
    errors.pub.emit_message = on_message;
    errors.warned = 0;
    if (setjmp(errors.jump)) {
        if (unlocked != NULL)
            PyEval_RestoreThread(unlocked);
        jpeg_destroy_decompress(&cinfo);
        PyBuffer_Release(&data);
        Py_XDECREF(pixels);
        return PyErr_Format(PyExc_ValueError, "libjpeg-turbo: %s", errors.message);
    }
    jpeg_create_decompress(&cinfo);

    unlocked = PyEval_SaveThread();
    jpeg_mem_src(&cinfo, (const unsigned char *)data.buf, (unsigned long)data.len);
    jpeg_read_header(&cinfo, TRUE);
    if ((long long)cinfo.image_width * cinfo.image_height > max_pixels) {
        snprintf(refused, sizeof refused, "image of %u x %u pixels is over max_pixels=%lld",
                 cinfo.image_width, cinfo.image_height, max_pixels);
    } else {
        cinfo.out_color_space = JCS_RGB; /* grey too: libjpeg-turbo expands it */
        cinfo.scale_num = 1;
        cinfo.scale_denom = (unsigned int)reduce;
        /* the progressive scans are all entropy-decoded here, into coefficient buffers */
        jpeg_start_decompress(&cinfo);
        if (cinfo.progressive_mode)
            mode = MODE_PROGRESSIVE;
        scaled_width = cinfo.output_width;
        /* One pixel more on each side: "fancy" chroma upsampling treats a cropped region's
         * edges as the image's, so only pixels one inside them equal the full decode's. */
        left = clamp(x0 - 1, cinfo.output_width);
        width = clamp(x1 + 1, cinfo.output_width) - left;
        top = clamp(y0 - 1, cinfo.output_height);
        bottom = clamp(y1 + 1, cinfo.output_height);
        if (width == 0 || bottom <= top) {
            snprintf(refused, sizeof refused,
                     "region [%lld, %lld) x [%lld, %lld) is empty in the %u x %u image", x0, x1,
                     y0, y1, cinfo.output_width, cinfo.output_height);
        } else if (!usual_sampling(&cinfo)) {
            mode = MODE_ROWS;
            left = 0;
            width = cinfo.output_width;
            top = 0;
        } else if (width < cinfo.output_width) {
            jpeg_crop_scanline(&cinfo, &left, &width); /* left moves to an iMCU boundary */
        }
    }
    PyEval_RestoreThread(unlocked);
    unlocked = NULL;
    if (refused[0] != '\0') {
        jpeg_destroy_decompress(&cinfo);
        PyBuffer_Release(&data);
        PyErr_SetString(PyExc_ValueError, refused);
        return NULL;
    }

    JDIMENSION rows = bottom - top;
    size_t stride = (size_t)cinfo.output_width * 3; /* the cropped width, after crop_scanline */
    pixels = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(stride * rows));
    if (pixels == NULL) {
        jpeg_destroy_decompress(&cinfo);
        PyBuffer_Release(&data);
        return NULL;
    }
    unsigned char *out = (unsigned char *)PyByteArray_AS_STRING(pixels);

    unlocked = PyEval_SaveThread();
    JSAMPARRAY row_pointers = (JSAMPARRAY)(*cinfo.mem->alloc_small)(
        (j_common_ptr)&cinfo, JPOOL_IMAGE, rows * sizeof(JSAMPROW));
    for (JDIMENSION i = 0; i < rows; i++)
        row_pointers[i] = out + i * stride;
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
    PyEval_RestoreThread(unlocked);
    unlocked = NULL;
    JDIMENSION columns = cinfo.output_width, scaled_height = cinfo.output_height;
    jpeg_destroy_decompress(&cinfo);
    PyBuffer_Release(&data);
    if (errors.warned) {
        Py_DECREF(pixels);
        return PyErr_Format(PyExc_ValueError, "libjpeg-turbo: %s", errors.message);
    }
    return Py_BuildValue("(NIIIIIIi)", pixels, rows, columns, left, top, scaled_width,
                         scaled_height, mode);
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_VARARGS, decode_doc},
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
